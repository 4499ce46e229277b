internal import Foundation

/// The body of `POST /v1/accounts`: a user name and a password, and for an end-to-end
/// encrypted account its keys as the device made them.
///
/// For an encrypted account, `password` is the device's sign-in secret (drawn from the
/// password, which the server never receives), and `keys` what the server keeps so that the
/// account's devices can open its keys: sealed to public keys it cannot open.
public struct NewAccount: Codable, Sendable, Hashable, CustomStringConvertible {
  /// The user name and the sign-in secret drawn from the password (never the password).
  public var credentials: Credentials
  /// An encrypted account's keys, with how its password is stretched; nil for an account
  /// whose notes the server reads.
  public var keys: NewAccountKeys?
  /// How a clear account's password is stretched into its sign-in secret (version 2), which
  /// the server tells the account's devices before they sign in; nil for an encrypted account
  /// (its ``keys`` name it) and from a device of an earlier version, which sent the password
  /// itself.
  public var keyDerivation: KeyDerivation?

  /// Creates the body.
  public init(
    credentials: Credentials, keys: NewAccountKeys? = nil, keyDerivation: KeyDerivation? = nil
  ) {
    self.credentials = credentials
    self.keys = keys
    self.keyDerivation = keyDerivation
  }

  enum CodingKeys: String, CodingKey { case username, password, keys, keyDerivation }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: ["username", "password", "keys", "keyDerivation"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    credentials = Credentials(
      username: try container.decode(String.self, forKey: .username),
      password: try container.decode(String.self, forKey: .password))
    // Absent for a clear account; `null` is not an object, and is refused.
    keys =
      container.contains(.keys)
      ? try container.decode(NewAccountKeys.self, forKey: .keys) : nil
    keyDerivation =
      container.contains(.keyDerivation)
      ? try container.decode(KeyDerivation.self, forKey: .keyDerivation) : nil
  }

  /// Encodes `username`, `password` and, for an encrypted account, `keys`; for a clear one,
  /// `keyDerivation`.
  public func encode(to encoder: any Encoder) throws {
    var container = encoder.container(keyedBy: CodingKeys.self)
    try container.encode(credentials.username, forKey: .username)
    try container.encode(credentials.password, forKey: .password)
    try container.encodeIfPresent(keys, forKey: .keys)
    try container.encodeIfPresent(keyDerivation, forKey: .keyDerivation)
  }

  /// Checks the credentials, the keys' sizes and the key derivation: version 2, and only for
  /// a clear account.
  ///
  /// - Throws: ``WireError`` naming the field.
  public func validated() throws(WireError) -> NewAccount {
    NewAccount(
      credentials: try credentials.validated(checkingPassword: true),
      keys: try keys?.validated(),
      keyDerivation: try keyDerivation.map { derivation throws(WireError) in
        try derivation.validatedAsNew(encrypted: keys != nil)
      })
  }

  /// The user name, and whether the account is encrypted; no secret is shown.
  public var description: String {
    "\(credentials.username) (\(keys == nil ? "clear" : "encrypted"), password hidden)"
  }
}

extension KeyDerivation {
  /// Checks the derivation an encrypted account's keys name, at `path`: any but version 3,
  /// which only a clear account's server hash has.
  ///
  /// - Throws: ``WireError`` naming the field.
  func validatedForKeys(_ path: String) throws(WireError) -> KeyDerivation {
    let valid = try validated(path)
    guard valid.version != Self.serverHashVersion else {
      throw WireError(
        "\(path).version", "version 3 is a clear account's; an encrypted account's is 1 or 2")
    }
    return valid
  }

