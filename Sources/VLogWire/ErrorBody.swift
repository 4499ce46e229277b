/// The stable code of an error response: what a client matches on, shared by the server that
/// answers it and the client that reads it.
///
/// Codes are strings on the wire. A client keeps a code it does not know (from a newer server)
/// as it is, so matching never fails to decode.
public struct ErrorCode: RawRepresentable, Codable, Hashable, Sendable, CustomStringConvertible {
  /// The code as it travels.
  public let rawValue: String

  /// Wraps a code.
  public init(rawValue: String) { self.rawValue = rawValue }

  /// Decodes the string.
  public init(from decoder: any Decoder) throws {
    rawValue = try decoder.singleValueContainer().decode(String.self)
  }

  /// Encodes the string.
  public func encode(to encoder: any Encoder) throws {
    var container = encoder.singleValueContainer()
    try container.encode(rawValue)
  }

  /// The code.
  public var description: String { rawValue }

  /// 400: malformed JSON or binary, or a bad value; ``ErrorBody/field`` names it.
  public static let invalidField = ErrorCode(rawValue: "invalidField")
  /// 400: a sync cursor past the end of the account's log.
  public static let invalidCursor = ErrorCode(rawValue: "invalidCursor")
  /// 400: an event stamped too far ahead of the server's clock; ``ErrorBody/serverTime`` says
  /// the server's time.
  public static let clockSkew = ErrorCode(rawValue: "clockSkew")
  /// 400: uploaded bytes whose SHA-256 is not the one named.
  public static let blobMismatch = ErrorCode(rawValue: "blobMismatch")
  /// 401: an unknown user name or a wrong password (the two are not told apart).
  public static let invalidCredentials = ErrorCode(rawValue: "invalidCredentials")
  /// 401: no token, or an unknown or revoked one.
  public static let unauthorized = ErrorCode(rawValue: "unauthorized")
  /// 401: the token has expired; sign in again.
  public static let tokenExpired = ErrorCode(rawValue: "tokenExpired")
  /// 403: a write to an end-to-end encrypted account's log or keys without the signature of
  /// its devices (``RequestSignature``), or with a wrong one: made with a token alone.
  public static let unsignedWrite = ErrorCode(rawValue: "unsignedWrite")
  /// 404: the account has no blob of that hash.
  public static let blobNotFound = ErrorCode(rawValue: "blobNotFound")
  /// 404: no such endpoint.
  public static let notFound = ErrorCode(rawValue: "notFound")
  /// 405: the path exists but not with this method; the `Allow` header lists those it has.
  public static let methodNotAllowed = ErrorCode(rawValue: "methodNotAllowed")
  /// 409: the user name is taken.
  public static let accountExists = ErrorCode(rawValue: "accountExists")
  /// 409: an encrypted account's keys changed since the device read them (another epoch, or
  /// keys a rotation does not cover): read them again and retry.
  public static let keysChanged = ErrorCode(rawValue: "keysChanged")
  /// 409: pushed events under ids the account's log holds with other changes
  /// (``ErrorBody/events`` lists them): another device shares the pushing device's replica id,
  /// as a copied or restored store does. The device stamps its unacknowledged changes under a
  /// new replica id and pushes them again.
  public static let eventCollision = ErrorCode(rawValue: "eventCollision")
  /// 413: the body is larger than the server accepts.
  public static let bodyTooLarge = ErrorCode(rawValue: "bodyTooLarge")
  /// 429: too many password checks at once, or too many failed sign-ins for one user name;
  /// the `Retry-After` header says how many seconds to wait.
  public static let tooManyRequests = ErrorCode(rawValue: "tooManyRequests")
  /// 415: a sync body in neither JSON nor the binary encoding.
  public static let unsupportedMediaType = ErrorCode(rawValue: "unsupportedMediaType")
  /// 408: the body did not arrive in time (see the server's `bodyTimeout`).
  public static let requestTimeout = ErrorCode(rawValue: "requestTimeout")
  /// Another HTTP error of the server's framework, with its status.
  public static let httpError = ErrorCode(rawValue: "httpError")
  /// 503: the server's database cannot be reached now; the `Retry-After` header says when to
  /// try again (this server or another).
  public static let unavailable = ErrorCode(rawValue: "unavailable")
  /// 500: the server's storage failed.
  public static let storage = ErrorCode(rawValue: "storage")
  /// 500: the server failed; the details are in its log.
  public static let `internal` = ErrorCode(rawValue: "internal")

  /// Whether the code says the token is no good: expired, revoked or unknown.
  public var refusesToken: Bool { self == .tokenExpired || self == .unauthorized }
}

/// The body of every error response: a stable `code` to match on, a `message` for people, and
/// the `field` at fault when one is.
public struct ErrorBody: Codable, Sendable, Hashable, CustomStringConvertible {
  /// A stable code, for example ``ErrorCode/invalidField``, ``ErrorCode/clockSkew``.
  public var code: ErrorCode
  /// What went wrong and how to fix it.
  public var message: String
  /// The path of the field at fault, for example `events[3].note`.
  public var field: String?
  /// The server's clock, ISO 8601 with milliseconds, on errors about time (`clockSkew`).
  public var serverTime: String?
  /// The ids of the events at fault, 48 hexadecimal digits each, on `eventCollision`: at most
  /// 100, in the order pushed.
  public var events: [String]?

  /// Creates an error body.
  public init(
    code: ErrorCode, message: String, field: String? = nil, serverTime: String? = nil,
    events: [String]? = nil
  ) {
    self.code = code
    self.message = message
    self.field = field
    self.serverTime = serverTime
    self.events = events
  }

  /// The error body for a wire object that cannot be accepted.
  public init(_ error: WireError) {
    self.init(code: .invalidField, message: error.description, field: error.path)
  }

  /// `code: message`.
  public var description: String { "\(code): \(message)" }
}
