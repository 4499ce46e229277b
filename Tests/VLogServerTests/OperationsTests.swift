import Foundation
import HTTPTypes
import LMDB
import Logging
import ServerTestSupport
import Testing
import VLogServerTesting
import VLogSync
import VLogTesting
import VLogWire

@testable import VLog
@testable import VLogServer

@Suite("Operations")
struct OperationsTests {
  @Test(
    "the route table, gathered from the controllers, and the OpenAPI document name the same paths and methods"
  )
  func everyRouteIsDocumented() async throws {
    let server = try withTemporaryDirectory { root in
      try SyncServer.open(dataDirectory: root + "/server", configuration: .testing)
    }
    defer { server.close() }
    let routes = Set(
      RouteTable(server.controllers()).routes.flatMap { route in
        let path =
          "/"
          + route.path.split(separator: "/").map {
            $0.hasPrefix(":") ? "{\($0.dropFirst())}" : String($0)
          }.joined(separator: "/")
        return [route.method.rawValue + " " + path] + (route.answersHead ? ["HEAD " + path] : [])
      })
    let documented = Set(
      try OpenAPIValidator().paths.flatMap { path, item in
        item.keys.filter { $0 != "parameters" }.map { $0.uppercased() + " " + path }
      })
    #expect(routes == documented)
    #expect(routes.count == 28)
  }