  /// Checks the derivation a device made for a clear account's new password (version 2), at
  /// `path`.
  ///
  /// - Throws: ``WireError`` naming the field: a derivation of another version, or one sent
  ///   with an encrypted account's keys (which name their own).
  func validatedAsNew(encrypted: Bool, _ path: String = "keyDerivation") throws(WireError)
    -> KeyDerivation
  {
    guard !encrypted else {
      throw WireError(path, "an encrypted account's keys name its key derivation; leave it out")
    }
    let valid = try validated(path)
    guard valid.version == Self.currentVersion else {
      throw WireError(
        "\(path).version", "a new password is stretched with version \(Self.currentVersion)")
    }
    return valid
  }
}

/// What the server keeps of a new encrypted account's keys, in `POST /v1/accounts`: the public
/// keys the account's keys are sealed to, the two seals, and the recovery key's sign-in secret.
/// Binary values are base64.
public struct NewAccountKeys: Codable, Sendable, Hashable {
  /// The public key of the password's key pair (32 bytes).
  public var passwordPublicKey: String
  /// The public key of the recovery key's key pair (32 bytes).
  public var recoveryPublicKey: String
  /// The account's keys sealed to the password's public key (``NewAccountKeys/isSealedSize(_:)``).
  public var sealedForPassword: String
  /// The account's keys sealed to the recovery key's public key (``NewAccountKeys/isSealedSize(_:)``).
  public var sealedForRecovery: String
  /// What the password vouches for the account's keys with (32 bytes): a device that opens
  /// keys the server gives checks it.
  public var passwordAnchor: String
  /// What the recovery key vouches for them with (32 bytes).
  public var recoveryAnchor: String
  /// The recovery key's sign-in secret, which the server stores hashed: 8 to 1024 characters,
  /// like a password.
  public var recoverySecret: String
  /// What the account's devices vouch for the two public keys and the epoch with (32 bytes):
  /// a device checks it before it seals anything to a public key the server names.
  public var keysAuthenticator: String
  /// How the password was stretched; absent from a device of an older version, which used
  /// version 1 (``KeyDerivation``).
  public var keyDerivation: KeyDerivation?
  /// The public key the account's devices sign their writes with (32 bytes,
  /// ``RequestSignature``); absent from a device of an older version, whose account then
  /// takes writes a token alone makes until it is re-keyed.
  public var requestKey: String?

  /// Creates the keys from their bytes.
  public init(
    passwordPublicKey: [UInt8], recoveryPublicKey: [UInt8], sealedForPassword: [UInt8],
    sealedForRecovery: [UInt8], passwordAnchor: [UInt8], recoveryAnchor: [UInt8],
    recoverySecret: String, keysAuthenticator: [UInt8], keyDerivation: KeyDerivation?,
    requestKey: [UInt8]? = nil
  ) {
    self.keyDerivation = keyDerivation
    self.requestKey = requestKey.map { Data($0).base64EncodedString() }
    self.passwordPublicKey = Data(passwordPublicKey).base64EncodedString()
    self.recoveryPublicKey = Data(recoveryPublicKey).base64EncodedString()
    self.sealedForPassword = Data(sealedForPassword).base64EncodedString()
    self.sealedForRecovery = Data(sealedForRecovery).base64EncodedString()
    self.passwordAnchor = Data(passwordAnchor).base64EncodedString()
    self.recoveryAnchor = Data(recoveryAnchor).base64EncodedString()
    self.recoverySecret = recoverySecret
    self.keysAuthenticator = Data(keysAuthenticator).base64EncodedString()
  }

