import ArgumentParser
import Foundation
import Logging
import VLog
import VLogServer
import VLogServerTesting
import VLogSync
import VLogTesting

// MARK: - Local writes

/// `vlog-crash writer`: the child of the writes scenario. Writes batches of three notes, one
/// durable transaction each, and prints `ack K` once batch K is committed.
struct Writer: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "writer", abstract: "Write batches until killed (the writes scenario's child).",
    shouldDisplay: false)

  @Option var store: String
  @Option var plant: Plant?

  func run() throws {
    let store = try NoteStore.open(at: store)
    for batch in 0... {
      let acknowledge = { FileHandle.standardOutput.write(Data("ack \(batch)\n".utf8)) }
      if plant == .acknowledgeBeforeCommit { acknowledge() }
      try store.write { changes in
        for item in 0..<3 { changes.createNote(text: "b\(batch)-\(item)") }
      }
      if plant == nil { acknowledge() }
    }
  }
}

/// The numbers after `prefix` on the lines that start with it.
func numbers(after prefix: String, in lines: [String]) -> [Int] {
  lines.compactMap { $0.hasPrefix(prefix) ? Int($0.dropFirst(prefix.count)) : nil }
}

/// `vlog-crash planted-server`: the server scenario's child when a bug is planted: the server
/// `vlog serve` runs, on LMDB, with the bug.
struct PlantedServer: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "planted-server",
    abstract: "Serve a data directory with a planted bug (the server scenario's child).",
    shouldDisplay: false)

  @Option var data: String
  @Option var plant: Plant

  func run() async throws {
    var configuration = SyncServer.Configuration(passwordCost: .testing)
    configuration.acknowledgesPushesBeforeCommit = plant == .acknowledgeBeforeCommit
    var logger = Logger(label: "vlog-crash")
    logger.logLevel = .critical
    let server = try SyncServer.open(
      dataDirectory: data, configuration: configuration, logger: logger)
    try await server.run(host: "127.0.0.1", port: 0) { port in
      FileHandle.standardOutput.write(Data("serving on http://127.0.0.1:\(port)\n".utf8))
    }
  }
}

/// Checks that the batches acknowledged are all there, and every batch there is whole.
func checkBatches(
  texts: [String], acknowledged: Set<String>, batchSize: Int, summary: inout Summary
) throws {
  var found: [String: Int] = [:]
  for text in texts {
    guard let dash = text.lastIndex(of: "-") else { continue }
    found[String(text[..<dash]), default: 0] += 1
  }
  for (batch, count) in found where count != batchSize {
    throw Failure("batch \(batch) is partial: \(count) of \(batchSize) changes")
  }
  let lost = acknowledged.subtracting(found.keys)
  guard lost.isEmpty else {
    throw Failure("\(lost.count) acknowledged batches lost: \(lost.sorted().prefix(5))")
  }
  summary.acknowledged += acknowledged.count
  summary.survivedUnacknowledged += found.count - acknowledged.count
}

func crashWrites(
  root: String, tools: Tools, plant: Plant?, using generator: inout SeededGenerator,
  summary: inout Summary
) async throws {
  let path = root + "/store"
  var arguments = ["writer", "--store", path]
  if let plant { arguments += ["--plant", plant.rawValue] }
  let child = try Child(tools.harness, arguments)
  try await sleepRandomly(60...400, using: &generator)
  if child.kill() { summary.killed += 1 } else { summary.finished += 1 }
  let acknowledged = Set(numbers(after: "ack ", in: child.lines).map { "b\($0)" })
  let store = try NoteStore.open(at: path)
  defer { store.close() }
  let faults = try store.verify()
  guard faults.isEmpty else { throw Failure("verify: \(faults)") }
  let texts = try store.events().compactMap { logged -> String? in
    guard case .textSet(_, let text, _) = logged.event.change else { return nil }
    return text
  }
  try checkBatches(texts: texts, acknowledged: acknowledged, batchSize: 3, summary: &summary)
}

// MARK: - Import

/// A JSON Lines file of `notes` notes (two events each), as `vlog export` writes them.
func makeExport(at path: String, notes: Int) throws -> Int {
  let store = try NoteStore.open(at: path + ".store", options: .init(durability: .noSync))
  defer {
    store.close()
    try? FileManager.default.removeItem(atPath: path + ".store")
  }
  try store.write { changes in
    for index in 0..<notes { changes.createNote(text: "imported \(index)") }
  }
  let encoder = JSONEncoder()
  var data = Data()
  let events = try store.events()
  for logged in events {
    data.append(try encoder.encode(WireEvent(logged.event)))
    data.append(0x0A)
  }
  try data.write(to: URL(fileURLWithPath: path))
  return events.count
}

func crashImport(
  root: String, tools: Tools, using generator: inout SeededGenerator, summary: inout Summary
) async throws {
  let file = root + "/export.jsonl"
  // Big enough that a kill often lands inside the import, small enough that some finish.
  let count = try makeExport(at: file, notes: 1000)
  let path = root + "/store"
  let child = try Child(tools.vlog, ["import", file, "--store", path])
  try await sleepRandomly(10...300, using: &generator)
  let killed = child.kill()
  if killed { summary.killed += 1 } else { summary.finished += 1 }
  let finishedWell = !killed && child.process.terminationStatus == 0
  guard FileManager.default.fileExists(atPath: path + "/data.mdb") else {
    guard !finishedWell else { throw Failure("the import said it succeeded; no store") }
    return
  }
  let store = try NoteStore.open(at: path)
  defer { store.close() }
  let faults = try store.verify()
  guard faults.isEmpty else { throw Failure("verify: \(faults)") }
  let held = try store.eventCount()
  if finishedWell {
    guard held == count else { throw Failure("the import succeeded; \(held) of \(count) events") }
    summary.acknowledged += 1
  } else if held == count {
    summary.survivedUnacknowledged += 1
  } else if held != 0 {
    throw Failure("a killed import left \(held) of \(count) events: the import is partial")
  }
}

