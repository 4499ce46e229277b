import ArgumentParser
import AsyncHTTPClient
import Foundation
import VLog
import VLogSync

#if canImport(Glibc)
  import Glibc
#endif

/// Load on real `vlog serve` processes (release builds): on an LMDB directory, or on one
/// PostgreSQL database with one or several instances.
///
/// - `load`: `clients` devices syncing as fast as they can for `seconds`, each pushing a batch of
///   new events and pulling what the others pushed, on one account each or all on one account.
///   Reports syncs per second, the latency of a sync call at p50 and p99, the servers' memory
///   before and after, and checks that every event acknowledged is in the account's log.
/// - `round-trip`: one device pushing one edit and pulling, call after call: p50 and p99.
/// - `initial-sync`: a new device pulling an account of `initial-events` events.
/// - `edit-to-screen`: device A pushes an edit; device B, holding the live channel, shows it:
///   p50 and p99 over `round-trips` edits.
/// - `fan-out`: one edit to an account with `fan-out` devices holding live channels: the time
///   until the last shows it.
/// - `idle-live`: `live-channels` open channels held by other processes: the server's memory
///   per channel and its idle CPU, and the cap still enforced.
/// - `capacity`: the capacity model's inputs and a check of its prediction (see
///   Benchmarks/README.md): one-event syncs one at a time (`--rate 50` from one client), then as
///   fast as `clients` devices go, then offered at half that rate; the servers' CPU (and
///   PostgreSQL's) at half rate must fall between what the CPU per sync of the busy run and of
///   the one-at-a-time run predict, give or take a quarter (a third for PostgreSQL).
/// - `live`: the three above. `load --live` runs the load with every client also holding a
///   live channel.
@main
struct Load: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "vlog-load", abstract: "Sync load on live vlog serve; checks nothing is lost.")

  @Option(help: "Devices syncing at once.") var clients = 16
  @Option(help: "Accounts they are spread over: 1 (all share one) or as many as clients.")
  var accounts = 16
  @Option(help: "Seconds of load.") var seconds = 20
  @Option(help: "Events pushed per sync.") var events = 10
  @Option(help: "A PostgreSQL database (URL) for the servers, instead of an LMDB directory.")
  var database: String?
  @Option(help: "Server processes (on one PostgreSQL database); clients use them in turn.")
  var instances = 1
  @Option(help: "load, round-trip, initial-sync, or all.") var measure = Measurement.load
  @Option(help: "Events in the account of the initial sync.") var initialEvents = 100_000
  @Option(help: "Sync calls of the round-trip measurement, and edits of edit-to-screen.")
  var roundTrips = 1000
  @Option(help: "Devices holding live channels in the fan-out measurement.") var fanOut = 100
  @Option(help: "Open channels of the idle-live measurement.") var liveChannels = 10_000
  @Option(help: "Processes holding the idle-live measurement's channels.")
  var holderProcesses = 4
  @Option(
    help: """
      Seconds the idle-live measurement waits after the channels open before it measures: \
      by 65, the database connection pool's timers of the opening burst (keep-alive at \
      30 s, idle at 60 s) have fired.
      """)
  var settle = 65
  @Option(
    help: ArgumentHelp(
      "Syncs per second the load measurement offers, spread over its clients; 0 for as many as the server answers.",
      discussion:
        "Each client starts its syncs on a schedule and does not start one before the last is answered, so the rate reached can fall short of it: the report gives both."
    )) var rate = 0.0
  @Flag(help: "In the load measurement, every client also holds a live channel.")
  var live = false
  @Option(help: "The load measurement's encoding of sync calls: binary or json.")
  var encoding = EncodingOption.binary
  @Option(help: .hidden) var hold: String?
  @Option(help: .hidden) var holdURL: String?

  enum Measurement: String, ExpressibleByArgument, CaseIterable {
    case load
    case roundTrip = "round-trip"
    case initialSync = "initial-sync"
    case editToScreen = "edit-to-screen"
    case fanOut = "fan-out"
    case idleLive = "idle-live"
    case capacity
    /// The three live-channel measurements.
    case live
    case all
  }

  func validate() throws {
    guard clients >= 1, accounts >= 1, accounts <= clients, seconds >= 1, events >= 1 else {
      throw ValidationError("need clients ≥ accounts ≥ 1, seconds ≥ 1, events ≥ 1")
    }
    guard rate >= 0, rate.isFinite else { throw ValidationError("--rate must be 0 or more") }
    guard instances >= 1, instances == 1 || database != nil else {
      throw ValidationError("--instances above 1 needs --database (LMDB serves from one process)")
    }
  }

  /// What the servers run on, for the report.
  var backend: String {
    database == nil ? "LMDB" : "PostgreSQL, \(instances) instance\(instances == 1 ? "" : "s")"
  }

  func run() async throws {
    if let hold, let holdURL {
      try await self.hold(file: hold, url: holdURL)
      return
    }
    let vlog = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
      .deletingLastPathComponent().appendingPathComponent("vlog")
    let data = FileManager.default.temporaryDirectory
      .appendingPathComponent("vlog-load-\(UUID().uuidString)").path
    defer { try? FileManager.default.removeItem(atPath: data) }
    var servers: [Process] = []
    var urls: [String] = []
    defer {
      for server in servers {
        server.terminate()
        server.waitUntilExit()
      }
    }
    for _ in 0..<instances {
      let server = Process()
      server.executableURL = vlog
      let storage = database.map { ["--database", $0] } ?? ["--data", data]
      server.arguments =
        ["serve"] + storage + [
          "--port", "0", "--password-cost", "10", "--log-level", "error",
          "--database-connections", "\(max(4, 2 * clients / instances))",
          "--max-live-channels", "\(liveChannels)",
          // Every client is on this machine's one address.
          "--max-connections-per-address", "0", "--sign-ups-per-address", "1000000",
        ]
      let output = Pipe()
      server.standardOutput = output
      try server.run()
      servers.append(server)
      let banner = firstLine(of: output)
      guard
        let url = banner.split(separator: " ").last?.trimmingCharacters(
          in: .whitespacesAndNewlines), url.hasPrefix("http")
      else { throw ValidationError("the server did not start") }
      urls.append(url)
    }

    var configuration = HTTPClient.Configuration()
    configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit =
      max(clients * 2, fanOut * 2 + 16)
    let http = HTTPClient(
      eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    do {
      let callers = urls.map { APICaller(transport: HTTPTransport(baseURL: $0, client: http)) }
      let pids = servers.map(\.processIdentifier)
      // Names of this run's own, so that runs can share a database.
      let run = String(UUID().uuidString.prefix(8)).lowercased()
      if measure == .roundTrip || measure == .all {
        try await roundTrip(callers: callers, run: run)
      }
      if measure == .initialSync || measure == .all {
        try await initialSync(callers: callers, run: run)
      }
      if measure == .load || measure == .all {
        try await load(callers: callers, servers: pids, run: run)
      }
      if measure == .capacity {
        try await capacity(callers: callers, servers: pids, run: run)
      }
      if [.editToScreen, .live].contains(measure) {
        try await editToScreen(urls: urls, http: http, run: run)
      }
      if [.fanOut, .live].contains(measure) {
        try await fanOut(urls: urls, http: http, run: run)
      }
      if [.idleLive, .live].contains(measure) {
        try await idleChannels(urls: urls, servers: pids, http: http, run: run)
      }
      try await http.shutdown()
    } catch {
      try? await http.shutdown()
      throw error
    }
  }

  /// What a load run measured.
  struct LoadFigures {
    var syncsPerSecond: Double
    /// The servers' CPU per sync, in seconds, and in cores over the run.
    var serverCPU: Double
    var serverCores: Double
    /// PostgreSQL's CPU per sync and in cores (0 on LMDB).
    var databaseCPU: Double
    var databaseCores: Double
    /// Milliseconds.
    var p99: Double
  }

  @discardableResult
  func load(callers: [APICaller], servers: [Int32], run: String) async throws -> LoadFigures {
    let caller = callers[0]
    var tokens: [String] = []
    for account in 0..<accounts {
      let credentials = Credentials(
        username: "load\(run)x\(account)", password: "correct horse battery")
      _ = try await caller.createClearAccount(
        username: credentials.username, password: credentials.password, cost: .testing)
      tokens.append(
        try await caller.signIn(
          username: credentials.username, password: credentials.password, floor: .testing
        ).session.token)
    }
    let readers = live ? try await holdChannels(callers: callers, tokens: tokens) : []
    defer { for reader in readers { reader.cancel() } }
    let before = Memory(pids: servers)
    let cpuBefore = servers.reduce(0) { $0 + cpuSeconds(of: $1) }
    let databaseBefore = database != nil ? databaseCPUSeconds() : 0

    let start = ContinuousClock.now
    let deadline = start + .seconds(seconds)
    let results = try await withThrowingTaskGroup(of: ClientResult.self) { group in
      for client in 0..<clients {
        let token = tokens[client % accounts]
        let batch = events
        let encoding = encoding.encoding
        // Each client talks to one instance; the clients spread evenly over them.
        let instance = callers[client % callers.count]
        // Each client's share of the rate, its first sync at a random point of its interval
        // so that the clients do not start together.
        let interval = rate > 0 ? Duration.seconds(Double(clients) / rate) : nil
        group.addTask {
          try await runClient(
            client, caller: instance, token: token, events: batch, encoding: encoding,
            every: interval, until: deadline)
        }
      }
      return try await group.reduce(into: [ClientResult]()) { $0.append($1) }
    }
    let elapsed = ContinuousClock.now - start
    let after = Memory(pids: servers)
    let cpu = servers.reduce(0) { $0 + cpuSeconds(of: $1) } - cpuBefore
    let databaseCPU = database != nil ? databaseCPUSeconds() - databaseBefore : 0

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
    let seconds = Self.milliseconds(elapsed) / 1000
    let acknowledged = results.reduce(0) { $0 + $1.acknowledged.count }
    let requestBytes = results.reduce(0) { $0 + $1.requestBytes }
    func per(_ count: Int, scale: Double) -> String {
      String(format: "%.1f", count > 0 ? cpu * scale / Double(count) : 0)
    }
    #if DEBUG
      let build = "debug build: checks only, no figures"
    #else
      let build = "release build"
    #endif
    print(
      """
      \(backend): \(clients) clients on \(accounts == 1 ? "one account" : "\(accounts) accounts"), \
      \(live ? "each holding a live channel, " : "")\(events) events per sync, \
      \(rate > 0 ? "offered \(String(format: "%.0f", rate)) syncs/s, " : "")\
      \(Int(seconds)) s (\(build), durable commits, \(encoding) encoding):
        syncs: \(syncs), \(String(format: "%.0f", Double(syncs) / seconds))/s; events \
      acknowledged: \(acknowledged), \(String(format: "%.0f", Double(acknowledged) / seconds))/s
        latency of a sync call: p50 \(String(format: "%.1f", Self.percentile(latencies, 0.5))) ms, \
      p99 \(String(format: "%.1f", Self.percentile(latencies, 0.99))) ms
        pulled by the clients: \(results.reduce(0) { $0 + $1.pulled }) events
        server CPU: \(String(format: "%.1f", cpu)) s (\(String(format: "%.2f", cpu / seconds)) cores), \
      \(per(syncs, scale: 1e6)) µs per sync, \
      \(per(acknowledged, scale: 1e6)) µs per event pushed, \(per(requestBytes, scale: 1e9)) ns per \
      byte of request body (\(syncs > 0 ? requestBytes / syncs : 0) bytes a push)
        \(database == nil ? "" : "PostgreSQL's CPU (its processes on this machine): \(String(format: "%.1f", databaseCPU)) s (\(String(format: "%.2f", databaseCPU / seconds)) cores), \(String(format: "%.1f", syncs > 0 ? databaseCPU * 1e6 / Double(syncs) : 0)) µs per sync\n  ")\
      server memory: before \(before), after \(after)
        lost: \(lost) of \(acknowledged) acknowledged events (the logs hold \(held))
      """)
    if lost > 0 { throw ExitCode.failure }
    return LoadFigures(
      syncsPerSecond: Double(syncs) / seconds, serverCPU: syncs > 0 ? cpu / Double(syncs) : 0,
      serverCores: cpu / seconds, databaseCPU: syncs > 0 ? databaseCPU / Double(syncs) : 0,
      databaseCores: databaseCPU / seconds, p99: Self.percentile(latencies, 0.99))
  }

  /// The capacity model's inputs, measured, and a check of its prediction.
  func capacity(callers: [APICaller], servers: [Int32], run: String) async throws {
    var alone = self
    alone.clients = 1
    alone.accounts = 1
    alone.rate = 50
    alone.events = 1
    let one = try await alone.load(callers: callers, servers: servers, run: run + "a")
    var busy = self
    busy.events = 1
    busy.rate = 0
    let full = try await busy.load(callers: callers, servers: servers, run: run + "b")
    var half = busy
    half.rate = (full.syncsPerSecond / 2).rounded()
    let check = try await half.load(callers: callers, servers: servers, run: run + "c")

    // Each edit is a push from one device and a pull on the account's other device; a user has
    // two devices, each active 10 % of the time, editing once a minute while active.
    let syncsPerUser = 2 * 0.1 / 60 * 2
    func users(perCore cpu: Double) -> String {
      cpu > 0 ? String(format: "%.0f", 1 / (cpu * syncsPerUser)) : "-"
    }
    func micro(_ seconds: Double) -> String { String(format: "%.0f µs", seconds * 1e6) }
    let rate = half.rate
    let server = (low: rate * full.serverCPU, high: rate * one.serverCPU)
    let databaseBounds = (low: rate * full.databaseCPU, high: rate * one.databaseCPU)
    // Between the two, whichever is lower, with a margin for a short run's noise: a quarter
    // for the servers; a third for PostgreSQL, whose CPU per sync hardly changes with the rate
    // but is the highest when busy (contention on the same cores), so that the run at half
    // rate falls just below both.
    func within(_ measured: Double, _ bounds: (low: Double, high: Double), margin: Double)
      -> Bool
    {
      measured >= (1 - margin) * min(bounds.low, bounds.high)
        && measured <= (1 + margin) * max(bounds.low, bounds.high)
    }
    let held =
      within(check.serverCores, server, margin: 0.25)
      && (database == nil || within(check.databaseCores, databaseBounds, margin: 0.35))
    let millionUsers = 1_000_000 * syncsPerUser
    print(
      """
      capacity model (\(backend); one-event syncs, a push or a pull each):
        CPU per sync, one at a time / busy: server \(micro(one.serverCPU)) / \(micro(full.serverCPU))\
      \(database == nil ? "" : ", PostgreSQL \(micro(one.databaseCPU)) / \(micro(full.databaseCPU))")
        users per server core (2 devices, 10 % active, 1 edit a minute while active: \
      \(String(format: "%.4f", syncsPerUser)) syncs/s a user): \(users(perCore: one.serverCPU)) \
      to \(users(perCore: full.serverCPU))\
      \(database == nil ? "" : "; per PostgreSQL core \(users(perCore: one.databaseCPU)) to \(users(perCore: full.databaseCPU))")
        1,000,000 users: \(String(format: "%.0f", millionUsers)) syncs/s, server cores \
      \(String(format: "%.1f", millionUsers * full.serverCPU)) to \
      \(String(format: "%.1f", millionUsers * one.serverCPU))\
      \(database == nil ? "" : ", PostgreSQL cores \(String(format: "%.1f", millionUsers * full.databaseCPU)) to \(String(format: "%.1f", millionUsers * one.databaseCPU))")
        prediction at \(String(format: "%.0f", rate)) syncs/s offered (half the busy rate): server \
      \(String(format: "%.2f", server.low))–\(String(format: "%.2f", server.high)) cores, \
      measured \(String(format: "%.2f", check.serverCores))\
      \(database == nil ? "" : "; PostgreSQL \(String(format: "%.2f", databaseBounds.low))–\(String(format: "%.2f", databaseBounds.high)) cores, measured \(String(format: "%.2f", check.databaseCores))"); \
      p99 \(String(format: "%.1f", check.p99)) ms: \(held ? "the prediction held" : "THE PREDICTION FAILED")
      """)
    if !held { throw ExitCode.failure }
  }

  /// One device alone, pushing one edit and pulling the page after its cursor, `roundTrips`
  /// times in a row: the latency of a sync call on an idle server.
  func roundTrip(callers: [APICaller], run: String) async throws {
    let credentials = Credentials(username: "trip\(run)", password: "correct horse battery")
    _ = try await callers[0].createClearAccount(
      username: credentials.username, password: credentials.password, cost: .testing)
    let token = try await callers[0].signIn(
      username: credentials.username, password: credentials.password, floor: .testing
    ).session.token
    let replica = ReplicaID(Identifier(high: 0x7819, low: 1))
    let note = NoteID(Identifier(high: 0x7819, low: 2))
    var latencies: [Double] = []
    var cursor: UInt64 = 0
    for index in 0..<roundTrips {
      let event = Event(
        stamp: Stamp(
          time: HybridTime(
            milliseconds: UInt64(Date().timeIntervalSince1970 * 1000),
            counter: UInt16(truncatingIfNeeded: index)),
          replica: replica),
        change: .textSet(note, text: "edit \(index) " + String(repeating: "x", count: 80)))
      let started = ContinuousClock.now
      let page = try await callers[index % callers.count].sync(
        SyncPush(cursor: cursor, events: [event], limit: 1000), encoding: .binary, token: token
      ).get()
      latencies.append(Self.milliseconds(ContinuousClock.now - started))
      cursor = page.cursor
    }
    latencies.sort()
    let p50 = String(format: "%.2f", Self.percentile(latencies, 0.5))
    let p99 = String(format: "%.2f", Self.percentile(latencies, 0.99))
    print(
      "\(backend): round trip of one edit (push 1 event, pull the page), \(roundTrips) calls "
        + "in a row: p50 \(p50) ms, p99 \(p99) ms")
  }

  /// An account of `initialEvents` events (pushed 1,000 at a time), then a new device pulling
  /// all of it in pages of 5,000: the time of the pull.
  func initialSync(callers: [APICaller], run: String) async throws {
    let credentials = Credentials(username: "initial\(run)", password: "correct horse battery")
    _ = try await callers[0].createClearAccount(
      username: credentials.username, password: credentials.password, cost: .testing)
    let token = try await callers[0].signIn(
      username: credentials.username, password: credentials.password, floor: .testing
    ).session.token
    let replica = ReplicaID(Identifier(high: 0x1417, low: 1))
    let base = UInt64(Date().timeIntervalSince1970 * 1000) - 600_000
    var pushed = 0
    while pushed < initialEvents {
      let count = min(1000, initialEvents - pushed)
      let events = (0..<count).map { offset in
        let index = pushed + offset
        return Event(
          stamp: Stamp(
            time: HybridTime(
              milliseconds: base + UInt64(index / 1000), counter: UInt16(index % 1000)),
            replica: replica),
          change: .textSet(
            NoteID(Identifier(high: 0x1417, low: UInt64(index % 10_000))),
            text: "note \(index) " + String(repeating: "text ", count: 20)))
      }
      _ = try await callers[0].sync(
        SyncPush(cursor: 0, events: events, limit: 1), encoding: .binary, token: token
      ).get()
      pushed += count
    }
    let started = ContinuousClock.now
    var cursor: UInt64 = 0
    var pulled = 0
    var pages = 0
    while true {
      let answer = try await callers[pages % callers.count].sync(
        SyncPush(cursor: cursor, events: [], limit: 5000), encoding: .binary, token: token
      ).get()
      pulled += answer.events.count
      cursor = answer.cursor
      pages += 1
      if !answer.more { break }
    }
    let seconds = Self.milliseconds(ContinuousClock.now - started) / 1000
    guard pulled == initialEvents else {
      throw ValidationError("the initial sync pulled \(pulled) of \(initialEvents) events")
    }
    let rate = String(format: "%.0f", Double(pulled) / seconds)
    print(
      "\(backend): initial sync of \(initialEvents) events (\(pages) pages, binary): "
        + "\(String(format: "%.2f", seconds)) s, \(rate) events/s")
  }

  static func milliseconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
  }

  static func percentile(_ sorted: [Double], _ p: Double) -> Double {
    sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
  }
}