  enum CodingKeys: String, CodingKey {
    case passwordPublicKey, recoveryPublicKey, sealedForPassword, sealedForRecovery
    case passwordAnchor, recoveryAnchor, recoverySecret, keysAuthenticator, keyDerivation
    case requestKey
  }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(
      in: decoder,
      allowed: [
        "passwordPublicKey", "recoveryPublicKey", "sealedForPassword", "sealedForRecovery",
        "passwordAnchor", "recoveryAnchor", "recoverySecret", "keysAuthenticator",
        "keyDerivation", "requestKey",
      ])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    passwordPublicKey = try container.decode(String.self, forKey: .passwordPublicKey)
    recoveryPublicKey = try container.decode(String.self, forKey: .recoveryPublicKey)
    sealedForPassword = try container.decode(String.self, forKey: .sealedForPassword)
    sealedForRecovery = try container.decode(String.self, forKey: .sealedForRecovery)
    passwordAnchor = try container.decode(String.self, forKey: .passwordAnchor)
    recoveryAnchor = try container.decode(String.self, forKey: .recoveryAnchor)
    recoverySecret = try container.decode(String.self, forKey: .recoverySecret)
    keysAuthenticator = try container.decode(String.self, forKey: .keysAuthenticator)
    // Absent from an older device; `null` is not an object, and is refused.
    keyDerivation =
      container.contains(.keyDerivation)
      ? try container.decode(KeyDerivation.self, forKey: .keyDerivation) : nil
    requestKey =
      container.contains(.requestKey)
      ? try container.decode(String.self, forKey: .requestKey) : nil
  }

  /// The sizes of the binary values: public keys, then seals.
  public static let publicKeyBytes = 32
  /// The size of a seal of an account's keys that have retired no event key: 161, and
  /// ``retiredEventKeyBytes`` more for each they retired (one at each re-keying).
  public static let sealedBytes = 161
  /// The bytes each retired event key adds to the seal: 40.
  public static let retiredEventKeyBytes = 40
  /// The most event keys an account's keys retire: one at each re-keying.
  public static let maximumRetiredEventKeys = 64
  /// The size of a seal of keys made before their event key was drawn from the vouching key,
  /// which a server keeps until the account is re-keyed.
  public static let sealedBytesBeforeRetiring = 160
  /// The size of a seal of keys made before they had a vouching key.
  public static let sealedBytesBeforeVouching = 120
  /// The largest seal of an account's keys.
  public static let maximumSealedBytes =
    sealedBytes + maximumRetiredEventKeys * retiredEventKeyBytes

  /// Whether `count` is the size of a seal of an account's keys: ``sealedBytes`` and
  /// ``retiredEventKeyBytes`` for each retired event key, or ``sealedBytesBeforeRetiring``, or
  /// ``sealedBytesBeforeVouching``.
  public static func isSealedSize(_ count: Int) -> Bool {
    if count == sealedBytesBeforeRetiring || count == sealedBytesBeforeVouching { return true }
    let retired = count - sealedBytes
    return retired >= 0 && retired % retiredEventKeyBytes == 0
      && retired / retiredEventKeyBytes <= maximumRetiredEventKeys
  }
  /// The size of an anchor.
  public static let anchorBytes = 32
  /// The size of what the account's devices vouch for its public keys with.
  public static let authenticatorBytes = 32

  /// Checks that every value is base64 of its size, and the recovery secret's length.
  ///
  /// - Throws: ``WireError`` naming the field.
  public func validated() throws(WireError) -> NewAccountKeys {
    _ = try Self.bytes(passwordPublicKey, "keys.passwordPublicKey", count: Self.publicKeyBytes)
    _ = try Self.bytes(recoveryPublicKey, "keys.recoveryPublicKey", count: Self.publicKeyBytes)
    _ = try Self.seals(
      sealedForPassword, sealedForRecovery, "keys.sealedForPassword", "keys.sealedForRecovery")
    _ = try Self.bytes(passwordAnchor, "keys.passwordAnchor", count: Self.anchorBytes)
    _ = try Self.bytes(recoveryAnchor, "keys.recoveryAnchor", count: Self.anchorBytes)
    _ = try Self.bytes(
      keysAuthenticator, "keys.keysAuthenticator", count: Self.authenticatorBytes)
    guard Credentials.passwordLengths.contains(recoverySecret.unicodeScalars.count) else {
      throw WireError("keys.recoverySecret", "a recovery secret is 8 to 1024 characters long")
    }
    _ = try keyDerivation?.validatedForKeys("keys.keyDerivation")
    _ = try requestKey.map { key throws(WireError) in
      try Self.bytes(key, "keys.requestKey", count: RequestSignature.publicKeyBytes)
    }
    return self
  }

  /// The bytes of two seals of one account's keys, base64: each of a size of a seal
  /// (``isSealedSize(_:)``).
  /// (A device seals both from the same keys, so they are of one size; the server, which
  /// opens neither, does not hold it to that.)
  ///
  /// - Throws: ``WireError`` naming the field.
  public static func seals(
    _ first: String, _ second: String, _ firstField: String, _ secondField: String
  ) throws(WireError) -> (first: [UInt8], second: [UInt8]) {
    (try sealed(first, firstField), try sealed(second, secondField))
  }

  /// The bytes of the base64 seal of an account's keys `text`, of a size of a seal
  /// (``isSealedSize(_:)``).
  ///
  /// - Throws: ``WireError`` naming `field`.
  public static func sealed(_ text: String, _ field: @autoclosure () -> String)
    throws(WireError) -> [UInt8]
  {
    guard let data = Data(base64Encoded: text) else { throw WireError(field(), "not base64") }
    guard isSealedSize(data.count) else {
      throw WireError(
        field(),
        "\(data.count) bytes, expected \(sealedBytes) and \(retiredEventKeyBytes) for each retired "
          + "event key (at most \(maximumSealedBytes)), or \(sealedBytesBeforeRetiring), or "
          + "\(sealedBytesBeforeVouching)")
    }
    return Array(data)
  }

  /// The bytes of base64 `text`, which must be `count` of them.
  ///
  /// - Throws: ``WireError`` naming `field`.
  public static func bytes(_ text: String, _ field: @autoclosure () -> String, count: Int)
    throws(WireError) -> [UInt8]
  {
    guard let data = Data(base64Encoded: text) else { throw WireError(field(), "not base64") }
    guard data.count == count else {
      throw WireError(field(), "\(data.count) bytes, expected \(count)")
    }
    return Array(data)
  }
}

