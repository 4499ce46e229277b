import Foundation
import Logging
import VLog
import VLogServer
import VLogServerTesting
import VLogSync
import VLogTesting

// MARK: - Scale-out

/// Sends each request to one of several servers, at random: a load balancer in front of
/// stateless instances.
struct RandomServerTransport: Transport {
  let servers: [HTTPTransport]

  init(_ urls: [String]) {
    servers = urls.map { HTTPTransport(baseURL: $0, timeout: .seconds(5)) }
  }

  /// One service, whichever instance answers: the first instance's URL names it.
  var server: String { servers[0].baseURL }

  func send(_ request: TransportRequest) async throws -> TransportResponse {
    try await servers.randomElement()!.send(request)
  }

  /// A live channel, to whichever instance: after one is killed, a device's next channel
  /// opens on another (or fails on the dead one, and the next attempt tries again).
  func open(_ request: TransportRequest) async throws -> TransportStream {
    try await servers.randomElement()!.open(request)
  }
}

/// Starts `vlog serve` on `database` and returns it with its URL.
func startServer(tools: Tools, database: String) async throws -> (Child, String) {
  let child = try Child(
    tools.vlog,
    [
      "serve", "--database", database, "--port", "0", "--password-cost", "10",
      "--sign-ups-per-address", "1000000",
      "--log-level",
      "critical", "--database-connections", "4",
    ])
  for _ in 0..<1000 {
    if let url = child.lines.first(where: { $0.contains("serving on ") })?
      .split(separator: " ").last.map(String.init)
    {
      return (child, url)
    }
    try await Task.sleep(for: .milliseconds(10))
  }
  _ = child.kill()
  throw Failure("a server on \(database) did not start")
}

