import Foundation
import Logging
import ServerTestSupport
import Synchronization
import Testing
import VLogServer
import VLogServerTesting
import VLogSync
import VLogTesting

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// A raw TCP connection to the loopback server, to behave as no HTTP client would.
final class RawConnection: Sendable {
  let descriptor: Int32
  /// When the connection was made.
  let opened = Date()

  struct Failed: Error { let what: String }

  /// Connects to `port` on 127.0.0.1 from `source`, an address of the loopback network
  /// (127.0.0.2 is another client than 127.0.0.1 to the server).
  init(port: Int, source: String = "127.0.0.1") throws {
    descriptor = try LoopbackSockets.tcp()
    var local = sockaddr_in()
    local.sin_family = sa_family_t(AF_INET)
    local.sin_addr.s_addr = inet_addr(source)
    let bound = withUnsafePointer(to: &local) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
      }
    }
    guard bound == 0 else {
      close(descriptor)
      throw Failed(what: "bind")
    }
    guard LoopbackSockets.connection(descriptor, toPort: port) else {
      close(descriptor)
      throw Failed(what: "connect")
    }
  }

  deinit { close(descriptor) }

  /// Closes the sending side, as a client that goes away does.
  func shutdown() {
    #if canImport(Glibc)
      _ = Glibc.shutdown(descriptor, Int32(SHUT_WR))
    #else
      _ = Darwin.shutdown(descriptor, SHUT_WR)
    #endif
  }

  func send(_ text: String) {
    let bytes = Array(text.utf8)
    _ = bytes.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, 0) }
  }

  /// What arrives within `seconds` (empty if nothing does), or as soon as a whole JSON answer
  /// has, or as soon as what arrived satisfies `done`.
  func receive(waiting seconds: Double, until done: (String) -> Bool = { _ in false }) -> String {
    var descriptors = [pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)]
    var received: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
      let left = Int32(max(1, deadline.timeIntervalSinceNow * 1000))
      guard poll(&descriptors, 1, left) > 0 else { break }
      let count = recv(descriptor, &buffer, buffer.count, Int32(MSG_DONTWAIT))
      guard count > 0 else { break }
      received += buffer.prefix(count)
      let text = String(decoding: received, as: UTF8.self)
      if text.contains("\r\n\r\n{"), text.hasSuffix("}") { break }
      if done(text) { break }
    }
    return String(decoding: received, as: UTF8.self)
  }

  /// Seconds until the server closes the connection, reading and discarding what it sends, or
  /// nil if it is still open after `limit` seconds.
  func secondsUntilClosed(limit: Int) -> Double? {
    var timeout = timeval(tv_sec: limit, tv_usec: 0)
    setsockopt(
      descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    let start = Date()
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
      let count = recv(descriptor, &buffer, buffer.count, 0)
      if count > 0 { continue }
      if count == 0 || errno == ECONNRESET { return Date().timeIntervalSince(start) }
      return nil
    }
  }
}

/// How long each connection lived, from its opening until the server closed it (nil: still
/// open after `limit` seconds), watching all of them at once.
func lifetimes(of connections: [RawConnection], limit: Double) -> [Double?] {
  var closed = [Double?](repeating: nil, count: connections.count)
  var buffer = [UInt8](repeating: 0, count: 4096)
  let deadline = Date().addingTimeInterval(limit)
  while closed.contains(where: { $0 == nil }), Date() < deadline {
    var watched = connections.enumerated().filter { closed[$0.offset] == nil }.map {
      pollfd(fd: $0.element.descriptor, events: Int16(POLLIN), revents: 0)
    }
    _ = poll(&watched, nfds_t(watched.count), 20)
    for (index, connection) in connections.enumerated() where closed[index] == nil {
      guard let entry = watched.first(where: { $0.fd == connection.descriptor }),
        entry.revents != 0
      else { continue }
      let count = recv(connection.descriptor, &buffer, buffer.count, Int32(MSG_DONTWAIT))
      if count == 0 || (count < 0 && errno == ECONNRESET) {
        closed[index] = Date().timeIntervalSince(connection.opened)
      }
    }
  }
  return closed
}