// MARK: - Server

func crashServer(
  root: String, tools: Tools, plant: Plant?, using generator: inout SeededGenerator,
  summary: inout Summary
) async throws {
  let data = root + "/server"
  let child =
    if let plant {
      try Child(tools.harness, ["planted-server", "--data", data, "--plant", plant.rawValue])
    } else {
      try Child(
        tools.vlog,
        [
          "serve", "--data", data, "--port", "0", "--password-cost", "10", "--sign-ups-per-address",
          "1000000",
          "--log-level",
          "critical",
        ]
      )
    }
  var url: String?
  for _ in 0..<500 where url == nil {
    url = child.lines.first { $0.contains("serving on ") }?.split(separator: " ").last.map(
      String.init)
    if url == nil { try await Task.sleep(for: .milliseconds(10)) }
  }
  guard let url else {
    _ = child.kill()
    throw Failure("the server did not start")
  }
  let caller = APICaller(transport: HTTPTransport(baseURL: url, timeout: .seconds(5)))
  // Two accounts, pushed to in turn, so that their logs interleave in the server's database.
  let accounts = (0..<2).map {
    Credentials(username: "crash\($0)", password: "correct horse battery")
  }
  var tokens: [String] = []
  for credentials in accounts {
    _ = try await caller.createClearAccount(
      username: credentials.username, password: credentials.password, cost: .testing)
    tokens.append(
      try await caller.signIn(
        username: credentials.username, password: credentials.password, floor: .testing
      ).session.token)
  }
  let acknowledged = Acknowledged()
  let pushers = (0..<4).map { pusher in
    Task { [tokens] in
      let replica = ReplicaID(Identifier(high: 0xC0FFEE, low: UInt64(pusher)))
      let note = NoteID(Identifier(high: 0xF00D, low: UInt64(pusher)))
      for batch in 0... {
        let milliseconds = UInt64(Date().timeIntervalSince1970 * 1000)
        let events = (0..<5).map { item in
          Event(
            stamp: Stamp(
              time: HybridTime(milliseconds: milliseconds, counter: UInt16(item)),
              replica: replica),
            change: .textSet(note, text: "p\(pusher)b\(batch)-\(item)"))
        }
        let result = await caller.sync(
          SyncPush(cursor: 0, events: events, limit: 1), token: tokens[pusher % 2])
        guard result.value != nil else {
          // No answer is the kill; an answer that is an error is a finding.
          if let status = result.status { acknowledged.fail("push answered \(status)") }
          return
        }
        acknowledged.insert("p\(pusher)b\(batch)")
        // A millisecond apart, so every batch has stamps of its own.
        try? await Task.sleep(for: .milliseconds(1))
      }
    }
  }
  try await sleepRandomly(50...400, using: &generator)
  if child.kill() { summary.killed += 1 } else { summary.finished += 1 }
  for pusher in pushers { await pusher.value }
  if let failure = acknowledged.failures.first { throw Failure(failure) }
  // Restart on the same data and read everything back.
  var logger = Logger(label: "vlog-crash")
  logger.logLevel = .critical
  let server = try SyncServer.open(
    dataDirectory: data, configuration: .init(passwordCost: .testing), logger: logger)
  defer { server.close() }
  let verification = try await server.verify()
  guard verification.faults.isEmpty else { throw Failure("verify: \(verification.faults)") }
  let local = APICaller(transport: InProcessTransport(server: server))
  for (index, credentials) in accounts.enumerated() {
    let again = try await local.signIn(
      username: credentials.username, password: credentials.password, floor: .testing
    ).session.token
    var texts: [String] = []
    var cursor: UInt64 = 0
    while true {
      let page = try await local.sync(SyncPush(cursor: cursor, events: []), token: again).get()
      for event in page.events {
        if case .textSet(_, let text, _) = event.change { texts.append(text) }
      }
      cursor = page.cursor
      if !page.more { break }
    }
    let own = acknowledged.all.filter {
      Int($0.dropFirst().prefix { $0 != "b" }).map { $0 % 2 == index } ?? false
    }
    try checkBatches(texts: texts, acknowledged: own, batchSize: 5, summary: &summary)
  }
}

/// The batches the server acknowledged, from several tasks.
final class Acknowledged: @unchecked Sendable {
  private let lock = NSLock()
  private var batches = Set<String>()
  func insert(_ batch: String) {
    lock.lock()
    batches.insert(batch)
    lock.unlock()
  }
  var all: Set<String> {
    lock.lock()
    defer { lock.unlock() }
    return batches
  }
  private var failed: [String] = []
  func fail(_ failure: String) {
    lock.lock()
    failed.append(failure)
    lock.unlock()
  }
  var failures: [String] {
    lock.lock()
    defer { lock.unlock() }
    return failed
  }
}