/// Three `vlog serve` processes on one PostgreSQL database; pushers and devices talk to random
/// instances; one instance is killed with SIGKILL in the middle of the pushes. Every
/// acknowledged batch must be in the log whole, a batch pushed again after a lost answer is
/// stored once, and the devices and the server must end with equal digests.
func crashScaleOut(
  root: String, round: Int, tools: Tools, database: String, narrate: Bool,
  using generator: inout SeededGenerator, summary: inout Summary
) async throws {
  func say(_ line: String) { if narrate { print("  " + line) } }
  var children: [Child] = []
  var urls: [String] = []
  defer { for child in children { _ = child.kill() } }
  for _ in 0..<3 {
    let (child, url) = try await startServer(tools: tools, database: database)
    children.append(child)
    urls.append(url)
  }
  say("3 servers on one database: \(urls.joined(separator: ", "))")
  let transport = RandomServerTransport(urls)
  let caller = APICaller(transport: transport)
  let accounts = (0..<2).map {
    Credentials(username: "scale\(round)x\($0)", password: "correct horse battery")
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
  // Devices of the first account, editing and syncing through random instances.
  let devices = try (0..<3).map { index in
    let store = try NoteStore.open(
      at: "\(root)/device-\(index)", options: .init(durability: .noSync))
    return (
      store,
      try SyncAccount(
        store: store, transport: transport, credentials: accounts[0], pageSize: 50,
        encryption: EncryptionOptions(cost: .testing, isRequired: false))
    )
  }
  defer { for (store, _) in devices { store.close() } }
  // Devices of the first account that only watch: each holds a live channel to a random
  // instance and syncs only when it hears of a push (no polling within the round). Those on
  // the killed instance must open a channel on another and catch up by themselves.
  let watching = LiveOptions(
    reconnect: SyncBackoff(initial: .milliseconds(100), maximum: .seconds(1), jitter: 0.5),
    pollInterval: .seconds(3600))
  var watchers: [(store: NoteStore, sync: AutomaticSync<ContinuousClock>)] = []
  defer { for watcher in watchers { watcher.store.close() } }
  for index in 0..<3 {
    let store = try NoteStore.open(
      at: "\(root)/watcher-\(index)", options: .init(durability: .noSync))
    let account = try SyncAccount(
      store: store, transport: transport, credentials: accounts[0], pageSize: 50,
      encryption: EncryptionOptions(cost: .testing, isRequired: false))
    // A sync that hits the killed instance fails (this transport keeps choosing it, as no
    // load balancer would): retried within a second, not after the app's minutes of back-off.
    let sync = AutomaticSync(
      account: account, delay: .milliseconds(50),
      backoff: SyncBackoff(initial: .milliseconds(100), maximum: .seconds(1), jitter: 0.5),
      live: watching)
    await sync.start()
    watchers.append((store, sync))
  }
  for watcher in watchers {
    for _ in 0..<500 where await watcher.sync.status.liveChannel != .open {
      try await Task.sleep(for: .milliseconds(10))
    }
  }
  let acknowledged = Acknowledged()
  let pushers = (0..<4).map { pusher in
    Task { [tokens] in
      let replica = ReplicaID(Identifier(high: 0x5CA1E, low: UInt64(pusher)))
      let note = NoteID(Identifier(high: 0xF00D, low: UInt64(pusher)))
      for batch in 0..<40 {
        let milliseconds = UInt64(Date().timeIntervalSince1970 * 1000)
        let events = (0..<5).map { item in
          Event(
            stamp: Stamp(
              time: HybridTime(milliseconds: milliseconds, counter: UInt16(item)),
              replica: replica),
            change: .textSet(note, text: "p\(pusher)b\(batch)-\(item)"))
        }
        // A lost answer (the instance was killed) is pushed again, to any instance, as a
        // device pushes its outbox again: stored once whatever happened to the first try.
        for attempt in 0..<20 {
          let result = await caller.sync(
            SyncPush(cursor: 0, events: events, limit: 1), token: tokens[pusher % 2])
          if result.value != nil {
            acknowledged.insert("p\(pusher)b\(batch)")
            break
          }
          if let status = result.status, status != 503 {
            acknowledged.fail("push answered \(status)")
            return
          }
          if attempt == 19 { acknowledged.fail("p\(pusher)b\(batch) never acknowledged") }
        }
        // Pacing only: a cancelled sleep does no harm.
        try? await Task.sleep(for: .milliseconds(1))
      }
    }
  }
  let editors = devices.enumerated().map { index, device in
    Task {
      let (store, account) = device
      for step in 0..<15 {
        // A sync that hits the killed instance fails; the next one goes elsewhere, and the
        // devices sync to the end after the kill, where failures are checked.
        _ = try? await store.write { $0.createNote(text: "device \(index) note \(step)") }
        _ = try? await account.sync()
      }
    }
  }
  try await sleepRandomly(100...600, using: &generator)
  let victim = Int.random(in: 0..<3, using: &generator)
  let pushedBefore = acknowledged.all.count
  if children[victim].kill() { summary.killed += 1 } else { summary.finished += 1 }
  say(
    "killed \(urls[victim]) with SIGKILL after \(pushedBefore) acknowledged batches; "
      + "4 pushers and 3 devices carry on through the other two")
  for pusher in pushers { await pusher.value }
  for editor in editors { await editor.value }
  if let failure = acknowledged.failures.first { throw Failure(failure) }
  // The devices finish syncing through whichever instances are left.
  for _ in 0..<3 {
    for (_, account) in devices {
      var synced = false
      // A failed sync is tried again (20 times) before the round fails, saying so.
      for _ in 0..<20 where !synced { synced = (try? await account.sync()) != nil }
      guard synced else { throw Failure("a device could not sync after the kill") }
    }
  }
  // Read everything back through a server of its own.
  var logger = Logger(label: "vlog-crash")
  logger.logLevel = .critical
  let server = try await SyncServer.open(
    database: database, maximumConnections: 2, configuration: .init(passwordCost: .testing),
    logger: logger)
  defer { server.close() }
  let verification = try await server.verify()
  guard verification.faults.isEmpty else { throw Failure("verify: \(verification.faults)") }
  let local = APICaller(transport: InProcessTransport(server: server))
  var serverDigest: EventSetDigest?
  for (index, credentials) in accounts.enumerated() {
    let again = try await local.signIn(
      username: credentials.username, password: credentials.password, floor: .testing
    ).session.token
    var texts: [String] = []
    var cursor: UInt64 = 0
    while true {
      let page = try await local.sync(SyncPush(cursor: cursor, events: []), token: again).get()
      for event in page.events {
        if case .textSet(_, let text, _) = event.change, text.hasPrefix("p") { texts.append(text) }
      }
      cursor = page.cursor
      if index == 0 { serverDigest = page.eventSetDigest }
      if !page.more { break }
    }
    guard Set(texts).count == texts.count else {
      throw Failure("an event pushed again after a lost answer was stored twice")
    }
    let own = acknowledged.all.filter {
      Int($0.dropFirst().prefix { $0 != "b" }).map { $0 % 2 == index } ?? false
    }
    try checkBatches(texts: texts, acknowledged: own, batchSize: 5, summary: &summary)
  }
  say(
    "\(acknowledged.all.count) acknowledged batches of 5 events: every one in the log, whole, "
      + "each event once; verify: no fault")
  // The watchers caught up by themselves, over their channels, on whichever instances.
  for (index, watcher) in watchers.enumerated() {
    var caughtUp = false
    for _ in 0..<1500 where !caughtUp {
      caughtUp = try watcher.store.eventSetDigest() == serverDigest
      if !caughtUp { try await Task.sleep(for: .milliseconds(20)) }
    }
    guard caughtUp else {
      throw Failure(
        "watcher \(index) did not catch up within 30 s over its live channel "
          + "(\(await watcher.sync.status.liveChannel))")
    }
  }
  for watcher in watchers { await watcher.sync.stop() }
  say("3 watching devices caught up over their live channels, with no sync of their own")
  let digests = try devices.map { try $0.0.eventSetDigest() }
  let states = try devices.map { try $0.0.stateDigest() }
  guard Set(digests).count == 1, digests.first == serverDigest, Set(states).count == 1 else {
    throw Failure(
      "devices did not converge: \(digests) \(states), server \(String(describing: serverDigest))"
    )
  }
  say(
    "3 devices converged: event-set digest \(digests[0]) (the server's too), "
      + "state digest \(states[0])")
}
