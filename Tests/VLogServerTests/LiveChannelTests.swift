import Foundation
import Logging
import ServerTestSupport
import Testing
import VLogServer
import VLogSync
import VLogTesting

@testable import VLog

/// The messages of one live channel as they arrive, for a test to wait on.
actor LiveInbox {
  private var messages: [LiveMessage] = []
  private var failure: String?
  private var ended = false
  private var reader: Task<Void, Never>?

  /// Opens `GET /v1/live` with `token` and starts reading; the answer's status if it is not
  /// 200.
  static func open(_ caller: APICaller, token: String) async throws -> LiveInbox {
    let stream = try await caller.openLive(token: token).get()
    let inbox = LiveInbox()
    await inbox.start(stream)
    return inbox
  }

  private func start(_ stream: TransportStream) {
    reader = Task {
      var parser = LiveStreamParser()
      do {
        for try await chunk in stream.chunks {
          let messages = try parser.read(chunk)
          self.received(messages)
        }
        self.end(nil)
      } catch {
        self.end("\(error)")
      }
    }
  }

  private func received(_ new: [LiveMessage]) { messages += new }
  private func end(_ error: String?) {
    ended = true
    failure = error
  }

  /// Everything received so far.
  var all: [LiveMessage] { messages }
  /// Whether the stream ended.
  var hasEnded: Bool { ended }

  /// The first message (skipping pings unless asked for) after the `skip` first, waiting up to
  /// `seconds`; nil if none comes.
  func message(
    after skip: Int = 0, pings: Bool = false, within seconds: Double = 10
  ) async -> LiveMessage? {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    // Each wait below polls; a cancelled sleep only ends its wait sooner, which the deadline
    // check then reports as nothing arriving.
    while ContinuousClock.now < deadline {
      let wanted = messages.dropFirst(skip).first { pings || $0 != .ping }
      if let wanted { return wanted }
      if ended { return nil }
      try? await Task.sleep(for: .milliseconds(5))
    }
    return nil
  }

  /// Waits up to `seconds` for a head of at least `sequence`; whether one came.
  func waitForHead(_ sequence: UInt64, within seconds: Double = 10) async -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    while ContinuousClock.now < deadline {
      if messages.contains(where: { if case .head(let h) = $0 { h >= sequence } else { false } }) {
        return true
      }
      try? await Task.sleep(for: .milliseconds(5))
    }
    return false
  }

  /// Waits up to `seconds` for the stream to end; its closing message, if it sent one.
  func closing(within seconds: Double = 10) async -> ErrorBody? {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    while ContinuousClock.now < deadline, !ended {
      try? await Task.sleep(for: .milliseconds(5))
    }
    for case .closed(let body) in messages { return body }
    return nil
  }

  /// Waits for `count` pings more than there are now: proof that nothing else arrived
  /// meanwhile that was sent before them.
  func waitForPings(_ count: Int, within seconds: Double = 10) async -> Bool {
    let start = messages.filter { $0 == .ping }.count
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    while ContinuousClock.now < deadline {
      if messages.filter({ $0 == .ping }).count >= start + count { return true }
      try? await Task.sleep(for: .milliseconds(5))
    }
    return false
  }

  /// Stops reading: the connection closes.
  func close() { reader?.cancel() }
}

/// One event of a note's text, stamped at `millisecond`.
func liveEvent(_ index: Int, replica: UInt64 = 9) -> Event {
  Event(
    stamp: Stamp(
      time: HybridTime(milliseconds: 1_767_225_600_000 + UInt64(index), counter: 0),
      replica: ReplicaID(Identifier(high: replica, low: 1))),
    change: .textSet(NoteID(Identifier(high: 7, low: UInt64(index))), text: "text \(index)"))
}

@Suite("Live channel")
struct LiveChannelTests {
  /// Pings every second, so that tests see them.
  static var configuration: SyncServer.Configuration {
    var configuration = SyncServer.Configuration.testing
    configuration.liveKeepAlive = .seconds(1)
    return configuration
  }

