import ArgumentParser
import AsyncHTTPClient
import Foundation
import VLog
import VLogSync

#if canImport(Glibc)
  import Glibc
#endif

/// Load on a real `vlog serve` (a release build, a process of its own): `clients` devices
/// syncing as fast as they can for `seconds`, each pushing a batch of new events and pulling
/// what the others pushed, on one account each or all on one account. Reports syncs per second,
/// the latency of a sync call at p50 and p99, the server's memory before and after, and checks
/// that every event the server acknowledged is in the account's log at the end.
@main
struct Load: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "vlog-load", abstract: "Sync load on a live vlog serve; checks nothing is lost.")

  @Option(help: "Devices syncing at once.") var clients = 16
  @Option(help: "Accounts they are spread over: 1 (all share one) or as many as clients.")
  var accounts = 16
  @Option(help: "Seconds of load.") var seconds = 20
  @Option(help: "Events pushed per sync.") var events = 10

  func validate() throws {
    guard clients >= 1, accounts >= 1, accounts <= clients, seconds >= 1, events >= 1 else {
      throw ValidationError("need clients ≥ accounts ≥ 1, seconds ≥ 1, events ≥ 1")
    }
  }

  func run() async throws {
    let vlog = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
      .deletingLastPathComponent().appendingPathComponent("vlog")
    let data = FileManager.default.temporaryDirectory
      .appendingPathComponent("vlog-load-\(UUID().uuidString)").path
    defer { try? FileManager.default.removeItem(atPath: data) }
    let server = Process()
    server.executableURL = vlog
    server.arguments = [
      "serve", "--data", data, "--port", "0", "--password-cost", "10", "--log-level", "error",
    ]
    let output = Pipe()
    server.standardOutput = output
    try server.run()
    defer {
      server.terminate()
      server.waitUntilExit()
    }
    var banner = ""
    while !banner.contains("\n") {
      let chunk = output.fileHandleForReading.availableData
      if chunk.isEmpty { break }
      banner += String(decoding: chunk, as: UTF8.self)
    }
    guard
      let url = banner.split(separator: " ").last?.trimmingCharacters(in: .whitespacesAndNewlines)
    else { throw ValidationError("the server did not start") }

    var configuration = HTTPClient.Configuration()
    configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = clients * 2
    let http = HTTPClient(
      eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    do {
      try await measure(url: url, client: http, server: server.processIdentifier)
      try await http.shutdown()
    } catch {
      try? await http.shutdown()
      throw error
    }
  }

  func measure(url: String, client http: HTTPClient, server: Int32) async throws {
    let caller = APICaller(transport: HTTPTransport(baseURL: url, client: http))

    var tokens: [String] = []
    for account in 0..<accounts {
      let credentials = Credentials(username: "load\(account)", password: "correct horse")
      _ = try await caller.createAccount(credentials).get()
      tokens.append(try await caller.signIn(credentials).get().token)
    }
    let before = Memory(pid: server)

    let start = ContinuousClock.now
    let deadline = start + .seconds(seconds)
    let results = try await withThrowingTaskGroup(of: ClientResult.self) { group in
      for client in 0..<clients {
        let token = tokens[client % accounts]
        let batch = events
        group.addTask {
          try await runClient(client, caller: caller, token: token, events: batch, until: deadline)
        }
      }
      return try await group.reduce(into: [ClientResult]()) { $0.append($1) }
    }
    let elapsed = ContinuousClock.now - start
    let after = Memory(pid: server)

    // Nothing acknowledged is lost: each account's log holds every event acknowledged to it.
    var lost = 0
    var held = 0
    for (account, token) in tokens.enumerated() {
      var ids = Set<Stamp>()
      var cursor: UInt64 = 0
      while true {
        let page = try await caller.sync(
          SyncPush(cursor: cursor, events: [], limit: 5000), encoding: .binary, token: token
        ).get()
        for event in page.events { ids.insert(event.stamp) }
        cursor = page.cursor
        if !page.more { break }
      }
      held += ids.count
      for result in results where result.client % accounts == account {
        lost += result.acknowledged.filter { !ids.contains($0) }.count
      }
    }

    let latencies = results.flatMap(\.latencies).sorted()
    let syncs = latencies.count
    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    func percentile(_ p: Double) -> Double {
      latencies.isEmpty ? 0 : latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))]
    }
    let acknowledged = results.reduce(0) { $0 + $1.acknowledged.count }
    #if DEBUG
      let build = "debug build: checks only, no figures"
    #else
      let build = "release build"
    #endif
    print(
      """
      \(clients) clients on \(accounts == 1 ? "one account" : "\(accounts) accounts"), \
      \(events) events per sync, \(Int(seconds)) s (\(build), durable commits):
        syncs: \(syncs), \(String(format: "%.0f", Double(syncs) / seconds))/s; events \
      acknowledged: \(acknowledged), \(String(format: "%.0f", Double(acknowledged) / seconds))/s
        latency of a sync call: p50 \(String(format: "%.1f", percentile(0.5))) ms, \
      p99 \(String(format: "%.1f", percentile(0.99))) ms
        pulled by the clients: \(results.reduce(0) { $0 + $1.pulled }) events
        server memory: before \(before), after \(after)
        lost: \(lost) of \(acknowledged) acknowledged events (the logs hold \(held))
      """)
    if lost > 0 { throw ExitCode.failure }
  }
}

