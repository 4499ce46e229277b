internal import Foundation
public import VLogWire

/// Why an API call failed.
public struct APIError: Error, Sendable, Hashable, CustomStringConvertible {
  /// The kind of failure, as a value to match on.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    private let name: String
    private init(_ name: String) { self.name = name }
    /// No response arrived: connection refused, timeout, a dropped message.
    public static let transport = Code("transport")
    /// The server answered with an error status; ``APIError/body`` says why.
    public static let server = Code("server")
    /// The server's answer could not be read.
    public static let invalidResponse = Code("invalidResponse")
    /// The request could not be encoded.
    public static let invalidRequest = Code("invalidRequest")
    /// The account has no token the server accepts and no password to sign in with: the user
    /// must sign in (``SyncAccount/signIn(password:)``).
    public static let signedOut = Code("signedOut")
    /// A new password for an end-to-end encrypted account is too short or too easy to guess
    /// (`PasswordStrength`): refused on the device, before anything is sent.
    public static let weakPassword = Code("weakPassword")
    /// The name, for messages.
    public var description: String { name }
  }

  /// The kind of failure.
  public let code: Code
  /// What went wrong, for people.
  public let message: String
  /// The HTTP status, when a response arrived.
  public let status: Int?
  /// The server's error body, for ``Code/server``.
  public let body: ErrorBody?
  /// How long the server asked the client to wait before trying again (its `Retry-After`
  /// header, in seconds), when it said.
  public let retryAfter: Duration?

  /// Creates an error.
  public init(
    _ code: Code, _ message: String, status: Int? = nil, body: ErrorBody? = nil,
    retryAfter: Duration? = nil
  ) {
    self.code = code
    self.message = message
    self.status = status
    self.body = body
    self.retryAfter = retryAfter
  }

  /// Whether trying the same call again later can succeed without anything else changing: no
  /// answer arrived, or the server was overloaded, unavailable or failed (408, 429, 5xx). A
  /// refused request or credentials (other 4xx) fail the same way until something changes.
  public var isTransient: Bool {
    switch code {
    case .transport: return true
    case .server:
      guard let status else { return false }
      return status == 408 || status == 429 || status >= 500
    default: return false
    }
  }

  /// Whether the server refused the token (expired, revoked or unknown).
  public var isUnauthorized: Bool {
    status == 401 && body?.code.refusesToken == true
  }

  /// The message, with the status when there is one.
  public var description: String {
    if let status { return "\(message) (HTTP \(status))" }
    return message
  }
}
