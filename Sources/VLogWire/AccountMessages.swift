public import Foundation
internal import VLog

/// The body of `POST /v1/accounts` and `POST /v1/sessions`: a user name and a password.
///
/// User names are 1 to 64 characters of `A-Z`, `a-z`, `0-9`, `.`, `_`, `-`, `@` and `+`,
/// compared without case; passwords are 8 to 1024 characters (Unicode scalars, as JSON Schema
/// counts them). The password never appears in ``description``.
public struct Credentials: Codable, Sendable, Hashable, CustomStringConvertible {
  /// The account's user name.
  public var username: String
  /// The account's password.
  public var password: String

  /// The allowed lengths of a password, in Unicode scalars.
  public static let passwordLengths = 8...1024

  enum CodingKeys: String, CodingKey { case username, password }

  /// Creates credentials.
  public init(username: String, password: String) {
    self.username = username
    self.password = password
  }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: ["username", "password"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    username = try container.decode(String.self, forKey: .username)
    password = try container.decode(String.self, forKey: .password)
  }

  /// The user name in the form accounts are stored under: lowercased.
  public var normalizedUsername: String {
    username.lowercased()
  }

  /// Checks the user name and, when `checkingPassword`, the password's length.
  ///
  /// - Throws: ``WireError`` naming `username` or `password`.
  public func validated(checkingPassword: Bool) throws(WireError) -> Credentials {
    let allowed = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-@+".utf8)
    guard (1...64).contains(username.utf8.count), username.utf8.allSatisfy(allowed.contains)
    else {
      throw WireError(
        "username",
        "a user name is 1 to 64 characters of A-Z, a-z, 0-9, '.', '_', '-', '@' and '+'")
    }
    if checkingPassword, !Self.passwordLengths.contains(password.unicodeScalars.count) {
      throw WireError("password", "a password is 8 to 1024 characters long")
    }
    return Credentials(username: normalizedUsername, password: password)
  }

  /// The user name; the password is not shown.
  public var description: String { "\(username) (password hidden)" }
}

/// The answer to `POST /v1/accounts`.
public struct AccountBody: Codable, Sendable, Hashable {
  /// The user name the account was created under, normalised.
  public var username: String

  /// Creates the body.
  public init(username: String) { self.username = username }

  enum CodingKeys: String, CodingKey { case username }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: ["username"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    username = try container.decode(String.self, forKey: .username)
  }
}

/// The answer to `POST /v1/sessions`: a bearer token and when it expires.
public struct SessionBody: Codable, Sendable, Hashable {
  /// The bearer token to send as `Authorization: Bearer <token>`.
  public var token: String
  /// When the token stops working, ISO 8601 with milliseconds.
  public var expiresAt: String

  /// Creates the body.
  public init(token: String, expiresAt: Date) {
    self.token = token
    self.expiresAt = ISO8601.format(milliseconds: expiresAt.milliseconds)
  }

  enum CodingKeys: String, CodingKey { case token, expiresAt }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: ["token", "expiresAt"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    token = try container.decode(String.self, forKey: .token)
    expiresAt = try container.decode(String.self, forKey: .expiresAt)
  }
}