struct ClientResult: Sendable {
  var client: Int
  var latencies: [Double] = []
  var acknowledged: [Stamp] = []
  var pulled = 0
}

/// One device: pushes `events` new events per sync and pulls the page after its cursor.
func runClient(
  _ client: Int, caller: APICaller, token: String, events count: Int,
  until deadline: ContinuousClock.Instant
) async throws -> ClientResult {
  var result = ClientResult(client: client)
  let replica = ReplicaID(Identifier(high: 0x10AD, low: UInt64(client)))
  var cursor: UInt64 = 0
  var counter: UInt64 = 0
  while ContinuousClock.now < deadline {
    let milliseconds = UInt64(Date().timeIntervalSince1970 * 1000)
    let events = (0..<count).map { index in
      counter += 1
      return Event(
        stamp: Stamp(
          time: HybridTime(
            milliseconds: milliseconds, counter: UInt16(truncatingIfNeeded: counter)),
          replica: replica),
        change: .textSet(
          NoteID(Identifier(high: UInt64(client), low: counter % 1000)),
          text: "client \(client) edit \(counter) " + String(repeating: "x", count: 80 + index)))
    }
    let started = ContinuousClock.now
    let page = try await caller.sync(
      SyncPush(cursor: cursor, events: events, limit: 1000), encoding: .binary, token: token
    ).get()
    let took = ContinuousClock.now - started
    result.latencies.append(
      Double(took.components.seconds) * 1000 + Double(took.components.attoseconds) / 1e15)
    result.acknowledged += events.map(\.stamp)
    result.pulled += page.events.count
    cursor = page.cursor
    // Stamps are unique per millisecond and counter: wait for the next millisecond when the
    // counter would wrap within this one.
    if counter % 60_000 == 0 { try await Task.sleep(for: .milliseconds(2)) }
  }
  return result
}

/// A process's resident memory: anonymous (heap) and file-backed (the mapped LMDB file, which
/// the kernel may drop at will), from /proc.
struct Memory: CustomStringConvertible {
  var anonymous = 0
  var file = 0

  init(pid: Int32) {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else {
      return
    }
    for line in status.split(separator: "\n") {
      let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
      guard fields.count >= 2, let kilobytes = Int(fields[1]) else { continue }
      if fields[0] == "RssAnon:" { anonymous = kilobytes }
      if fields[0] == "RssFile:" { file = kilobytes }
    }
  }

  var description: String {
    "\(anonymous / 1024) MiB anonymous + \(file / 1024) MiB file"
  }
}
