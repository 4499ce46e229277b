public import Foundation
internal import VLog

/// The body of `POST /v1/accounts` and `POST /v1/sessions`: a user name and a password, and
/// for a sign-in, the device credential a server gave this device before.
///
/// User names are 1 to 64 characters of `A-Z`, `a-z`, `0-9`, `.`, `_`, `-`, `@` and `+`,
/// compared without case; passwords are 8 to 1024 characters (Unicode scalars, as JSON Schema
/// counts them). The password never appears in ``description``.
public struct Credentials: Codable, Sendable, Hashable, CustomStringConvertible {
  /// The account's user name.
  public var username: String
  /// The account's password.
  public var password: String
  /// For a sign-in, the ``SessionBody/device`` of this device's last sign-in to the account:
  /// its failures are then counted for this device alone, so that someone else's failed
  /// guesses at the name do not lock it out. Nil for a device that has none, and for a
  /// sign-up.
  public var device: String?
  /// For a sign-in with a secret drawn as key derivation version 3 (a clear account whose
  /// server kept the hash of the password itself): the secret drawn from the same password
  /// under a new version 2 derivation, which the server keeps in its place once the first
  /// checks — so that the hash it kept signs in no more. Nil otherwise.
  public var upgrade: SecretUpgrade?

  /// The allowed lengths of a password, in Unicode scalars.
  public static let passwordLengths = 8...1024

  enum CodingKeys: String, CodingKey { case username, password, device, upgrade }

  /// Creates credentials.
  public init(
    username: String, password: String, device: String? = nil, upgrade: SecretUpgrade? = nil
  ) {
    self.username = username
    self.password = password
    self.device = device
    self.upgrade = upgrade
  }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: ["username", "password", "device", "upgrade"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    username = try container.decode(String.self, forKey: .username)
    password = try container.decode(String.self, forKey: .password)
    // Absent from a device that has none; `null` is not a string, and is refused.
    device =
      container.contains(.device) ? try container.decode(String.self, forKey: .device) : nil
    upgrade =
      container.contains(.upgrade)
      ? try container.decode(SecretUpgrade.self, forKey: .upgrade) : nil
  }

  /// Encodes the JSON types, leaving out a device credential and an upgrade there are none of.
  public func encode(to encoder: any Encoder) throws {
    var container = encoder.container(keyedBy: CodingKeys.self)
    try container.encode(username, forKey: .username)
    try container.encode(password, forKey: .password)
    try container.encodeIfPresent(device, forKey: .device)
    try container.encodeIfPresent(upgrade, forKey: .upgrade)
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
    if let device, device.utf8.count > 256 {
      throw WireError("device", "a device credential is at most 256 characters")
    }
    if let upgrade {
      guard Self.passwordLengths.contains(upgrade.secret.unicodeScalars.count) else {
        throw WireError("upgrade.secret", "a secret is 8 to 1024 characters long")
      }
      _ = try upgrade.keyDerivation.validatedAsNew(encrypted: false, "upgrade.keyDerivation")
    }
    return Credentials(
      username: normalizedUsername, password: password, device: device, upgrade: upgrade)
  }

  /// The user name; the password is not shown.
  public var description: String { "\(username) (password hidden)" }
}

/// A clear account's move from key derivation version 3 to version 2, carried by the sign-in
/// that proves the version 3 secret (``Credentials/upgrade``).
public struct SecretUpgrade: Codable, Sendable, Hashable {
  /// The secret drawn from the password under ``keyDerivation``.
  public var secret: String
  /// The new derivation: version 2, made by the device.
  public var keyDerivation: KeyDerivation

  /// Creates an upgrade.
  public init(secret: String, keyDerivation: KeyDerivation) {
    self.secret = secret
    self.keyDerivation = keyDerivation
  }

  enum CodingKeys: String, CodingKey { case secret, keyDerivation }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: ["secret", "keyDerivation"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    secret = try container.decode(String.self, forKey: .secret)
    keyDerivation = try container.decode(KeyDerivation.self, forKey: .keyDerivation)
  }
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

/// The answer to `POST /v1/sessions`: a bearer token, when it expires, and a device
/// credential.
public struct SessionBody: Codable, Sendable, Hashable {
  /// The bearer token to send as `Authorization: Bearer <token>`.
  public var token: String
  /// When the token stops working, ISO 8601 with milliseconds.
  public var expiresAt: String
  /// What this device sends as ``Credentials/device`` when it signs in to the account again:
  /// it keeps the device from being locked out by others' failed guesses at the name. Nil
  /// from a server that gives none.
  public var device: String?

  /// Creates the body.
  public init(token: String, expiresAt: Date, device: String? = nil) {
    self.token = token
    self.expiresAt = ISO8601.format(milliseconds: expiresAt.milliseconds)
    self.device = device
  }

  enum CodingKeys: String, CodingKey { case token, expiresAt, device }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: ["token", "expiresAt", "device"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    token = try container.decode(String.self, forKey: .token)
    expiresAt = try container.decode(String.self, forKey: .expiresAt)
    // Absent from a device that has none; `null` is not a string, and is refused.
    device =
      container.contains(.device) ? try container.decode(String.self, forKey: .device) : nil
  }

