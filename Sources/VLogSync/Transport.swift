public import AsyncHTTPClient
internal import NIOCore
internal import NIOHTTP1
internal import VLog

#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Darwin)
  internal import Darwin
#endif

/// One HTTP request as the API layer builds it: method, path under the server's base URL,
/// headers and body.
public struct TransportRequest: Sendable, Hashable {
  /// `GET`, `POST`, `PUT` or `DELETE`.
  public var method: String
  /// The path, for example `/v1/sync`.
  public var path: String
  /// Header fields, by lowercase name.
  public var headers: [String: String]
  /// The body.
  public var body: [UInt8]

  /// Creates a request.
  public init(method: String, path: String, headers: [String: String] = [:], body: [UInt8] = []) {
    self.method = method
    self.path = path
    self.headers = headers
    self.body = body
  }
}

/// One HTTP response: status, headers and the whole body.
public struct TransportResponse: Sendable, Hashable {
  /// The HTTP status code.
  public var status: Int
  /// Header fields, by lowercase name.
  public var headers: [String: String]
  /// The body.
  public var body: [UInt8]

  /// Creates a response.
  public init(status: Int, headers: [String: String] = [:], body: [UInt8] = []) {
    self.status = status
    self.headers = headers
    self.body = body
  }
}

/// Carries requests to a sync server and brings back its responses.
///
/// ``HTTPTransport`` speaks HTTP; `VLogServerTesting`'s `InProcessTransport` calls a server in the same
/// process without sockets; tests wrap either to drop, duplicate or delay messages.
public protocol Transport: Sendable {
  /// The server the transport reaches, as a store's account binding names it: its base URL,
  /// or for a transport without one, a name that tells servers apart. A store belongs to the
  /// first server and account it signs in to (`AccountBinding`); a wrapper returns what it
  /// wraps.
  var server: String { get }

  /// Sends one request and returns the server's response, whatever its status.
  ///
  /// - Throws: When no response arrives (connection refused, timeout, dropped).
  func send(_ request: TransportRequest) async throws -> TransportResponse

  /// Sends a request whose answer goes on arriving — the live channel, `GET /v1/live` — and
  /// returns its status and headers as soon as they come. A 2xx answer's body then arrives in
  /// ``TransportStream/chunks`` until the server ends it, the connection fails, or the
  /// consumer stops iterating (which closes the connection); any other answer's body is
  /// read whole into ``TransportStream/response``.
  ///
  /// The default implementation throws: a transport that cannot hold an answer open (one that
  /// only ever returns whole answers) has no live channel, and an automatic sync then polls.
  ///
  /// - Throws: When no answer arrives, or the transport cannot stream.
  func open(_ request: TransportRequest) async throws -> TransportStream
}

extension Transport {
  /// Throws: this transport has no streamed answers.
  public func open(_ request: TransportRequest) async throws -> TransportStream {
    throw TransportError(message: "\(server) cannot be reached with a streamed answer")
  }
}

/// An answer whose body goes on arriving: its status and headers, then the body's bytes as they
/// come.
public struct TransportStream: Sendable {
  /// The status and headers; for an answer other than 2xx, its whole body too.
  public var response: TransportResponse
  /// A 2xx answer's body as it arrives; finished at once for any other answer.
  public var chunks: AsyncThrowingStream<[UInt8], any Error>

  /// Creates a streamed answer.
  public init(response: TransportResponse, chunks: AsyncThrowingStream<[UInt8], any Error>) {
    self.response = response
    self.chunks = chunks
  }
}

/// The live transport: HTTP/1.1 through AsyncHTTPClient.
public struct HTTPTransport: Transport {
  /// The server's base URL, for example `http://127.0.0.1:8080`.
  public let baseURL: String
  /// The client that sends the requests.
  public let client: HTTPClient
  /// How long a request may take.
  public let timeout: Duration
  /// The largest response body accepted, in bytes.
  public let maximumResponseBytes: Int