  @Test(
    "A push reaches the account's open channels as its new head, and never another account's",
    arguments: Backend.allCases)
  func headArrives(backend: Backend) async throws {
    try await withServer(backend: backend, configuration: Self.configuration) { server in
      try await withLiveServer(server) { baseURL in
        let caller = APICaller(transport: HTTPTransport(baseURL: baseURL))
        let ann = try await signUp(caller, "ann")
        let bob = try await signUp(caller, "bob")
        let annLaptop = try await LiveInbox.open(caller, token: ann)
        let annPhone = try await LiveInbox.open(caller, token: ann)
        let bobs = try await LiveInbox.open(caller, token: bob)
        #expect(await annLaptop.message() == .head(0))
        #expect(await bobs.message() == .head(0))
        _ = try await caller.sync(SyncPush(cursor: 0, events: [liveEvent(1)]), token: ann).get()
        #expect(await annLaptop.message(after: 1) == .head(1))
        #expect(await annPhone.waitForHead(1))
        // A push that stores nothing new (a retry) announces nothing.
        _ = try await caller.sync(SyncPush(cursor: 1, events: [liveEvent(1)]), token: ann).get()
        _ = try await caller.sync(SyncPush(cursor: 0, events: [liveEvent(2)]), token: ann).get()
        #expect(await annLaptop.waitForHead(2))
        #expect(await annLaptop.all.filter { $0 != .ping } == [.head(0), .head(1), .head(2)])
        // Two pings after the pushes: anything sent to bob before them has arrived.
        #expect(await bobs.waitForPings(2))
        #expect(await bobs.all.filter { $0 != .ping } == [.head(0)])
        #expect(server.openLiveChannels == 3)
        for inbox in [annLaptop, annPhone, bobs] { await inbox.close() }
      }
    }
  }

