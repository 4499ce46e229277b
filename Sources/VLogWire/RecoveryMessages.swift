internal import Foundation

/// The body of `POST /v1/accounts/recovery-keys`: an encrypted account's user name and its
/// recovery key's sign-in secret, which the server checks before it answers with the account's
/// sealed keys — for a device that lost the password to open them with the recovery key.
public struct RecoveryCredentials: Codable, Sendable, Hashable, CustomStringConvertible {
  /// The user name.
  public var username: String
  /// The recovery key's sign-in secret (``NewAccountKeys/recoverySecret``).
  public var recoverySecret: String

  /// Creates the body.
  public init(username: String, recoverySecret: String) {
    self.username = username
    self.recoverySecret = recoverySecret
  }

  enum CodingKeys: String, CodingKey { case username, recoverySecret }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: ["username", "recoverySecret"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    username = try container.decode(String.self, forKey: .username)
    recoverySecret = try container.decode(String.self, forKey: .recoverySecret)
  }

  /// The user name normalised and checked, and the secret's length.
  ///
  /// - Throws: ``WireError`` naming `username` or `recoverySecret`.
  public func validated() throws(WireError) -> RecoveryCredentials {
    let checked = try Credentials(username: username, password: recoverySecret).validated(
      checkingPassword: false)
    guard Credentials.passwordLengths.contains(recoverySecret.unicodeScalars.count) else {
      throw WireError("recoverySecret", "a recovery secret is 8 to 1024 characters long")
    }
    return RecoveryCredentials(username: checked.username, recoverySecret: recoverySecret)
  }

  /// The user name; the secret is not shown.
  public var description: String { "\(username) (recovery secret hidden)" }
}

/// The body of `POST /v1/accounts/recover`: an encrypted account recovered with its recovery
/// key — a new password (its sign-in secret), and the account's keys sealed to it. Every session
/// of the account is signed out.
public struct AccountRecovery: Codable, Sendable, Hashable, CustomStringConvertible {
  /// The user name and the recovery key's sign-in secret.
  public var credentials: RecoveryCredentials
  /// The new password's sign-in secret, 8 to 1024 characters.
  public var newPassword: String
  /// The account's keys sealed to the new password.
  public var keys: PasswordSeal

  /// Creates the body.
  public init(credentials: RecoveryCredentials, newPassword: String, keys: PasswordSeal) {
    self.credentials = credentials
    self.newPassword = newPassword
    self.keys = keys
  }

  enum CodingKeys: String, CodingKey { case username, recoverySecret, newPassword, keys }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(
      in: decoder, allowed: ["username", "recoverySecret", "newPassword", "keys"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    credentials = RecoveryCredentials(
      username: try container.decode(String.self, forKey: .username),
      recoverySecret: try container.decode(String.self, forKey: .recoverySecret))
    newPassword = try container.decode(String.self, forKey: .newPassword)
    keys = try container.decode(PasswordSeal.self, forKey: .keys)
  }

  /// Encodes the body's fields flat.
  public func encode(to encoder: any Encoder) throws {
    var container = encoder.container(keyedBy: CodingKeys.self)
    try container.encode(credentials.username, forKey: .username)
    try container.encode(credentials.recoverySecret, forKey: .recoverySecret)
    try container.encode(newPassword, forKey: .newPassword)
    try container.encode(keys, forKey: .keys)
  }

  /// The user name, no secret.
  public var description: String { "recovery of \(credentials.username) (secrets hidden)" }
}