/// The answer to `GET /v1/accounts/current/keys`: what a device of an encrypted account needs
/// to open the account's keys — with the password or with the recovery key — and to follow the
/// content key's rotations. Binary values are base64.
public struct AccountKeysBody: Codable, Sendable, Hashable {
  /// The epoch of the account's current content key.
  public var epoch: UInt64
  /// The public key of the password's key pair (32 bytes).
  public var passwordPublicKey: String
  /// The public key of the recovery key's key pair (32 bytes).
  public var recoveryPublicKey: String
  /// The account's current keys sealed to the password's public key (``NewAccountKeys/isSealedSize(_:)``).
  public var sealedForPassword: String
  /// The account's current keys sealed to the recovery key's public key (``NewAccountKeys/isSealedSize(_:)``).
  public var sealedForRecovery: String
  /// What the password vouches for the account's keys with (32 bytes): a device checks it.
  public var passwordAnchor: String
  /// What the recovery key vouches for them with (32 bytes).
  public var recoveryAnchor: String
  /// Whether a note's or attachment's key was erased since the last rotation: the content key
  /// that wrapped it must be rotated (`PUT /v1/accounts/current/keys`) for the erasure to
  /// hold against copies made before it.
  public var rotationDue: Bool
  /// The links from the epoch the request's `since` named to the current one, in order: each
  /// the next content key sealed by the one before (60 bytes). Empty without `since`.
  public var links: [String]
  /// What the account's devices vouch for ``epoch`` and the two public keys with (32 bytes);
  /// absent for an account whose keys an older version made, until it is recovered.
  public var keysAuthenticator: String?
  /// The public key the server checks the account's writes against (32 bytes,
  /// ``RequestSignature``); absent for an account an older version made, until it is re-keyed.
  public var requestKey: String?