  @Test(
    "A channel ends, saying why, when its session ends: signed out, revoked, password changed, account deleted, token expired",
    arguments: Backend.allCases)
  func sessionEnds(backend: Backend) async throws {
    let clock = ManualClock()
    try await withServer(backend: backend, configuration: Self.configuration, clock: clock) {
      server in
      try await withLiveServer(server) { baseURL in
        let caller = APICaller(transport: HTTPTransport(baseURL: baseURL))
        let credentials = Credentials(username: "ann", password: "correct horse battery")
        let first = try await signUp(caller, "ann")
        func session() async throws -> String { try await caller.signIn(credentials).get().token }

        // Signed out.
        let signedOut = try await LiveInbox.open(caller, token: first)
        let bystander = try await LiveInbox.open(caller, token: try await session())
        _ = try await caller.signOut(token: first).get()
        #expect(await signedOut.closing()?.code == .unauthorized)
        // After its closing message the answer ends (the connection holding it closes).
        #expect(await signedOut.hasEnded)
        #expect(await !bystander.hasEnded)

        // Revoked from another session.
        let keeper = try await session()
        let revokedToken = try await session()
        let revoked = try await LiveInbox.open(caller, token: revokedToken)
        let id = try #require(
          try await caller.sessions(token: revokedToken).get().sessions.first(where: \.current)?.id
        )
        _ = try await caller.revokeSession(id: id, token: keeper).get()
        #expect(await revoked.closing()?.code == .unauthorized)

        // The password changed: every other session's channel ends, the changer's stays.
        let changer = try await LiveInbox.open(caller, token: keeper)
        _ = try await caller.changePassword(
          PasswordChange(
            currentPassword: "correct horse battery", newPassword: "a new mauve ladder"),
          token: keeper
        ).get()
        #expect(await bystander.closing()?.code == .unauthorized)
        #expect(await changer.waitForPings(1))
        #expect(await !changer.hasEnded)

        // Expired: the server's clock passes the token's lifetime.
        clock.advance(by: Double(SyncServer.Configuration.testing.tokenLifetime.components.seconds))
        #expect(await changer.closing()?.code == .tokenExpired)

        // Deleted.
        clock.advance(
          by: -Double(SyncServer.Configuration.testing.tokenLifetime.components.seconds))
        let last = try await caller.signIn(
          Credentials(username: "ann", password: "a new mauve ladder")
        ).get().token
        let deleted = try await LiveInbox.open(caller, token: last)
        #expect(await deleted.message() == .head(0))
        _ = try await caller.deleteAccount(password: "a new mauve ladder", token: last).get()
        #expect(await deleted.closing()?.code == .unauthorized)
        try await Task.sleep(for: .milliseconds(200))
        #expect(server.openLiveChannels == 0)
      }
    }
  }

  @Test(
    "Channels are bounded per account and in all, apart from request connections, and each refusal says when to retry"
  )
  func limits() async throws {
    var configuration = Self.configuration
    configuration.maximumLiveChannels = 3
    configuration.maximumLiveChannelsPerAccount = 2
    configuration.maximumConnections = 2
    // No ping within the test: a channel whose device stops must end by itself.
    configuration.liveKeepAlive = .seconds(600)
    try await withServer(configuration: configuration) { server in
      try await withLiveServer(server) { baseURL in
        let caller = APICaller(transport: HTTPTransport(baseURL: baseURL))
        let ann = try await signUp(caller, "ann")
        let bob = try await signUp(caller, "bob")
        var open = [
          try await LiveInbox.open(caller, token: ann),
          try await LiveInbox.open(caller, token: ann),
        ]
        let perAccount = await caller.openLive(token: ann)
        #expect(perAccount.status == 429 && perAccount.error?.retryAfter == .seconds(30))
        open.append(try await LiveInbox.open(caller, token: bob))
        let total = await caller.openLive(token: bob)
        #expect(total.status == 503 && total.error?.body?.code == .unavailable)
        #expect(total.error?.retryAfter == .seconds(30))
        // Three channels are open on a server of two request connections, and requests are
        // still served: neither count takes the other's places.
        #expect(server.openLiveChannels == 3)
        #expect(server.openConnections <= 2)
        for _ in 0..<3 {
          _ = try await caller.sync(SyncPush(cursor: 0, events: []), token: bob).get()
        }
        // A channel whose device stops reading gives its place back at once (before, only
        // when the next ping found the connection gone).
        await open.removeFirst().close()
        #expect(await eventually { server.openLiveChannels == 2 })
        open.append(try await LiveInbox.open(caller, token: ann))
        for inbox in open { await inbox.close() }
      }
    }
  }

  @Test(
    "An open channel holds no task of the HTTP server: the connection's task ends as the channel opens, and the channel goes on"
  )
  func connectionTaskEnds() async throws {
    // The HTTP server says that a connection's task ended through an error only at trace
    // level; without the handover's error, the task waits for the connection to close.
    let recording = RecordingLogHandler()
    let logger = Logger(label: "test") { _ in
      var handler = recording.handler
      handler.logLevel = .trace
      return handler
    }
    try await withServer(configuration: Self.configuration, logger: logger) { server in
      try await withLiveServer(server) { baseURL in
        let caller = APICaller(transport: HTTPTransport(baseURL: baseURL))
        let ann = try await signUp(caller, "ann")
        let inbox = try await LiveInbox.open(caller, token: ann)
        #expect(await inbox.message() == .head(0))
        func taskEnded() -> Bool {
          recording.recorded.contains { $0.contains("HandedOver()") }
        }
        try await waitUntil(seconds: 10, taskEnded)
        #expect(taskEnded(), "\(recording.recorded.suffix(20))")
        _ = try await caller.sync(SyncPush(cursor: 0, events: [liveEvent(1)]), token: ann).get()
        #expect(await inbox.message(after: 1) == .head(1))
        #expect(await inbox.waitForPings(1))
        #expect(server.openLiveChannels == 1)
        await inbox.close()
      }
    }
  }

  @Test("Shutting the server down ends its channels, saying so, and the server stops")
  func shutdown() async throws {
    try await withServer(configuration: Self.configuration) { server in
      let inbox = try await server.serving { port in
        let caller = APICaller(transport: HTTPTransport(baseURL: "http://127.0.0.1:\(port)"))
        let token = try await signUp(caller, "ann")
        let inbox = try await LiveInbox.open(caller, token: token)
        #expect(await inbox.message() == .head(0))
        return inbox
      }
      #expect(await inbox.closing()?.code == .unavailable)
    }
  }

  @Test(
    "With three servers on one database, a push on any reaches the channels on every other; a server whose LISTEN connection is lost listens again and catches its devices up"
  )
  func manyServers() async throws {
    let url = try await TestCluster.shared.newDatabase()
    var opened: [SyncServer] = []
    for _ in 0..<3 {
      opened.append(
        try await SyncServer.open(
          database: url, maximumConnections: 4, configuration: Self.configuration,
          logger: quietLogger))
    }
    let servers = opened
    defer { for server in servers { server.close() } }
    try await withLiveServer(servers[0]) { first in
      try await withLiveServer(servers[1]) { second in
        try await withLiveServer(servers[2]) { third in
          let callers = [first, second, third].map {
            APICaller(transport: HTTPTransport(baseURL: $0))
          }
          let token = try await signUp(callers[0], "ann")
          var inboxes: [LiveInbox] = []
          for caller in callers { inboxes.append(try await LiveInbox.open(caller, token: token)) }
          for inbox in inboxes { #expect(await inbox.message() == .head(0)) }
          for (index, caller) in callers.enumerated() {
            _ = try await caller.sync(
              SyncPush(cursor: 0, events: [liveEvent(index + 1)]), token: token
            ).get()
            for inbox in inboxes {
              #expect(await inbox.waitForHead(UInt64(index + 1)), "push on server \(index)")
            }
          }
          // The database ends every server's LISTEN connection (whose last statement was
          // LISTEN, or the heartbeat's SELECT 1); a push lands before they listen again.
          let database = try #require(URLComponents(string: url)?.path.dropFirst())
          try await TestCluster.shared.execute(
            """
            SELECT pg_terminate_backend(pid) FROM pg_stat_activity
            WHERE datname = '\(database)' AND (query LIKE 'LISTEN%' OR query = 'SELECT 1')
            """)
          _ = try await callers[1].sync(
            SyncPush(cursor: 0, events: [liveEvent(10)]), token: token
          ).get()
          for (index, inbox) in inboxes.enumerated() {
            // Within the heartbeat (10 s), the wait before listening again and the
            // resynchronization, on a machine the whole suite loads: a resynchronization that
            // fails there is tried again after 1 s, then 2, 4, 8 and 16, and a listen that
            // fails waits longer each time too, so 30 s could end before the next try.
            #expect(await inbox.waitForHead(4, within: 90), "server \(index) caught up")
          }
          for inbox in inboxes { await inbox.close() }
        }
      }
    }
  }

  @Test(
    "Automatic sync holds the channel: another device's edit reaches this store with no trigger here, and its own pushes cause no extra sync",
    arguments: Backend.allCases)
  func automaticSync(backend: Backend) async throws {
    try await withServer(backend: backend, configuration: Self.configuration) { server in
      try await withLiveServer(server) { baseURL in
        try await withTemporaryDirectory { root in
          let devices = try openDevices(
            2, root: root, transport: { _ in HTTPTransport(baseURL: baseURL) },
            credentials: Credentials(username: "ann", password: "correct horse battery"), seed: 4)
          defer { for device in devices { device.store.close() } }
          try await devices[0].account.createAccount()
          let syncs = devices.map { AutomaticSync(account: $0.account, delay: .milliseconds(50)) }
          for sync in syncs { await sync.start() }
          for sync in syncs {
            #expect(await eventually { await sync.status.liveChannel == .open })
            #expect(await eventually { await sync.status.activity == .idle })
          }
          let before = await syncs[1].syncCount
          let note = try await devices[0].store.write { $0.createNote(text: "from the laptop") }
          // A read that fails counts as not there yet; the next line reads it with `try`.
          #expect(await eventually { (try? devices[1].store.note(note)) != nil })
          #expect(try devices[1].store.note(note)?.text == "from the laptop")
          #expect(await syncs[1].syncCount == before + 1)
          // The laptop's push announced itself to the laptop too: no second sync there.
          try await Task.sleep(for: .milliseconds(300))
          #expect(await syncs[0].syncCount == 2)
          for sync in syncs { await sync.stop() }
        }
      }
    }
  }

  /// Polls `condition` (up to ten seconds) and says whether it came true.
  private func eventually(_ condition: () async -> Bool) async -> Bool {
    for _ in 0..<1000 {
      if await condition() { return true }
      // A cancelled sleep only polls sooner; the count still bounds the wait.
      try? await Task.sleep(for: .milliseconds(10))
    }
    return await condition()
  }

  @Test(
    "Cross-origin requests: an allowed origin gets CORS headers and its preflight answered; another gets neither"
  )
  func crossOrigin() async throws {
    var configuration = Self.configuration
    configuration.allowedOrigins = ["http://127.0.0.1:9999"]
    try await withServer(configuration: configuration) { server in
      try await withLiveServer(server) { baseURL in
        let transport = HTTPTransport(baseURL: baseURL)
        let preflight = { (origin: String) in
          try await transport.send(
            TransportRequest(
              method: "OPTIONS", path: "/v1/live",
              headers: [
                "origin": origin, "access-control-request-method": "GET",
                "access-control-request-headers": "authorization",
              ]))
        }
        let allowed = try await preflight("http://127.0.0.1:9999")
        #expect(allowed.status == 204)
        #expect(allowed.headers["access-control-allow-origin"] == "http://127.0.0.1:9999")
        #expect(
          allowed.headers["access-control-allow-headers"]?.lowercased().contains("authorization")
            == true)
        #expect(allowed.headers["access-control-allow-methods"]?.contains("GET") == true)
        let refused = try await preflight("http://127.0.0.1:9998")
        #expect(refused.headers["access-control-allow-origin"] == nil)
        #expect(refused.status != 204)
        // An error answer carries the headers too, so that the page can read why.
        let unauthorized = try await transport.send(
          TransportRequest(
            method: "GET", path: "/v1/sessions", headers: ["origin": "http://127.0.0.1:9999"]))
        #expect(unauthorized.status == 401)
        #expect(unauthorized.headers["access-control-allow-origin"] == "http://127.0.0.1:9999")
        #expect(
          unauthorized.headers["access-control-expose-headers"]?.contains("Retry-After") == true)
        let other = try await transport.send(
          TransportRequest(
            method: "GET", path: "/v1/sessions", headers: ["origin": "http://127.0.0.1:9998"]))
        #expect(other.headers["access-control-allow-origin"] == nil)
      }
    }
    // None allowed by default.
    try await withServer(configuration: Self.configuration) { server in
      try await withLiveServer(server) { baseURL in
        let response = try await HTTPTransport(baseURL: baseURL).send(
          TransportRequest(
            method: "OPTIONS", path: "/v1/sync",
            headers: ["origin": "http://127.0.0.1:9999", "access-control-request-method": "POST"]))
        #expect(response.headers["access-control-allow-origin"] == nil)
      }
    }
  }

  @Test("Origins as operators write them are read as browsers send them")
  func origins() {
    #expect(
      SyncServer.Configuration.origin("https://Notes.Example.com") == "https://notes.example.com")
    #expect(SyncServer.Configuration.origin("http://127.0.0.1:8080/") == "http://127.0.0.1:8080")
    for bad in ["notes.example.com", "ftp://x", "https://x/app", "https://x?y=1", "https://", "*"] {
      #expect(SyncServer.Configuration.origin(bad) == nil, "\(bad)")
    }
  }
}