struct ClientResult: Sendable {
  var client: Int
  var latencies: [Double] = []
  var acknowledged: [Stamp] = []
  var pulled = 0
  /// The size of this client's first push's body, which stands for all of them.
  var pushBytes = 0
  /// The bytes of the request bodies this client sent.
  var requestBytes = 0
}

/// The encodings a sync call can use, as the `--encoding` option names them.
enum EncodingOption: String, ExpressibleByArgument, CaseIterable {
  case binary, json
  var encoding: SyncEncoding { self == .binary ? .binary : .json }
}

/// One device: pushes `events` new events per sync and pulls the page after its cursor.
/// With `interval`, starts a sync every `interval` (or, when one takes longer, as soon as it is
/// answered) instead of one after another.
func runClient(
  _ client: Int, caller: APICaller, token: String, events count: Int, encoding: SyncEncoding,
  every interval: Duration?, until deadline: ContinuousClock.Instant
) async throws -> ClientResult {
  var result = ClientResult(client: client)
  var next = ContinuousClock.now
  if let interval { next += interval * Double.random(in: 0..<1) }
  let replica = ReplicaID(Identifier(high: 0x10AD, low: UInt64(client)))
  var cursor: UInt64 = 0
  var counter: UInt64 = 0
  while ContinuousClock.now < deadline {
    if let interval {
      if next > ContinuousClock.now { try await Task.sleep(until: next) }
      guard ContinuousClock.now < deadline else { break }
      next += interval
    }
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
    let push = SyncPush(cursor: cursor, events: events, limit: 1000)
    // The first push's size stands for all of this client's: they differ by a few bytes, and
    // encoding each twice would take the client's CPU from the server's cores.
    if result.pushBytes == 0 {
      result.pushBytes = try Endpoints.Sync(push, encoding: encoding).body().count
    }
    let started = ContinuousClock.now
    let page = try await caller.sync(push, encoding: encoding, token: token).get()
    result.requestBytes += result.pushBytes
    result.latencies.append(Load.milliseconds(ContinuousClock.now - started))
    result.acknowledged += events.map(\.stamp)
    result.pulled += page.events.count
    cursor = page.cursor
    // Stamps are unique per millisecond and counter: wait for the next millisecond when the
    // counter would wrap within this one.
    if counter % 60_000 == 0 { try await Task.sleep(for: .milliseconds(2)) }
  }
  return result
}

/// What a child process writes to `pipe` up to its first line's end (or its output's end).
func firstLine(of pipe: Pipe) -> String {
  var text = ""
  while !text.contains("\n") {
    let chunk = pipe.fileHandleForReading.availableData
    if chunk.isEmpty { break }
    text += String(decoding: chunk, as: UTF8.self)
  }
  return text
}

/// Processes' resident memory: anonymous (heap) and file-backed (the mapped LMDB file, which
/// the kernel may drop at will), from /proc.
struct Memory: CustomStringConvertible {
  var anonymous = 0
  var file = 0

  /// The sum over several processes.
  init(pids: [Int32]) {
    for pid in pids {
      guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
      else { continue }
      for line in status.split(separator: "\n") {
        let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
        guard fields.count >= 2, let kilobytes = Int(fields[1]) else { continue }
        if fields[0] == "RssAnon:" { anonymous += kilobytes }
        if fields[0] == "RssFile:" { file += kilobytes }
      }
    }
  }

  var description: String {
    "\(anonymous / 1024) MiB anonymous + \(file / 1024) MiB file"
  }
}