  /// Creates the body from the keys' bytes.
  public init(
    epoch: UInt64, passwordPublicKey: [UInt8], recoveryPublicKey: [UInt8],
    sealedForPassword: [UInt8], sealedForRecovery: [UInt8], passwordAnchor: [UInt8],
    recoveryAnchor: [UInt8], rotationDue: Bool = false, links: [[UInt8]] = [],
    keysAuthenticator: [UInt8]?, requestKey: [UInt8]? = nil
  ) {
    self.requestKey = requestKey.map { Data($0).base64EncodedString() }
    self.epoch = epoch
    self.passwordPublicKey = Data(passwordPublicKey).base64EncodedString()
    self.recoveryPublicKey = Data(recoveryPublicKey).base64EncodedString()
    self.sealedForPassword = Data(sealedForPassword).base64EncodedString()
    self.sealedForRecovery = Data(sealedForRecovery).base64EncodedString()
    self.passwordAnchor = Data(passwordAnchor).base64EncodedString()
    self.recoveryAnchor = Data(recoveryAnchor).base64EncodedString()
    self.rotationDue = rotationDue
    self.links = links.map { Data($0).base64EncodedString() }
    self.keysAuthenticator = keysAuthenticator.map { Data($0).base64EncodedString() }
  }

  enum CodingKeys: String, CodingKey {
    case epoch, passwordPublicKey, recoveryPublicKey, sealedForPassword, sealedForRecovery
    case passwordAnchor, recoveryAnchor, rotationDue, links, keysAuthenticator, requestKey
  }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(
      in: decoder,
      allowed: [
        "epoch", "passwordPublicKey", "recoveryPublicKey", "sealedForPassword",
        "sealedForRecovery", "passwordAnchor", "recoveryAnchor", "rotationDue", "links",
        "keysAuthenticator", "requestKey",
      ])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    epoch = try container.decode(UInt64.self, forKey: .epoch)
    passwordPublicKey = try container.decode(String.self, forKey: .passwordPublicKey)
    recoveryPublicKey = try container.decode(String.self, forKey: .recoveryPublicKey)
    sealedForPassword = try container.decode(String.self, forKey: .sealedForPassword)
    sealedForRecovery = try container.decode(String.self, forKey: .sealedForRecovery)
    passwordAnchor = try container.decode(String.self, forKey: .passwordAnchor)
    recoveryAnchor = try container.decode(String.self, forKey: .recoveryAnchor)
    rotationDue = try container.decode(Bool.self, forKey: .rotationDue)
    links = try container.decode([String].self, forKey: .links)
    keysAuthenticator = try container.decodeIfPresent(String.self, forKey: .keysAuthenticator)
    requestKey = try container.decodeIfPresent(String.self, forKey: .requestKey)
  }

  /// The links' bytes, checked.
  ///
  /// - Throws: ``WireError`` naming the link at fault, for example `links[1]`.
  public func linkBytes() throws(WireError) -> [[UInt8]] {
    var result: [[UInt8]] = []
    for (index, link) in links.enumerated() {
      result.append(try NewAccountKeys.bytes(link, "links[\(index)]", count: KeyRotation.linkBytes))
    }
    return result
  }
}

/// An encrypted account's keys sealed to a new password, at the account's current epoch: what a
/// password change (`PUT /v1/accounts/current/password`) and a recovery
/// (`POST /v1/accounts/recover`) carry, so that the new password opens the keys and the old one
/// no longer does. Binary values are base64.
public struct PasswordSeal: Codable, Sendable, Hashable {
  /// The epoch of the keys sealed: the account's current one.
  public var epoch: UInt64
  /// The public key of the new password's key pair (32 bytes).
  public var passwordPublicKey: String
  /// The account's keys sealed to it (``NewAccountKeys/isSealedSize(_:)``).
  public var sealedForPassword: String
  /// What the new password vouches for the keys with (32 bytes).
  public var passwordAnchor: String
  /// What the account's devices vouch for the epoch, the new password's public key and the
  /// recovery key's with (32 bytes).
  public var keysAuthenticator: String
  /// How the new password is stretched; absent from a device of an older version, which used
  /// version 1 (``KeyDerivation``).
  public var keyDerivation: KeyDerivation?