@Suite("Connections")
struct ConnectionTests {
  @Test(
    "A request head never finished and a body that stalls are closed by their timeouts",
    arguments: Backend.allCases)
  func slowHeadAndStalledBody(backend: Backend) async throws {
    var configuration = SyncServer.Configuration.testing
    configuration.idleTimeout = .seconds(3)
    configuration.requestHeadTimeout = .seconds(3)
    try await withServer(backend: backend, configuration: configuration) { server in
      try await withLiveServer(server) { baseURL in
        let port = try #require(baseURL.split(separator: ":").last.flatMap { Int($0) })
        // Before, both stayed open for good.
        let slowHeader = try RawConnection(port: port)
        slowHeader.send("POST /v1/sync HTT")
        let stalled = try RawConnection(port: port)
        stalled.send(
          "POST /v1/sync HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            + "Content-Length: 1000000000000\r\n\r\n{\"cursor\":0,")
        let closed = await offPool { lifetimes(of: [slowHeader, stalled], limit: 45) }
        #expect(closed.allSatisfy { $0 != nil }, "\(closed)")
      }
    }
  }

  @Test(
    "Idle connections are closed; past the cap, the one idle longest at once",
    arguments: Backend.allCases)
  func timeoutsAndCap(backend: Backend) async throws {
    var configuration = SyncServer.Configuration.testing
    // An idle timeout far from "at once": a loaded machine (two cores running the whole
    // suite, or ThreadSanitizer) may accept a connection seconds after it was made.
    configuration.idleTimeout = .seconds(20)
    configuration.requestHeadTimeout = .seconds(20)
    configuration.maximumConnections = 2
    try await withServer(backend: backend, configuration: configuration) { server in
      try await withLiveServer(server) { baseURL in
        let port = try #require(baseURL.split(separator: ":").last.flatMap { Int($0) })
        // Before, all of these stayed open for good. Three idle connections against a cap of
        // two (the test harness's own client may hold one of the places): each past the cap
        // closes the one idle longest at once, so the first goes at once and the others when
        // the idle timeout has passed.
        // Apart enough that the server takes them in order: each is set up on one of its event
        // loops, and a loaded loop can take a connection after a later one on another.
        var connections: [RawConnection] = []
        for _ in 0..<3 {
          connections.append(try RawConnection(port: port))
          try await Task.sleep(for: .milliseconds(400))
        }
        let watched = connections
        let lived = await offPool { lifetimes(of: watched, limit: 45) }
        #expect(lived.allSatisfy { $0 != nil }, "\(lived)")
        let seconds = lived.compactMap { $0 }
        // The first, idle longest, closed to admit the third, long before the idle timeout;
        // at least one other lived until it; none closed in between.
        #expect((lived.first ?? nil).map { $0 < 15 } == true, "\(lived)")
        #expect(seconds.contains { $0 >= 19.5 }, "\(lived)")
        #expect(seconds.allSatisfy { $0 < 15 || $0 >= 19.5 }, "\(lived)")

      }
    }
  }
}

@Suite("Slow bodies")
struct SlowBodyTests {
  @Test(
    "A body trickling in past the body timeout gets 408 and a closed connection; one announced over the limit 413 at once",
    arguments: Backend.allCases)
  func trickleAndAnnounced(backend: Backend) async throws {
    var configuration = SyncServer.Configuration.testing
    configuration.bodyTimeout = .seconds(1)
    configuration.idleTimeout = .seconds(30)
    try await withServer(backend: backend, configuration: configuration) { server in
      try await withLiveServer(server) { baseURL in
        let port = try #require(baseURL.split(separator: ":").last.flatMap { Int($0) })
        let caller = APICaller(transport: HTTPTransport(baseURL: baseURL))
        let token = try await signUp(caller, "ann")
        // A byte every 200 ms never trips the idle timeout; before, it held its connection
        // for as long as the body took.
        let trickle = try RawConnection(port: port)
        trickle.send(
          "POST /v1/sync HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer \(token)\r\n"
            + "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        let start = Date()
        var answer = ""
        // At most 99 bytes, so the body never completes; the answer should come after about
        // one second, and may take longer on a loaded machine.
        for _ in 0..<50 {
          trickle.send(" ")
          answer += await offPool { trickle.receive(waiting: 0.2) }
          if answer.contains("\r\n\r\n{") { break }
        }
        if !answer.contains("\r\n\r\n{") {
          answer += await offPool { trickle.receive(waiting: 10) }
        }
        #expect(answer.hasPrefix("HTTP/1.1 408"), "\(answer)")
        #expect(answer.contains("requestTimeout"))
        #expect(answer.lowercased().contains("connection: close"))
        // The body timeout's answer, not the idle timeout's (30 s), on however loaded a
        // machine.
        #expect(Date().timeIntervalSince(start) < 25)
        #expect(await offPool { trickle.secondsUntilClosed(limit: 5) } != nil)

        let announced = try RawConnection(port: port)
        announced.send(
          "POST /v1/sync HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer \(token)\r\n"
            + "Content-Type: application/json\r\nContent-Length: 1099511627776\r\n\r\n{")
        let refused = await offPool { announced.receive(waiting: 10) }
        #expect(refused.hasPrefix("HTTP/1.1 413"), "\(refused)")
      }
    }
  }
}

/// Keeps the server's log lines, to check what it says about a request: each logger made
/// with ``handler`` records into the same lines, with its own metadata.
final class RecordingLogHandler: Sendable {
  private let lines = Mutex<[String]>([])
  var recorded: [String] { lines.withLock { $0 } }
  func record(_ line: String) { lines.withLock { $0.append(line) } }
  /// A handler for one logger.
  var handler: Handler { Handler(recording: self) }

