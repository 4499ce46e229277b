import Foundation
import ServerTestSupport
import Testing
import VLogServer
import VLogSync
import VLogTesting

/// The head of a request to `POST /v1/sessions` announcing `length` bytes of body, with its
/// first byte.
private func slowSignIn(length: Int = 100) -> String {
  "POST /v1/sessions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
    + "Content-Length: \(length)\r\n\r\n{"
}

/// A sync call's raw request with an empty push, from `source`: its answer's first line.
private func syncAnswer(port: Int, token: String, source: String) async -> String {
  await offPool {
    do {
      let client = try RawConnection(port: port, source: source)
      let body = #"{"cursor":0,"events":[]}"#
      client.send(
        "POST /v1/sync HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer \(token)\r\n"
          + "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\n\r\n" + body)
      return client.receive(waiting: 15)
    } catch {
      return "\(error)"
    }
  }
}

@Suite("Doors that hold")
struct DoorTests {
  @Test(
    "1,100 connections from one address sending bodies a byte at a time keep no other client out, and are cut with 408",
    arguments: Backend.allCases)
  func slowBodyLockout(backend: Backend) async throws {
    var configuration = SyncServer.Configuration.testing
    // The defaults but the grace, so that the cut comes soon: 1,024 places, 256 per address.
    #expect(configuration.maximumConnections == 1024)
    #expect(configuration.maximumConnectionsPerAddress == 256)
    configuration.bodyGrace = .seconds(2)
    configuration.idleTimeout = .seconds(60)
    try await withServer(backend: backend, configuration: configuration) { server in
      try await withLiveServer(server) { baseURL in
        let port = try #require(baseURL.split(separator: ":").last.flatMap { Int($0) })
        let token = try await signUp(APICaller(transport: HTTPTransport(baseURL: baseURL)), "ann")
        let attack = try await offPool {
          Result {
            try (0..<1100).map { _ in
              let connection = try RawConnection(port: port)
              connection.send(slowSignIn())
              return connection
            }
          }
        }.get()
        // Another client, at another address, is answered at once; before, every place was
        // held by a request whose body never came.
        let answer = await syncAnswer(port: port, token: token, source: "127.0.0.2")
        #expect(answer.hasPrefix("HTTP/1.1 200"), "\(answer)")
        #expect(server.openConnections <= 256 + 2)
        // The slow bodies that got a place are cut: 408 once their grace is over and their
        // bytes earned no more time; the others were closed at once, with nothing. Which got a
        // place is the server's scheduling: one whose request the server had not read yet when
        // its address reached the cap counted as idle, and gave way.
        let answers = await offPool { attack.map { $0.receive(waiting: 20) } }
        let cut = answers.filter { !$0.isEmpty }
        #expect(!cut.isEmpty)
        #expect(
          cut.allSatisfy { $0.hasPrefix("HTTP/1.1 408") && $0.contains("requestTimeout") },
          "\(cut.first { !$0.hasPrefix("HTTP/1.1 408") } ?? "")")
        try await waitUntil(seconds: 30) { server.openConnections < 10 }
        #expect(server.openConnections < 10)
      }
    }
  }

  @Test(
    "At the cap, a connection whose body lags behind the minimum rate gives its place to a new client from the same address",
    arguments: Backend.allCases)
  func lagEvicted(backend: Backend) async throws {
    var configuration = SyncServer.Configuration.testing
    configuration.maximumConnections = 24
    configuration.maximumConnectionsPerAddress = nil
    configuration.bodyGrace = .seconds(100)
    try await withServer(backend: backend, configuration: configuration) { server in
      try await withLiveServer(server) { baseURL in
        let port = try #require(baseURL.split(separator: ":").last.flatMap { Int($0) })
        let token = try await signUp(APICaller(transport: HTTPTransport(baseURL: baseURL)), "ann")
        let slow = try await offPool {
          Result {
            try (0..<24).map { _ in
              let connection = try RawConnection(port: port)
              connection.send(slowSignIn())
              return connection
            }
          }
        }.get()
        // Every place is taken by a request whose body lags (the harness's own idle connection
        // gave its place first).
        try await waitUntil(seconds: 60) { server.connectionsInRequests >= 24 }
        #expect(server.connectionsInRequests == 24)
        let answer = await syncAnswer(port: port, token: token, source: "127.0.0.1")
        #expect(answer.hasPrefix("HTTP/1.1 200"), "\(answer)")
        _ = slow
      }
    }
  }

  @Test(
    "A body that keeps the minimum rate is read past the grace; one that does not gets 408",
    arguments: Backend.allCases)
  func minimumRate(backend: Backend) async throws {
    var configuration = SyncServer.Configuration.testing
    configuration.bodyGrace = .seconds(1)
    configuration.minimumBodyRate = 500
    try await withServer(backend: backend, configuration: configuration) { server in
      try await withLiveServer(server) { baseURL in
        let port = try #require(baseURL.split(separator: ":").last.flatMap { Int($0) })
        let answers = await offPool {
          () -> (String, String) in
          guard let steady = try? RawConnection(port: port),
            let trickle = try? RawConnection(port: port)
          else { return ("", "") }
          // 4,000 bytes over about 2 seconds (2,000 a second) past a grace of 1 second.
          let password = String(repeating: "x", count: 3960)
          let body = #"{"username":"ann","password":"\#(password)"}"#
          steady.send(slowSignIn(length: body.utf8.count) + "")
          let bytes = Array(body.utf8.dropFirst())
          trickle.send(slowSignIn())
          var trickled = ""
          for chunk in stride(from: 0, to: bytes.count, by: 400) {
            steady.send(
              String(decoding: bytes[chunk..<min(chunk + 400, bytes.count)], as: UTF8.self))
            trickle.send(" ")
            trickled += trickle.receive(waiting: 0.2)
          }
          trickled += trickle.receive(waiting: 10)
          return (steady.receive(waiting: 10), trickled)
        }
        // The steady body was read whole: its answer is about the body (a password too long).
        #expect(answers.0.hasPrefix("HTTP/1.1 400"), "\(answers.0)")
        #expect(answers.0.contains("invalidField"))
        #expect(answers.1.hasPrefix("HTTP/1.1 408"), "\(answers.1)")
      }
    }
  }

  @Test("An address may create so many accounts an hour; past it, 429 with Retry-After")
  func signUpLimit() async throws {
    var configuration = SyncServer.Configuration.testing
    configuration.signUpsPerAddressPerHour = 3
    let clock = ManualClock()
    try await withServer(configuration: configuration, clock: clock) { server in
      try await withLiveServer(server) { baseURL in
        let caller = APICaller(transport: HTTPTransport(baseURL: baseURL))
        for name in ["a1", "a2", "a3"] { _ = try await signUp(caller, name) }
        let refused = await caller.createAccount(
          Credentials(username: "a4", password: "correct horse battery"))
        #expect(refused.status == 429, "\(refused)")
        #expect(refused.error?.retryAfter == .seconds(3600))
        // Signing in is not signing up.
        _ = try await caller.signIn(Credentials(username: "a1", password: "correct horse battery"))
          .get()
        clock.advance(by: 3600)
        _ = try await signUp(caller, "a4")
      }
    }
  }

  @Test(
    "The live channel refuses HTTP/1.0 clearly, which has no chunks to stream in; other calls answer it"
  )
  func http10() async throws {
    try await withServer(clock: ManualClock(start: Date())) { server in
      try await withLiveServer(server) { baseURL in
        let port = try #require(baseURL.split(separator: ":").last.flatMap { Int($0) })
        let token = try await signUp(APICaller(transport: HTTPTransport(baseURL: baseURL)), "ann")
        // What arrives until a whole JSON answer has, or with `headOnly` the head (a stream's
        // answer never ends), on however loaded a machine.
        func ask(_ request: String, headOnly: Bool = false) async -> String {
          await offPool {
            guard let client = try? RawConnection(port: port) else { return "" }
            client.send(request)
            return client.receive(waiting: 60) { headOnly && $0.contains("\r\n\r\n") }
          }
        }
        let live = await ask("GET /v1/live HTTP/1.0\r\nAuthorization: Bearer \(token)\r\n\r\n")
        #expect(live.hasPrefix("HTTP/1.0 505"), "\(live)")
        #expect(live.contains("httpError") && live.contains("HTTP/1.1"))
        #expect(!live.lowercased().contains("transfer-encoding"))
        let health = await ask("GET /v1/health/live HTTP/1.0\r\n\r\n")
        #expect(health.hasPrefix("HTTP/1.0 200") || health.hasPrefix("HTTP/1.1 200"), "\(health)")
        // In HTTP/1.1 the channel opens.
        let opened = await ask(
          "GET /v1/live HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer \(token)\r\n\r\n",
          headOnly: true)
        #expect(opened.hasPrefix("HTTP/1.1 200"), "\(opened)")
      }
    }
  }
}