  /// Creates the seal from its bytes.
  public init(
    epoch: UInt64, passwordPublicKey: [UInt8], sealedForPassword: [UInt8],
    passwordAnchor: [UInt8], keysAuthenticator: [UInt8], keyDerivation: KeyDerivation?
  ) {
    self.epoch = epoch
    self.keyDerivation = keyDerivation
    self.passwordPublicKey = Data(passwordPublicKey).base64EncodedString()
    self.sealedForPassword = Data(sealedForPassword).base64EncodedString()
    self.passwordAnchor = Data(passwordAnchor).base64EncodedString()
    self.keysAuthenticator = Data(keysAuthenticator).base64EncodedString()
  }

  enum CodingKeys: String, CodingKey {
    case epoch, passwordPublicKey, sealedForPassword, passwordAnchor, keysAuthenticator
    case keyDerivation
  }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(
      in: decoder,
      allowed: [
        "epoch", "passwordPublicKey", "sealedForPassword", "passwordAnchor", "keysAuthenticator",
        "keyDerivation",
      ])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    epoch = try container.decode(UInt64.self, forKey: .epoch)
    passwordPublicKey = try container.decode(String.self, forKey: .passwordPublicKey)
    sealedForPassword = try container.decode(String.self, forKey: .sealedForPassword)
    passwordAnchor = try container.decode(String.self, forKey: .passwordAnchor)
    keysAuthenticator = try container.decode(String.self, forKey: .keysAuthenticator)
    // Absent from an older device; `null` is not an object, and is refused.
    keyDerivation =
      container.contains(.keyDerivation)
      ? try container.decode(KeyDerivation.self, forKey: .keyDerivation) : nil
  }

  /// A seal, checked.
  public struct Checked: Sendable, Hashable {
    /// The epoch of the keys sealed.
    public var epoch: UInt64
    /// The new password's public key.
    public var passwordPublicKey: [UInt8]
    /// The keys sealed to it.
    public var sealedForPassword: [UInt8]
    /// What the new password vouches for them with.
    public var passwordAnchor: [UInt8]
    /// What the account's devices vouch for the public keys with.
    public var keysAuthenticator: [UInt8]
    /// How the new password is stretched (version 1 when the device did not say).
    public var keyDerivation: KeyDerivation
  }

  /// The seal's bytes, checked.
  ///
  /// - Throws: ``WireError`` naming the field, under `keys`.
  public func validated() throws(WireError) -> Checked {
    Checked(
      epoch: epoch,
      passwordPublicKey: try NewAccountKeys.bytes(
        passwordPublicKey, "keys.passwordPublicKey", count: NewAccountKeys.publicKeyBytes),
      sealedForPassword: try NewAccountKeys.sealed(sealedForPassword, "keys.sealedForPassword"),
      passwordAnchor: try NewAccountKeys.bytes(
        passwordAnchor, "keys.passwordAnchor", count: NewAccountKeys.anchorBytes),
      keysAuthenticator: try NewAccountKeys.bytes(
        keysAuthenticator, "keys.keysAuthenticator", count: NewAccountKeys.authenticatorBytes),
      keyDerivation: try keyDerivation?.validatedForKeys("keys.keyDerivation") ?? .versionOne)
  }
}

extension KeyDerivation {
  /// What a record made before version 2 stands for: a salt from the name, and the cost each
  /// device was configured with (the standard one named here).
  public static let versionOne = KeyDerivation(
    version: 1, logRounds: 17, blockSize: 8, parallelism: 1, salt: [])
}