  struct Handler: LogHandler {
    let recording: RecordingLogHandler
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]
    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
      get { metadata[key] }
      set { metadata[key] = newValue }
    }
    func log(event: LogEvent) {
      let all = metadata.merging(event.metadata ?? [:]) { $1 }
      let fields = all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
      recording.record("\(event.level) \(event.message) " + fields.joined(separator: " "))
    }
  }
}

@Suite("Connections going away")
struct DisconnectTests {
  @Test(
    "A client that goes away mid-body is logged as a bad request, not a server failure",
    arguments: Backend.allCases)
  func disconnectMidBody(backend: Backend) async throws {
    let handler = RecordingLogHandler()
    let logger = Logger(label: "test") { _ in handler.handler }
    try await withServer(backend: backend, logger: logger) { server in
      try await withLiveServer(server) { baseURL in
        let port = try #require(baseURL.split(separator: ":").last.flatMap { Int($0) })
        let connection = try RawConnection(port: port)
        connection.send(
          "POST /v1/accounts HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            + "Content-Length: 1000\r\n\r\n{\"username\":")
        try await Task.sleep(for: .milliseconds(200))
        connection.shutdown()
        // Until the server has logged the request, however loaded the machine (a minute at
        // most): a fixed pause was too short on a busy one.
        for _ in 0..<600
        where !handler.recorded.contains(where: { $0.contains("path=/v1/accounts") }) {
          try await Task.sleep(for: .milliseconds(100))
        }
      }
      let requests = handler.recorded.filter { $0.contains("path=/v1/accounts") }
      // Before, this was an error line with status 500.
      let failures = requests.filter { $0.contains("status=500") }
      #expect(failures.isEmpty, "\(handler.recorded)")
      let early = requests.filter { $0.hasPrefix("info request ended early or malformed") }
      #expect(early.count == 1, "\(handler.recorded)")
    }
  }
}

/// Waits until `condition` holds, checking every 50 ms, for at most `seconds`.
func waitUntil(seconds: Double, _ condition: () -> Bool) async throws {
  let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
  while !condition(), ContinuousClock.now < deadline {
    try await Task.sleep(for: .milliseconds(50))
  }
}

@Suite("Idle sockets")
struct IdleSocketTests {
  @Test(
    "1,100 idle sockets at the default cap of 1,024 do not keep a client out: its sync succeeds at once",
    arguments: Backend.allCases)
  func flood(backend: Backend) async throws {
    var configuration = SyncServer.Configuration.testing
    configuration.idleTimeout = .seconds(60)
    configuration.requestHeadTimeout = .seconds(60)
    #expect(configuration.maximumConnections == 1024)
    try await withServer(backend: backend, configuration: configuration) { server in
      try await withLiveServer(server) { baseURL in
        let port = try #require(baseURL.split(separator: ":").last.flatMap { Int($0) })
        let token = try await signUp(APICaller(transport: HTTPTransport(baseURL: baseURL)), "ann")
        // Before, these held every place for the idle timeout, and every other client was
        // closed at once.
        // Connected off Swift concurrency's threads, which the server's handlers need.
        // From five addresses, each within its share of 256.
        var flood = try await offPool {
          Result {
            try (0..<1100).map { index in
              try RawConnection(port: port, source: "127.0.0.\(10 + index % 5)")
            }
          }
        }.get()
        // Until the server has taken them all: the flood's own connections made room for one
        // another, and the cap holds.
        try await waitUntil(seconds: 20) { server.openConnections >= 1024 }
        #expect(server.openConnections <= 1024)
        // A new connection (an HTTP client's pool would reuse the one it signed up on).
        let start = ContinuousClock.now
        let answer = await offPool {
          Result {
            let client = try RawConnection(port: port)
            let body = #"{"cursor":0,"events":[]}"#
            client.send(
              "POST /v1/sync HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer \(token)\r\n"
                + "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n"
                + body)
            return client.receive(waiting: 10)
          }
        }
        let took = ContinuousClock.now - start
        #expect(try answer.get().hasPrefix("HTTP/1.1 200"), "\(answer)")
        // Well under a second on an idle machine; bounded loosely for a loaded one (a test run
        // on two cores). Without eviction there is no answer until the idle timeout (60 s).
        #expect(took < .seconds(15), "\(took)")
        #expect(server.openConnections <= 1024)
        // The server stops with no accepted connection left unhandled.
        flood.removeAll()
        try await waitUntil(seconds: 20) { server.openConnections < 10 }
      }
    }
  }