  /// Encodes the JSON types, leaving out a device credential there is none of.
  public func encode(to encoder: any Encoder) throws {
    var container = encoder.container(keyedBy: CodingKeys.self)
    try container.encode(token, forKey: .token)
    try container.encode(expiresAt, forKey: .expiresAt)
    try container.encodeIfPresent(device, forKey: .device)
  }
}

/// The body of `PUT /v1/accounts/current/password`: the password now, and the new one.
public struct PasswordChange: Codable, Sendable, Hashable, CustomStringConvertible {
  /// The account's password now, which the server checks again.
  public var currentPassword: String
  /// The new password, 8 to 1024 characters.
  public var newPassword: String
  /// For an end-to-end encrypted account, its keys sealed to the new password (with how that
  /// password is stretched); nil for an account whose notes the server reads.
  public var keys: PasswordSeal?
  /// For a clear account, how the new password is stretched into ``newPassword`` (version
  /// 2); nil for an encrypted account and from a device of an earlier version, which sent the
  /// passwords themselves.
  public var keyDerivation: KeyDerivation?

  /// Creates the body.
  public init(
    currentPassword: String, newPassword: String, keys: PasswordSeal? = nil,
    keyDerivation: KeyDerivation? = nil
  ) {
    self.currentPassword = currentPassword
    self.newPassword = newPassword
    self.keys = keys
    self.keyDerivation = keyDerivation
  }

  enum CodingKeys: String, CodingKey { case currentPassword, newPassword, keys, keyDerivation }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(
      in: decoder, allowed: ["currentPassword", "newPassword", "keys", "keyDerivation"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    currentPassword = try container.decode(String.self, forKey: .currentPassword)
    newPassword = try container.decode(String.self, forKey: .newPassword)
    // Absent for a clear account; `null` is not an object, and is refused.
    keys =
      container.contains(.keys) ? try container.decode(PasswordSeal.self, forKey: .keys) : nil
    keyDerivation =
      container.contains(.keyDerivation)
      ? try container.decode(KeyDerivation.self, forKey: .keyDerivation) : nil
  }

  /// Encodes both passwords and, for an encrypted account, the keys; for a clear one, the key
  /// derivation.
  public func encode(to encoder: any Encoder) throws {
    var container = encoder.container(keyedBy: CodingKeys.self)
    try container.encode(currentPassword, forKey: .currentPassword)
    try container.encode(newPassword, forKey: .newPassword)
    try container.encodeIfPresent(keys, forKey: .keys)
    try container.encodeIfPresent(keyDerivation, forKey: .keyDerivation)
  }

  /// Checks both passwords' lengths.
  ///
  /// - Throws: ``WireError`` naming `currentPassword` or `newPassword`.
  public func validated() throws(WireError) -> PasswordChange {
    guard Credentials.passwordLengths.contains(currentPassword.unicodeScalars.count) else {
      throw WireError("currentPassword", "a password is 8 to 1024 characters long")
    }
    guard Credentials.passwordLengths.contains(newPassword.unicodeScalars.count) else {
      throw WireError("newPassword", "a password is 8 to 1024 characters long")
    }
    _ = try keys?.validated()
    _ = try keyDerivation?.validatedAsNew(encrypted: keys != nil)
    return self
  }

  /// The passwords are not shown.
  public var description: String { "password change (passwords hidden)" }
}

/// The body of `DELETE /v1/accounts/current`: the password, checked again before everything of
/// the account is erased.
public struct AccountDeletion: Codable, Sendable, Hashable, CustomStringConvertible {
  /// The account's password.
  public var password: String

  /// Creates the body.
  public init(password: String) { self.password = password }

  enum CodingKeys: String, CodingKey { case password }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: ["password"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    password = try container.decode(String.self, forKey: .password)
  }

  /// Checks the password's length.
  ///
  /// - Throws: ``WireError`` naming `password`.
  public func validated() throws(WireError) -> AccountDeletion {
    guard Credentials.passwordLengths.contains(password.unicodeScalars.count) else {
      throw WireError("password", "a password is 8 to 1024 characters long")
    }
    return self
  }

  /// The password is not shown.
  public var description: String { "account deletion (password hidden)" }
}

/// One signed-in session of an account, as `GET /v1/sessions` lists it.
public struct SessionInfo: Codable, Sendable, Hashable {
  /// The session's id: 16 hex digits derived from its token (not the token, which the server
  /// does not keep), for `DELETE /v1/sessions/{id}`.
  public var id: String
  /// When its token stops working, ISO 8601 with milliseconds.
  public var expiresAt: String
  /// Whether it is the session of the token the request was made with.
  public var current: Bool

  /// Creates an entry.
  public init(id: String, expiresAt: String, current: Bool) {
    self.id = id
    self.expiresAt = expiresAt
    self.current = current
  }

  enum CodingKeys: String, CodingKey { case id, expiresAt, current }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: ["id", "expiresAt", "current"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    id = try container.decode(String.self, forKey: .id)
    expiresAt = try container.decode(String.self, forKey: .expiresAt)
    current = try container.decode(Bool.self, forKey: .current)
  }
}

/// The answer to `GET /v1/sessions`: the account's sessions whose tokens have not expired,
/// the soonest to expire first.
public struct SessionList: Codable, Sendable, Hashable {
  /// The sessions.
  public var sessions: [SessionInfo]

  /// Creates the body.
  public init(sessions: [SessionInfo]) { self.sessions = sessions }

  enum CodingKeys: String, CodingKey { case sessions }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: ["sessions"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    sessions = try container.decode([SessionInfo].self, forKey: .sessions)
  }
}