  @Test("every event a live channel sends has the data the OpenAPI document describes for it")
  func liveEventsAreDocumented() throws {
    let validator = try OpenAPIValidator()
    let live = validator.paths["/v1/live"]?["get"] as? [String: Any]
    let stream =
      ((live?["responses"] as? [String: Any])?["200"] as? [String: Any]).flatMap {
        ($0["content"] as? [String: Any])?["text/event-stream"] as? [String: Any]
      }
    let events = try #require(stream?["x-vlog-events"] as? [String: Any])
    let messages: [LiveMessage] = [
      .head(0), .head(1 << 40), .ping, .closed(LiveHub.revoked), .closed(LiveHub.expired),
      .closed(LiveHub.shuttingDown),
    ]
    var seen = Set<String>()
    for message in messages {
      let text = String(decoding: message.encoded, as: UTF8.self)
      let lines = text.split(separator: "\n")
      guard let event = lines.first(where: { $0.hasPrefix("event: ") })?.dropFirst(7) else {
        #expect(text.hasPrefix(":"), "a message without an event is a comment: \(text)")
        seen.insert("ping")
        continue
      }
      seen.insert(String(event))
      let documented = try #require(
        events[String(event)] as? [String: Any], "event \(event) is documented")
      let data = try #require(lines.first { $0.hasPrefix("data: ") }?.dropFirst(6))
      let value = try JSONSerialization.jsonObject(with: Data(data.utf8))
      var problems: [String] = []
      validator.validate(
        value, against: try #require(documented["data"] as? [String: Any]), at: String(event),
        problems: &problems)
      #expect(problems.isEmpty, "\(problems)")
    }
    #expect(seen == Set(events.keys), "every documented event is sent, and only those")
  }

  /// The LMDB environment closes itself when a grown map cannot be made (the process's address
  /// space is exhausted); the server cannot serve from it again until it restarts, and says so.
  @Test("an LMDB server whose environment closed is not ready, though live")
  func lmdbReadinessFollowsTheEnvironment() async throws {
    try await withServer(backend: .lmdb) { server in
      let transport = try CheckedTransport(InProcessTransport(server: server))
      func status(_ path: String) async throws -> Int {
        try await transport.send(TransportRequest(method: "GET", path: path)).status
      }
      #expect(try await status("/v1/health") == 200)
      let storage = try #require(server.store as? LMDBStorage)
      storage.environment.close()
      #expect(try await status("/v1/health") == 503)
      #expect(try await status("/v1/health/live") == 200)
    }
  }

  @Test(
    "Readiness follows the database: 503 while it cannot be reached, 200 again once it can; liveness stays 200"
  )
  func readinessFollowsTheDatabase() async throws {
    let url = try await TestCluster.shared.newDatabase()
    let name = try #require(URLComponents(string: url)?.path.dropFirst()).description
    // A database that cannot be reached is reported as soon as a server of the default
    // configuration reports it.
    var configuration = SyncServer.Configuration.testing
    configuration.databaseConnectionWait = SyncServer.Configuration().databaseConnectionWait
    let server = try await SyncServer.open(
      database: url, maximumConnections: 2, configuration: configuration, logger: quietLogger)
    defer { server.close() }
    let transport = try CheckedTransport(InProcessTransport(server: server))
    func status(_ path: String) async throws -> Int {
      try await transport.send(TransportRequest(method: "GET", path: path)).status
    }
    #expect(try await status("/v1/health") == 200)
    // The database refuses connections, and the server's are cut.
    try await TestCluster.shared.execute("ALTER DATABASE \(name) ALLOW_CONNECTIONS false")
    try await TestCluster.shared.execute(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '\(name)'")
    #expect(try await status("/v1/health") == 503)
    #expect(try await status("/v1/health/live") == 200)
    // A request that needs the database is answered at once: 503, to retry.
    let caller = APICaller(transport: transport)
    let start = ContinuousClock.now
    let refused = await caller.createAccount(
      Credentials(username: "ann", password: "correct horse battery"))
    #expect(refused.status == 503 && refused.error?.body?.code == .unavailable)
    #expect(ContinuousClock.now - start < .seconds(15))
    // When connections have failed for a while the pool's circuit breaker may fail the request
    // with an error of its own module, not PostgreSQL's: 503 as well.
    let sync = await caller.sync(SyncPush(cursor: 0, events: []), token: "no-such-token")
    #expect(sync.status == 503)
    try await TestCluster.shared.execute("ALTER DATABASE \(name) ALLOW_CONNECTIONS true")
    var ready = false
    // The pool reconnects with a backoff that grows with the outage, up to a minute.
    for _ in 0..<600 where !ready {
      ready = try await status("/v1/health") == 200
      if !ready { try await Task.sleep(for: .milliseconds(100)) }
    }
    #expect(ready)
    // Ready means a connection works; the pool's other connection may still be waiting out its
    // backoff, and a request that needs it is answered 503, to retry, as any client does.
    var created = await caller.createAccount(
      Credentials(username: "ann", password: "correct horse battery"))
    for _ in 0..<600 where created.status == 503 {
      try await Task.sleep(for: .milliseconds(100))
      created = await caller.createAccount(
        Credentials(username: "ann", password: "correct horse battery"))
    }
    _ = try created.get()
    #expect(transport.problems.isEmpty, "\(transport.problems)")
    #expect(transport.seen.contains("GET /v1/health 503 application/json"))
    #expect(transport.seen.contains("POST /v1/accounts 503 application/json"))
  }

  @Test(
    "A caller's request id is logged and echoed; a malformed one is replaced",
    arguments: Backend.allCases)
  func requestIDs(backend: Backend) async throws {
    let handler = RecordingLogHandler()
    try await withServer(backend: backend, logger: Logger(label: "test") { _ in handler.handler }) {
      server in
      let transport = InProcessTransport(server: server)
      let given = try await transport.send(
        TransportRequest(
          method: "GET", path: "/v1/health", headers: ["X-Request-ID": "lb-7f3a.42"]))
      #expect(given.headers["x-request-id"] == "lb-7f3a.42")
      #expect(handler.recorded.contains { $0.contains("lb-7f3a.42") && $0.contains("/v1/health") })
      let odd = try await transport.send(
        TransportRequest(
          method: "GET", path: "/v1/health", headers: ["X-Request-ID": "spaces are not ok"]))
      let replaced = try #require(odd.headers["x-request-id"])
      #expect(replaced != "spaces are not ok" && !replaced.isEmpty)
    }
  }

  @Test(
    "A damaged log is answered 500 with the request's id and nothing of the storage, which goes to the log"
  )
  func storageFailure() async throws {
    let handler = RecordingLogHandler()
    try await withServer(logger: Logger(label: "test") { _ in handler.handler }) { server in
      let transport = InProcessTransport(server: server)
      let token = try await signUp(APICaller(transport: transport), "ann")
      let pushed = try await post(
        transport, "/v1/sync",
        #"{"cursor":0,"events":[{"time":"2020-01-01T00:00:00.000Z","counter":0,"#
          + #""replica":"d7a73666-0946-1e71-5ffe-d556129c8a84","kind":"textSet","#
          + #""note":"24bd364a-c001-66ab-8fd2-03bee860ff22","text":"hello"}]}"#, token: token)
      #expect(pushed.status == 200, "\(String(decoding: pushed.body, as: UTF8.self))")
      // Flip the stored event's checksum.
      let storage = try #require(server.store as? LMDBStorage)
      let log = try storage.environment.openDatabase(named: "log", flags: [])
      try storage.environment.write { transaction in
        let key = BigEndian.bytes(UInt64(1)) + BigEndian.bytes(UInt64(1))
        var record = try #require(try transaction.value(forKey: key, in: log))
        record[0] ^= 0xFF
        try transaction.put(record, forKey: key, in: log)
      }
      let answer = try await transport.send(
        TransportRequest(
          method: "POST", path: "/v1/sync",
          headers: [
            "content-type": "application/json", "authorization": "Bearer \(token)",
            "X-Request-ID": "damaged-42",
          ],
          body: Array(#"{"cursor":0,"events":[]}"#.utf8)))
      #expect(answer.status == 500)
      let body = try errorBody(answer)
      #expect(body.message.contains("damaged-42"), "\(body.message)")
      #expect(!body.message.contains("checksum") && !body.message.contains("event"))
      #expect(handler.recorded.contains { $0.contains("damaged-42") && $0.contains("checksum") })
    }
  }

  @Test(
    "Shutting down finishes the request in flight: its body arrives after the shutdown began, and it is answered",
    arguments: Backend.allCases)
  func gracefulShutdown(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      let body = #"{"username":"late","password":"correct horse battery"}"#
      let answer = try await server.serving { port in
        let connection = try RawConnection(port: port)
        connection.send(
          "POST /v1/accounts HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            + "Content-Length: \(body.utf8.count)\r\n\r\n" + String(body.prefix(10)))
        // Time for the server to read the request's head, even on a loaded machine (or under
        // ThreadSanitizer): a connection whose request has not begun is idle, and closed.
        try await Task.sleep(for: .seconds(1))
        // Leaving this closure starts the graceful shutdown; the rest of the body comes later.
        return Task.detached {
          try? await Task.sleep(for: .milliseconds(300))
          connection.send(String(body.dropFirst(10)))
          // On a thread of its own: a blocked thread of the pool would slow the server.
          return await offPool { connection.receive(waiting: 30) }
        }
      }
      let response = await answer.value
      #expect(response.hasPrefix("HTTP/1.1 201"), "\(response)")
      #expect(response.contains("X-Request-ID") || response.contains("x-request-id"))
    }
  }
}
