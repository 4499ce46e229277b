// What history costs a new device: a store of 10,000 notes edited 1,000,000 times (then 10 % of
// the notes deleted) is synced through the HTTP server on loopback to a new, durable device,
// with retention off (every replaced text kept) and with retention 0 (replaced texts redacted
// at once, on the devices and on the server). For each: bytes on disk (the source, the server,
// the new device, and the new device compacted), bytes over the wire, and seconds of the
// initial sync; next to SQLite through GRDB ingesting the same events on a new device.
//
//   .build/release/History [NOTES] [EDITS] [TEXT BYTES]   (defaults 10000 1000000 300)
//
// Progress goes to standard error, the Markdown table to standard output. `tools/history`
// builds and runs it.

import BenchmarkSupport
import Foundation
import Logging
import VLog
import VLogServer
import VLogSync
import Workload

let arguments = CommandLine.arguments.dropFirst().compactMap { Int($0) }
let noteCount = arguments.count > 0 ? arguments[0] : 10_000
let editCount = arguments.count > 1 ? arguments[1] : 1_000_000
let textBytes = arguments.count > 2 ? arguments[2] : 300

func log(_ message: String) {
  FileHandle.standardError.write(Data((message + "\n").utf8))
}

func seconds(since start: ContinuousClock.Instant) -> Double {
  let elapsed = ContinuousClock.now - start
  return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
}

func fileBytes(_ path: String) -> Int {
  ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int) ?? 0
}

/// Counts the bytes of every request and response body that crosses it.
final class CountingTransport: Transport, @unchecked Sendable {
  let base: any Transport
  private let lock = NSLock()
  private var sent = 0
  private var received = 0

  init(base: any Transport) { self.base = base }

  /// The server it wraps.
  var server: String { base.server }

  func send(_ request: TransportRequest) async throws -> TransportResponse {
    let response = try await base.send(request)
    lock.withLock {
      sent += request.body.count
      received += response.body.count
    }
    return response
  }

  var bytes: (sent: Int, received: Int) { lock.withLock { (sent, received) } }
}

/// A text of about `textBytes` bytes that differs with `seed`.
func text(_ seed: Int) -> String {
  let words = ["note", "meeting", "idea", "paris", "draft", "call", "list", "plan", "review"]
  var result = "edit \(seed):"
  var value = seed &* 2_654_435_761
  while result.utf8.count < textBytes {
    value = value &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
    result += " " + words[Int(truncatingIfNeeded: (value >> 33) & 0x7FFF_FFFF) % words.count]
  }
  return result
}

struct Result {
  var label = ""
  var events = 0
  var sourceBytes = 0
  var serverBytes = 0
  var serverCompactedBytes = 0
  var deviceBytes = 0
  var deviceCompactedBytes = 0
  var wireBytes = 0
  var syncSeconds = 0.0
  var sqliteBytes = 0
  var sqliteSeconds = 0.0
}