  /// The client transports use unless given another: AsyncHTTPClient's shared event loops,
  /// with a connection that cannot be made failing the request at once (a device's sync is
  /// retried by its scheduler, and `vlog sync` should not wait 30 seconds to say the server is
  /// down) and a 10-second connect timeout. It lives as long as the process.
  public static let defaultClient: HTTPClient = {
    var configuration = HTTPClient.Configuration()
    configuration.connectionPool.retryConnectionEstablishment = false
    configuration.timeout.connect = .seconds(10)
    return HTTPClient(
      eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
  }()

  /// Creates a transport to `baseURL` (a trailing `/` is ignored).
  public init(
    baseURL: String, client: HTTPClient = HTTPTransport.defaultClient,
    timeout: Duration = .seconds(30),
    maximumResponseBytes: Int = 256 << 20
  ) {
    self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
    self.client = client
    self.timeout = timeout
    self.maximumResponseBytes = maximumResponseBytes
  }

  /// The base URL.
  public var server: String { baseURL }

  /// Sends the request over HTTP.
  public func send(_ request: TransportRequest) async throws -> TransportResponse {
    var outgoing = HTTPClientRequest(url: baseURL + request.path)
    outgoing.method = HTTPMethod(rawValue: request.method)
    for (name, value) in request.headers { outgoing.headers.add(name: name, value: value) }
    if !request.body.isEmpty || request.method == "POST" || request.method == "PUT" {
      outgoing.body = .bytes(ByteBuffer(bytes: request.body))
    }
    let response: HTTPClientResponse
    let body: ByteBuffer
    do {
      response = try await client.execute(
        outgoing, timeout: .milliseconds(Int64(clamping: Milliseconds(timeout).rawValue)))
      body = try await response.body.collect(upTo: maximumResponseBytes)
    } catch {
      throw TransportError(error, baseURL: baseURL, timeout: timeout)
    }
    return TransportResponse(
      status: Int(response.status.code), headers: Self.headers(of: response),
      body: Array(body.readableBytesView))
  }

  /// Sends the request over HTTP with no deadline (the answer lasts as long as the server or
  /// the consumer keeps it), and streams a 2xx answer's body.
  public func open(_ request: TransportRequest) async throws -> TransportStream {
    var outgoing = HTTPClientRequest(url: baseURL + request.path)
    outgoing.method = HTTPMethod(rawValue: request.method)
    for (name, value) in request.headers { outgoing.headers.add(name: name, value: value) }
    let response: HTTPClientResponse
    do {
      response = try await client.execute(outgoing, deadline: .distantFuture)
    } catch {
      throw TransportError(error, baseURL: baseURL, timeout: timeout)
    }
    var head = TransportResponse(
      status: Int(response.status.code), headers: Self.headers(of: response))
    guard (200..<300).contains(head.status) else {
      do {
        head.body = Array(try await response.body.collect(upTo: 1 << 20).readableBytesView)
      } catch {
        throw TransportError(error, baseURL: baseURL, timeout: timeout)
      }
      return TransportStream(response: head, chunks: AsyncThrowingStream { $0.finish() })
    }
    let body = response.body
    let (chunks, continuation) = AsyncThrowingStream<[UInt8], any Error>.makeStream()
    let reader = Task { [baseURL, timeout] in
      do {
        for try await buffer in body { continuation.yield(Array(buffer.readableBytesView)) }
        continuation.finish()
      } catch {
        continuation.finish(throwing: TransportError(error, baseURL: baseURL, timeout: timeout))
      }
    }
    // The consumer stopped: cancelling the reader drops the body, and the request with it.
    continuation.onTermination = { _ in reader.cancel() }
    return TransportStream(response: head, chunks: chunks)
  }

  private static func headers(of response: HTTPClientResponse) -> [String: String] {
    var headers: [String: String] = [:]
    for header in response.headers { headers[header.name.lowercased()] = header.value }
    return headers
  }
}

/// Why a request got no answer, in words: `cannot reach http://127.0.0.1:1: connection refused`.
public struct TransportError: Error, Sendable, CustomStringConvertible {
  /// What happened.
  public let message: String

  /// An error with this message.
  public init(message: String) { self.message = message }

  /// Describes an error of the HTTP client, naming the server.
  init(_ error: any Error, baseURL: String, timeout: Duration) {
    if let error = error as? IOError {
      message =
        "cannot reach \(baseURL): " + String(cString: strerror(error.errnoCode)).lowercased()
    } else if let error = error as? HTTPClientError, error == .deadlineExceeded {
      message = "\(baseURL) did not answer within \(timeout.components.seconds) s"
    } else if let error = error as? HTTPClientError, error == .connectTimeout {
      message = "cannot reach \(baseURL): the connection timed out"
    } else {
      message = "\(baseURL): \(error)"
    }
  }

  /// The message.
  public var description: String { message }
}