  @Test(
    "A connection that sends no request head is closed after the head timeout, not the idle one")
  func headTimeout() async throws {
    var configuration = SyncServer.Configuration.testing
    configuration.idleTimeout = .seconds(60)
    configuration.requestHeadTimeout = .seconds(1)
    try await withServer(configuration: configuration) { server in
      try await withLiveServer(server) { baseURL in
        let port = try #require(baseURL.split(separator: ":").last.flatMap { Int($0) })
        let silent = try RawConnection(port: port)
        let partial = try RawConnection(port: port)
        partial.send("GET /v1/health HTTP/1.1\r\nHost: loc")
        let lived = await offPool { lifetimes(of: [silent, partial], limit: 20) }
        for seconds in lived {
          let seconds = try #require(seconds, "still open after 20 s")
          #expect(seconds < 15, "\(seconds)")
        }
      }
    }
  }

  @Test("Past the limit per address, its connection idle longest is closed for a new one")
  func perAddress() async throws {
    var configuration = SyncServer.Configuration.testing
    configuration.maximumConnectionsPerAddress = 2
    try await withServer(configuration: configuration) { server in
      try await withLiveServer(server) { baseURL in
        let port = try #require(baseURL.split(separator: ":").last.flatMap { Int($0) })
        // The harness's client may hold one place of 127.0.0.1's two.
        let connections = try (0..<3).map { _ in try RawConnection(port: port) }
        let lived = await offPool { lifetimes(of: connections, limit: 3) }
        #expect(lived.compactMap { $0 }.count >= 1, "\(lived)")
        #expect(lived.contains { $0 == nil }, "\(lived)")
      }
    }
  }
}

@Suite("Refusals on the wire")
struct WireRefusalTests {
  @Test("An unknown method gets the JSON error body; a lowercase bearer scheme is accepted")
  func unknownMethodAndScheme() async throws {
    try await withServer { server in
      try await withLiveServer(server) { baseURL in
        let port = try #require(baseURL.split(separator: ":").last.flatMap { Int($0) })
        let connection = try RawConnection(port: port)
        connection.send("FOO /v1/sync HTTP/1.1\r\nHost: localhost\r\n\r\n")
        let answer = await offPool { connection.receive(waiting: 5) }
        // Before, 400 with an empty body.
        #expect(answer.hasPrefix("HTTP/1.1 501"), "\(answer)")
        let body = try #require(answer.range(of: "\r\n\r\n").map { answer[$0.upperBound...] })
        let error = try JSONDecoder().decode(ErrorBody.self, from: Data(body.utf8))
        #expect(error.code == .httpError)
        #expect(error.message.contains("method"))

        let transport = HTTPTransport(baseURL: baseURL)
        let token = try await signUp(APICaller(transport: transport), "ann")
        for scheme in ["bearer", "BEARER", "Bearer  "] {
          let response = try await transport.send(
            TransportRequest(
              method: "POST", path: "/v1/sync",
              headers: ["content-type": "application/json", "authorization": "\(scheme) \(token)"],
              body: Array(#"{"cursor":0,"events":[]}"#.utf8)))
          #expect(response.status == 200, "\(scheme)")
        }
        for bad in ["Basic \(token)", "Bearer", "Bearer ", "Bearertoken"] {
          let response = try await transport.send(
            TransportRequest(
              method: "POST", path: "/v1/sync",
              headers: ["content-type": "application/json", "authorization": bad],
              body: Array(#"{"cursor":0,"events":[]}"#.utf8)))
          #expect(response.status == 401, "\(bad)")
        }
      }
    }
  }
}
