import Foundation
import HTTPTypes
import HummingbirdTesting
import Logging
import OpenAPIRuntime
import ServerTestSupport
import Synchronization
import Testing
import VLog
import VLogServer
import VLogTesting

/// Runs `body` with a live server on loopback (port 0) on `backend`: LMDB in a temporary
/// directory, or a new database in the test run's PostgreSQL cluster.
///
/// A body must arrive within `bodyTimeout`: by default as long as the whole suite on two cores
/// may make a 64 KiB upload take; a test of the 408 passes a short one.
func withGeneratedClient(
  backend: Backend, bodyTimeout: Duration = .seconds(60),
  _ body: @escaping @Sendable (API) async throws -> Void
) async throws {
  let clock = ManualClock(start: Date())
  // Small limits, so that a 413 takes little to provoke.
  var configuration = SyncServer.Configuration(
    maximumBodyBytes: 64 << 10, maximumBlobBytes: 64 << 10, passwordCost: .testing,
    durability: .noSync, bodyTimeout: bodyTimeout)
  // As the server tests' configuration: a call, and its wait for a database connection, take
  // as long as the whole suite on two cores may make them.
  configuration.databaseTimeout = .seconds(60)
  configuration.databaseConnectionWait = .seconds(30)
  let dependencies = SyncServer.Dependencies(
    now: { clock.now }, randomBytes: SyncServer.Dependencies.live.randomBytes)
  var logger = Logger(label: "OpenAPIClientTests")
  logger.logLevel = .critical
  let run = { (server: SyncServer, database: String?) in
    defer { server.close() }
    try await server.application(host: "127.0.0.1", port: 0).test(.live) { client in
      let port = try #require(client.port)
      let url = try #require(URL(string: "http://127.0.0.1:\(port)"))
      try await body(API(url: url, database: database, clock: clock, sent: SentBodies()))
    }
  }
  switch backend {
  case .lmdb:
    try await withTemporaryDirectory { root in
      try await run(
        try SyncServer.open(
          dataDirectory: root + "/server", configuration: configuration,
          dependencies: dependencies, logger: logger), nil)
    }
  case .postgres:
    let url = try await TestCluster.shared.newDatabase()
    let name = try #require(URLComponents(string: url)?.path.dropFirst()).description
    try await run(
      try await SyncServer.open(
        database: url, configuration: configuration, dependencies: dependencies, logger: logger),
      name)
  }
}

/// Times as a client in another language might send them: RFC 3339 with a `+00:00` offset and
/// microseconds (`2025-11-23T18:56:55.477000+00:00`); read in any RFC 3339 form. The
/// generator's default transcoder neither sends nor reads fractions of a second.
struct OffsetTimes: DateTranscoder {
  func encode(_ date: Date) throws -> String {
    let milliseconds = Int64((date.timeIntervalSince1970 * 1000).rounded())
    var seconds = time_t(milliseconds.quotient(dividingBy: 1000))
    var parts = tm()
    guard gmtime_r(&seconds, &parts) != nil else {
      throw EncodingError.invalidValue(
        date, .init(codingPath: [], debugDescription: "a time gmtime cannot split"))
    }
    return String(
      format: "%04d-%02d-%02dT%02d:%02d:%02d.%03d000+00:00", Int(parts.tm_year) + 1900,
      Int(parts.tm_mon) + 1, Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min),
      Int(parts.tm_sec), Int(milliseconds.remainder(dividingBy: 1000)))
  }

  func decode(_ string: String) throws -> Date {
    let date = try Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(string)
    // Whole milliseconds, computed as the encoder's are, so equal times compare equal.
    return Date(timeIntervalSince1970: (date.timeIntervalSince1970 * 1000).rounded() / 1000)
  }
}

extension Int64 {
  /// Division rounding down, for times before 1970.
  fileprivate func quotient(dividingBy divisor: Int64) -> Int64 {
    (self - remainder(dividingBy: divisor)) / divisor
  }

  /// The remainder of rounding-down division: from 0 to `divisor - 1`.
  fileprivate func remainder(dividingBy divisor: Int64) -> Int64 {
    ((self % divisor) + divisor) % divisor
  }
}

/// Sets one header field of every request: the bearer token the document's `security` asks
/// for, or another media type, to provoke 415.
struct SetHeader: ClientMiddleware {
  let name: HTTPField.Name
  let value: String

  func intercept(
    _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
    next: @Sendable (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
  ) async throws -> (HTTPResponse, HTTPBody?) {
    var request = request
    request.headerFields[name] = value
    return try await next(request, body, baseURL)
  }
}

/// Sends the first bytes of the body, then nothing for longer than the server waits.
struct StallingBody: ClientMiddleware {
  func intercept(
    _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
    next: @Sendable (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
  ) async throws -> (HTTPResponse, HTTPBody?) {
    let (stream, continuation) = AsyncStream<HTTPBody.ByteChunk>.makeStream()
    continuation.yield(ArraySlice(#"{"cursor":0,"#.utf8))
    let end = Task {
      // Stalls until the answer is in (the sleep is then cancelled), however long a loaded
      // machine makes the server take to give up on the body; but not forever: a server that
      // never gives up gets the rest of a malformed body and answers 400, and the test fails.
      try? await Task.sleep(for: .seconds(300))
      continuation.finish()
    }
    defer { end.cancel() }
    return try await next(request, HTTPBody(stream, length: .unknown), baseURL)
  }
}

/// Keeps the body of every sync request the client sends, to show what went on the wire.
final class SentBodies: ClientMiddleware, Sendable {
  private let bodies = Mutex<[[UInt8]]>([])

  func intercept(
    _ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
    next: @Sendable (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)
  ) async throws -> (HTTPResponse, HTTPBody?) {
    guard operationID == "sync", let body else { return try await next(request, body, baseURL) }
    let bytes = try await [UInt8](collecting: body, upTo: 1 << 20)
    bodies.withLock { $0.append(bytes) }
    return try await next(request, HTTPBody(bytes), baseURL)
  }

  /// Every time (a string that starts like one) in the sync bodies sent so far.
  func times() throws -> [String] {
    let pattern = try Regex(#""(\d{4}-\d{2}-\d{2}T[^"]*)""#)
    return bodies.withLock { bodies in
      bodies.flatMap { body in
        String(decoding: body, as: UTF8.self).matches(of: pattern).compactMap {
          $0.output[1].substring.map(String.init)
        }
      }
    }
  }
}
