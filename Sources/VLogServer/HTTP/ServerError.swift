internal import Foundation
public import Hummingbird
internal import VLog
public import VLogWire

/// An error the server answers with: an HTTP status and an `ErrorBody` rendered as JSON.
///
/// Every failure a client can cause maps to one of these; anything else is logged and answered
/// with a 500 that reveals nothing of the server's internals.
public struct ServerError: HTTPResponseError, CustomStringConvertible {
  /// The HTTP status.
  public let status: HTTPResponse.Status
  /// The JSON body.
  public let body: ErrorBody

  /// Creates an error.
  public init(_ status: HTTPResponse.Status, _ body: ErrorBody) {
    self.status = status
    self.body = body
  }

  /// `status code: message`.
  public var description: String { "\(status.code) \(body)" }

  /// Renders the error as a JSON response.
  public func response(from request: Request, context: some RequestContext) throws -> Response {
    response()
  }

  /// Headers the answer carries besides its content type, such as `Allow` on a 405.
  var headers = HTTPFields()

  func response() -> Response {
    var headers = self.headers
    headers[.contentType] = "application/json"
    if status == .unauthorized { headers[.wwwAuthenticate] = "Bearer" }
    // Sorted keys: the same error is the same bytes, so answers cannot be told apart by order.
    let encoder = JSONEncoder()
    encoder.outputFormatting = .sortedKeys
    // A code and three optional strings always encode, so this cannot fail; an empty body
    // would be the fallback anyway.
    let data = (try? encoder.encode(body)) ?? Data()
    return Response(
      status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
  }

  static func invalid(_ error: WireError) -> ServerError {
    ServerError(.badRequest, ErrorBody(error))
  }

  static func accountExists(_ name: String) -> ServerError {
    ServerError(
      .conflict,
      ErrorBody(
        code: .accountExists, message: "the user name '\(name)' is taken; choose another",
        field: "username"))
  }

  static let invalidCredentials = ServerError(
    .unauthorized,
    ErrorBody(code: .invalidCredentials, message: "the user name or the password is wrong"))

  static let wrongRecoveryKey = ServerError(
    .unauthorized,
    ErrorBody(code: .invalidCredentials, message: "the user name or the recovery key is wrong"))

  static let wrongPassword = ServerError(
    .forbidden,
    ErrorBody(
      code: .invalidCredentials, message: "the password is wrong; nothing was changed",
      field: "password"))

  static func sessionNotFound(_ id: String) -> ServerError {
    ServerError(
      .notFound,
      ErrorBody(code: .notFound, message: "this account has no session \(id)", field: "id"))
  }

  static let notEncrypted = ServerError(
    .notFound,
    ErrorBody(
      code: .notFound,
      message: "this account is not end-to-end encrypted: it has no keys on the server"))

  static let unauthorized = ServerError(
    .unauthorized,
    ErrorBody(
      code: .unauthorized,
      message: "this call needs 'Authorization: Bearer <token>' with a token from POST /v1/sessions"
    ))

  static let unsignedWrite = ServerError(
    .forbidden,
    ErrorBody(
      code: .unsignedWrite,
      message:
        "this end-to-end encrypted account takes writes to its log and keys only signed by its "
        + "devices (the 'VLog-Signature' header); the signature is missing or wrong, and nothing "
        + "was stored",
      field: RequestSignature.headerName))

  static let tokenExpired = ServerError(
    .unauthorized,
    ErrorBody(code: .tokenExpired, message: "the token has expired; sign in again"))

  static func invalidCursor(_ cursor: UInt64, _ last: UInt64) -> ServerError {
    ServerError(
      .badRequest,
      ErrorBody(
        code: .invalidCursor,
        message:
          "cursor \(cursor) is past the end of this account's log (\(last) events); send 0 or a "
          + "cursor this server returned",
        field: "cursor"))
  }

  /// The most ids an `eventCollision` answer lists.
  static let maximumCollisionsListed = 100

  static func eventCollision(_ ids: [Stamp]) -> ServerError {
    let first = ids.first.map { " (the first: \($0.hex))" } ?? ""
    var body = ErrorBody(
      code: .eventCollision,
      message:
        "\(ids.count) pushed events have ids this account's log holds with other changes\(first): "
        + "another device shares this one's replica id (a copied or restored store); "
        + "stamp these changes under a new replica id and push them again",
      field: "events")
    body.events = ids.prefix(maximumCollisionsListed).map(\.hex)
    return ServerError(.conflict, body)
  }

  static func clockSkew(field: String, eventTime: Int64, serverTime: Int64, bound: Int64)
    -> ServerError
  {
    ServerError(
      .badRequest,
      ErrorBody(
        code: .clockSkew,
        message:
          "the event is stamped \(ISO8601.format(milliseconds: eventTime)), "
          + "\(formatDuration(milliseconds: eventTime - serverTime)) ahead of the server's clock "
          + "(\(ISO8601.format(milliseconds: serverTime))); events more than "
          + "\(formatDuration(milliseconds: bound)) ahead are refused: check this device's clock",
        field: field, serverTime: ISO8601.format(milliseconds: serverTime)))
  }

  static func blobMismatch(expected: BlobHash, actual: [UInt8]) -> ServerError {
    ServerError(
      .badRequest,
      ErrorBody(
        code: .blobMismatch,
        message:
          "the body's SHA-256 is \(BlobHash(bytes: actual).map(String.init(describing:)) ?? "?"), "
          + "not \(expected); nothing was stored",
        field: "hash"))
  }

  static func blobNotFound(_ hash: BlobHash) -> ServerError {
    ServerError(
      .notFound,
      ErrorBody(code: .blobNotFound, message: "this account has no blob \(hash)", field: "hash"))
  }

  static func bodyTooLarge(_ limit: Int) -> ServerError {
    ServerError(
      .contentTooLarge,
      ErrorBody(code: .bodyTooLarge, message: "the body is larger than \(limit) bytes"))
  }

  static func requestTimeout(_ limit: Duration) -> ServerError {
    var error = ServerError(
      .requestTimeout,
      ErrorBody(
        code: .requestTimeout,
        message:
          "the body did not arrive within \(limit.formatted(.units(allowed: [.seconds, .milliseconds])))"
      ))
    // The rest of the body may still be on its way: the connection cannot be reused.
    error.headers[.connection] = "close"
    return error
  }

  static func unsupportedMediaType(_ type: String?) -> ServerError {
    ServerError(
      .unsupportedMediaType,
      ErrorBody(
        code: .unsupportedMediaType,
        message:
          "the body's Content-Type is \(type.map { "'\($0)'" } ?? "missing"); send "
          + SyncEncoding.allCases.map { "'\($0.mediaType)'" }.joined(separator: " or ")))
  }

  static func methodNotAllowed(_ method: HTTPRequest.Method, allowed: [HTTPRequest.Method])
    -> ServerError
  {
    let names = allowed.map(\.rawValue).joined(separator: ", ")
    var error = ServerError(
      .methodNotAllowed,
      ErrorBody(
        code: .methodNotAllowed, message: "\(method.rawValue) is not allowed here; use \(names)"))
    error.headers[.allow] = names
    return error
  }

  static func tooManyRequests(retryAfter seconds: Int, _ message: String) -> ServerError {
    var error = ServerError(
      .tooManyRequests, ErrorBody(code: .tooManyRequests, message: message))
    error.headers[.retryAfter] = String(seconds)
    return error
  }

  static func malformedRequest(_ error: any Error) -> ServerError {
    ServerError(
      .badRequest,
      ErrorBody(code: .httpError, message: "the request is not valid HTTP or ended early: \(error)")
    )
  }

  /// 503 with `Retry-After` (1 second unless told): the database cannot be reached now, or
  /// the server holds as many live channels as it can.
  static func unavailable(_ message: String, retryAfter seconds: Int = 1) -> ServerError {
    var error = ServerError(
      .serviceUnavailable,
      ErrorBody(code: .unavailable, message: message + "; try again in a moment"))
    error.headers[.retryAfter] = String(seconds)
    return error
  }

  /// The answer to a storage failure: what the client caused or can wait out says so (409,
  /// 401, 400, 503); what it cannot act on is a 500 that names the request's id and nothing
  /// of the storage, whose message goes to the log.
  init(_ error: StorageError, requestID: String) {
    switch error.code {
    case .accountExists:
      self = .accountExists(error.name ?? "")
    case .accountDeleted:
      self = .unauthorized
    case .invalidCursor:
      self = .invalidCursor(error.cursor?.given ?? 0, error.cursor?.last ?? 0)
    case .eventCollision:
      self = .eventCollision(error.collisions)
    case .keysChanged:
      self = ServerError(
        .conflict,
        ErrorBody(
          code: .keysChanged,
          message: error.message
            + "; read the account's keys again (GET /v1/accounts/current/keys) and retry",
          field: "epoch"))
    case .unavailable:
      self = .unavailable(
        "the server's storage cannot serve requests now (its database cannot be reached, or its "
          + "disk is full)")
    default:
      self = ServerError(
        .internalServerError,
        ErrorBody(
          code: .storage,
          message: "the server's storage failed; its log has the error under request id "
            + requestID))
    }
  }

  /// The answer to any other failure: a 500 that names the request's id and nothing else.
  static func internalError(requestID: String) -> ServerError {
    ServerError(
      .internalServerError,
      ErrorBody(
        code: .`internal`,
        message: "the server failed; its log has the error under request id \(requestID)"))
  }

  /// The error for one of Hummingbird's own `HTTPError`s (unknown route, oversized body, …).
  static func http(_ error: HTTPError) -> ServerError {
    switch error.status {
    case .notFound:
      ServerError(.notFound, ErrorBody(code: .notFound, message: "no such endpoint"))
    case .contentTooLarge:
      ServerError(
        .contentTooLarge,
        ErrorBody(code: .bodyTooLarge, message: error.body ?? "the body is too large"))
    default:
      ServerError(
        error.status,
        ErrorBody(code: .httpError, message: error.body ?? error.status.reasonPhrase))
    }
  }
}