func measure(retention: NoteStore.Retention, label: String) async throws -> Result {
  var result = Result(label: label)
  let root = temporaryPath("history-\(label.filter(\.isLetter))")
  defer { removeTemporaryItem(atPath: root) }

  // The history, on the device that made it.
  var options = NoteStore.Options(durability: .noSync, mapSize: 1 << 30)
  options.retention = retention
  options.undoLevels = 0
  let source = try NoteStore.open(at: root + "/source", options: options)
  var notes: [NoteID] = []
  while notes.count < noteCount {
    let batch = min(1000, noteCount - notes.count)
    let first = notes.count
    notes += try await source.write { changes in
      (0..<batch).map { changes.createNote(text: text(first + $0)) }
    }
  }
  var made = 0
  var generator = SystemRandomNumberGenerator()
  while made < editCount {
    let batch = min(1000, editCount - made)
    let targets = (0..<batch).map { _ in notes[Int.random(in: 0..<notes.count, using: &generator)] }
    let base = made
    try await source.write { changes in
      for (index, note) in targets.enumerated() { changes.setText(text(base + index), of: note) }
    }
    made += batch
    if made % 100_000 == 0 { log("\(label): \(made) edits") }
  }
  try await source.write { [notes] changes in
    for note in notes.prefix(noteCount / 10) { changes.deleteNote(note) }
  }
  result.events = Int(try source.lastSequence())

  // The server, on loopback, with the same retention.
  var logger = Logger(label: "history")
  logger.logLevel = .critical
  let serverPath = root + "/server"
  let server = try SyncServer.open(
    dataDirectory: serverPath,
    configuration: .init(
      passwordCost: PasswordCost(logRounds: 10), durability: .noSync,
      retention: retention.period),
    logger: logger)
  let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
  let running = Task.detached {
    try await server.run(host: "127.0.0.1", port: 0) { continuation.yield($0) }
  }
  guard let port = await ports.first(where: { _ in true }) else {
    fatalError("the server did not start")
  }
  let url = "http://127.0.0.1:\(port)"
  let credentials = Credentials(
    username: "history", password: "benchmark password for quiet ledgers")
  let uploader = try SyncAccount(
    store: source, transport: HTTPTransport(baseURL: url), credentials: credentials)
  try await uploader.createAccount()
  let start = ContinuousClock.now
  _ = try await uploader.sync()
  log("\(label): \(result.events) events pushed in \(Int(seconds(since: start))) s")
  source.close()
  result.sourceBytes = fileBytes(root + "/source/data.mdb")

  // The new device: durable, as a real one.
  var deviceOptions = NoteStore.Options(mapSize: 1 << 30)
  deviceOptions.retention = retention
  let device = try NoteStore.open(at: root + "/device", options: deviceOptions)
  let counting = CountingTransport(base: HTTPTransport(baseURL: url))
  let downloader = try SyncAccount(store: device, transport: counting, credentials: credentials)
  let syncStart = ContinuousClock.now
  let report = try await downloader.sync()
  result.syncSeconds = seconds(since: syncStart)
  guard report.inSync else { fatalError("the new device is not in sync") }
  result.wireBytes = counting.bytes.received + counting.bytes.sent
  let events = try device.events().map(\.event)
  device.close()
  result.deviceBytes = fileBytes(root + "/device/data.mdb")
  result.deviceCompactedBytes = try NoteStore.compact(at: root + "/device").bytesAfter
  log("\(label): initial sync \(String(format: "%.1f", result.syncSeconds)) s")

  running.cancel()
  _ = await running.result
  server.close()
  result.serverBytes = fileBytes(serverPath + "/data.mdb")
  result.serverCompactedBytes = try SyncServer.compact(dataDirectory: serverPath).bytesAfter

  // The peer: the same events, in the same pages, into SQLite on a new device.
  let sqlite = try SQLiteBackend.open(at: root + "/sqlite", durable: true)
  let sqliteStart = ContinuousClock.now
  var index = 0
  while index < events.count {
    let end = min(index + 1000, events.count)
    try sqlite.ingest(Array(events[index..<end]), more: end < events.count)
    index += 1000
  }
  result.sqliteSeconds = seconds(since: sqliteStart)
  try sqlite.checkpoint()
  sqlite.close()
  result.sqliteBytes = fileBytes(root + "/sqlite/notes.sqlite")
  log("\(label): SQLite ingest \(String(format: "%.1f", result.sqliteSeconds)) s")
  return result
}

func megabytes(_ bytes: Int) -> String { String(format: "%.1f MB", Double(bytes) / 1e6) }

let results = [
  try await measure(retention: .forever, label: "retention off"),
  try await measure(retention: .period(.zero), label: "retention 0"),
]
print(
  "\(noteCount) notes, \(editCount) text edits of about \(textBytes) bytes, "
    + "\(noteCount / 10) notes then deleted; a new durable device syncs over loopback HTTP "
    + "(binary encoding, pages of 1,000 events).\n")
print("| | " + results.map(\.label).joined(separator: " | ") + " |")
print("|---|" + results.map { _ in "---:|" }.joined())
func row(_ name: String, _ value: (Result) -> String) {
  print("| \(name) | " + results.map(value).joined(separator: " | ") + " |")
}
row("events in the log") { "\($0.events)" }
row("source device, on disk") { megabytes($0.sourceBytes) }
row("server, on disk (compacted)") {
  "\(megabytes($0.serverBytes)) (\(megabytes($0.serverCompactedBytes)))"
}
row("**new device: over the wire**") { megabytes($0.wireBytes) }
row("**new device: initial sync**") { String(format: "%.1f s", $0.syncSeconds) }
row("**new device: on disk** (compacted)") {
  "\(megabytes($0.deviceBytes)) (\(megabytes($0.deviceCompactedBytes)))"
}
row("SQLite (GRDB) new device: on disk") { megabytes($0.sqliteBytes) }
row("SQLite (GRDB) new device: ingest, no network") { String(format: "%.1f s", $0.sqliteSeconds) }
