internal import Foundation
internal import HTTPTypes
internal import Hummingbird
internal import NIOCore
internal import VLog
internal import VLogWire

/// How every controller reads a request's body: bounded by size, and by time (the connection
/// guard's body timeout), decoded with errors that name the field at fault.
struct RequestReader: Sendable {
  /// The most bytes of a JSON body.
  let maximumBodyBytes: Int
  /// How long a body may take to arrive, for the 408's message.
  let bodyTimeout: Duration

  /// The request's body, at most `limit` bytes, arriving within the body timeout.
  ///
  /// A body announced larger than the limit is refused before any of it is read; one that
  /// trickles in too slowly is answered 408 and its connection closed, so no client holds a
  /// connection and a buffer by sending a byte now and then.
  func collect(_ request: Request, upTo limit: Int) async throws -> [UInt8] {
    if let announced = request.headers[.contentLength].flatMap({ Int($0) }), announced > limit {
      throw ServerError.bodyTooLarge(limit)
    }
    // The body's deadline is the connection guard's: past it, reading fails with
    // `BodyTimedOut`.
    var request = request
    let buffer: ByteBuffer
    do {
      buffer = try await request.collectBody(upTo: limit)
    } catch is NIOTooManyBytesError {
      throw ServerError.bodyTooLarge(limit)
    } catch is BodyTimedOut {
      throw ServerError.requestTimeout(bodyTimeout)
    }
    return Array(buffer.readableBytesView)
  }

  /// The request's JSON body, at most ``maximumBodyBytes``, decoded.
  ///
  /// - Throws: ``ServerError`` 400 naming the field at fault.
  func decode<T: Decodable>(_ type: T.Type, from request: Request) async throws -> T {
    try decode(type, from: try await collect(request, upTo: maximumBodyBytes))
  }

  /// `bytes`, a JSON body, decoded.
  ///
  /// - Throws: ``ServerError`` 400 naming the field at fault.
  func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws(ServerError) -> T {
    do throws(WireError) {
      return try WireJSON.decode(type, from: bytes)
    } catch {
      throw ServerError.invalid(error)
    }
  }
}

extension ServerController {
  /// Runs a check of a decoded body, answering 400 naming the field it finds at fault.
  func checked<T>(_ check: () throws(WireError) -> T) throws(ServerError) -> T {
    do { return try check() } catch { throw ServerError.invalid(error) }
  }

  /// `value` as a JSON answer.
  func json(_ value: some Encodable, status: HTTPResponse.Status) throws -> Response {
    var headers = HTTPFields()
    headers[.contentType] = "application/json"
    return Response(
      status: status, headers: headers,
      body: .init(byteBuffer: ByteBuffer(bytes: try JSONEncoder().encode(value))))
  }

  /// The protocol version a request's client reads (its `VLog-Protocol` header).
  func wireProtocol(of request: Request) throws -> WireProtocol {
    try checked { () throws(WireError) in
      try WireProtocol(header: request.headers[.wireProtocol])
    }
  }

  /// A query parameter that must be a whole number, if present.
  func number(_ name: String, of request: Request) throws(ServerError) -> UInt64? {
    guard let text = request.uri.queryParameters[name[...]] else { return nil }
    guard let value = UInt64(text) else {
      throw ServerError.invalid(WireError(name, "'\(text)' is not a whole number"))
    }
    return value
  }
}

/// Who a request is from: the session of its bearer token.
struct Authenticator: Sendable {
  let sessions: any SessionStorage
  let now: @Sendable () -> Date

  /// The account of the request's bearer token, and the token's hash.
  func authenticate(_ request: Request) async throws -> (account: UInt64, tokenHash: [UInt8]) {
    let session = try await session(of: request)
    return (session.account, session.hash)
  }

  /// The stored token of the request's bearer token, unexpired.
  ///
  /// - Throws: ``ServerError`` `unauthorized` without one or for an unknown one,
  ///   `tokenExpired` for an expired one.
  func session(of request: Request) async throws -> TokenRecord {
    guard let header = request.headers[.authorization], let token = Self.bearerToken(header)
    else {
      throw ServerError.unauthorized
    }
    guard let session = try await sessions.token(hash: sha256(Array(token.utf8))) else {
      throw ServerError.unauthorized
    }
    guard session.expiresAt > now().milliseconds else {
      throw ServerError.tokenExpired
    }
    return session
  }

  /// The token of an `Authorization` header's `Bearer` credentials: the scheme in any case
  /// (RFC 9110 §11.1), then one or more spaces; nil for another scheme or no token.
  static func bearerToken(_ header: String) -> Substring? {
    guard let space = header.firstIndex(of: " "),
      header[..<space].lowercased() == "bearer"
    else { return nil }
    let token = header[space...].drop(while: { $0 == " " })
    return token.isEmpty ? nil : token
  }
}
