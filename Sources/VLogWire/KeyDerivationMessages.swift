internal import Foundation

/// How the devices of an end-to-end encrypted account stretch its password: the scheme's
/// version, scrypt's cost, and the account's salt. A device makes it (a random salt) when it
/// creates the account or sets a new password; the server keeps it with the account's keys and
/// tells any device before it signs in (`POST /v1/sessions/parameters`).
///
/// - Version 1: a salt drawn from the user name, the same on every deployment, and the cost the
///   device was configured with (accounts made before version 2; the server's record names
///   none, and answers with `salt` empty).
/// - Version 2: 16 random bytes of salt per account, and the cost named here: what a device
///   makes every account with, clear or encrypted.
/// - Version 3: the server's own hash of a clear account's password, as servers stored them
///   before every device stretched its password (scrypt of the password's UTF-8 as typed,
///   under the 16 bytes of salt and at the cost named here): a device reproduces it, so that
///   such an account signs in without its password leaving the device, and the server then
///   keeps only the hash of the secret drawn from it.
public struct KeyDerivation: Codable, Sendable, Hashable {
  /// The scheme: 1 or 2.
  public var version: Int
  /// log₂ of scrypt's N (CPU and memory cost).
  public var logRounds: Int
  /// scrypt's block size r.
  public var blockSize: Int
  /// scrypt's parallelism p.
  public var parallelism: Int
  /// The account's salt, base64: 16 bytes in version 2, empty in version 1.
  public var salt: String

  /// log₂ of scrypt's N a device stretches new passwords with (2¹⁸, r = 8, p = 1: 256 MiB):
  /// what the server names for a name no account has.
  public static let standardLogRounds = 18
  /// The version a device makes new accounts and new passwords with.
  public static let currentVersion = 2
  /// The version of a clear account whose server stored the hash of the password itself.
  public static let serverHashVersion = 3
  /// The size of a version 2 salt.
  public static let saltBytes = 16

  /// Creates the parameters.
  public init(version: Int, logRounds: Int, blockSize: Int, parallelism: Int, salt: [UInt8]) {
    self.version = version
    self.logRounds = logRounds
    self.blockSize = blockSize
    self.parallelism = parallelism
    self.salt = Data(salt).base64EncodedString()
  }

  enum CodingKeys: String, CodingKey { case version, logRounds, blockSize, parallelism, salt }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(
      in: decoder, allowed: ["version", "logRounds", "blockSize", "parallelism", "salt"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    version = try container.decode(Int.self, forKey: .version)
    logRounds = try container.decode(Int.self, forKey: .logRounds)
    blockSize = try container.decode(Int.self, forKey: .blockSize)
    parallelism = try container.decode(Int.self, forKey: .parallelism)
    salt = try container.decode(String.self, forKey: .salt)
  }

  /// The salt's bytes.
  public var saltBytes: [UInt8] { Data(base64Encoded: salt).map { Array($0) } ?? [] }

  /// Checks the version, the cost's ranges and the salt's size. log₂ N is 1 to 20 and r 1 to
  /// 8, so a derivation takes at most 1 GiB (`128 × r × N`): a server cannot make a device run
  /// out of memory; p is 1 to 16. (What a device accepts is narrower still:
  /// `KeyDerivation.checked(against:)` in VLogSync.)
  ///
  /// - Throws: ``WireError`` naming the field, under `path`.
  public func validated(_ path: String = "keyDerivation") throws(WireError) -> KeyDerivation {
    guard (1...Self.serverHashVersion).contains(version) else {
      throw WireError("\(path).version", "the key derivation's version is 1, 2 or 3")
    }
    guard (1...20).contains(logRounds) else {
      throw WireError("\(path).logRounds", "log₂ of scrypt's N is 1 to 20")
    }
    guard (1...8).contains(blockSize) else {
      throw WireError("\(path).blockSize", "scrypt's block size is 1 to 8")
    }
    guard (1...16).contains(parallelism) else {
      throw WireError("\(path).parallelism", "scrypt's parallelism is 1 to 16")
    }
    let bytes = Data(base64Encoded: salt)
    let expected = version == 1 ? 0 : Self.saltBytes
    guard let bytes, bytes.count == expected else {
      throw WireError(
        "\(path).salt", "the salt is \(expected) bytes of base64 in version \(version)")
    }
    return self
  }
}

/// The body of `POST /v1/sessions/parameters`: the user name a device is about to sign in as.
public struct SignInParametersRequest: Codable, Sendable, Hashable {
  /// The user name, as the user typed it (compared without case).
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

/// The answer to `POST /v1/sessions/parameters`: how a device signs in as a name — with the
/// secret drawn from the password by ``keyDerivation``, whatever the account's kind (no device
/// sends a password) — and whether the account is end-to-end encrypted.
///
/// A name with no account gets an answer of the same kind, the same every time (drawn from a
/// secret the server keeps): the answer does not tell whether a name exists.
public struct SignInParameters: Codable, Sendable, Hashable {
  /// Whether the account is end-to-end encrypted.
  public var encrypted: Bool
  /// How its password is stretched into the secret that signs in.
  public var keyDerivation: KeyDerivation

  /// Creates the answer.
  public init(encrypted: Bool, keyDerivation: KeyDerivation) {
    self.encrypted = encrypted
    self.keyDerivation = keyDerivation
  }

  enum CodingKeys: String, CodingKey { case encrypted, keyDerivation }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: ["encrypted", "keyDerivation"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    encrypted = try container.decode(Bool.self, forKey: .encrypted)
    keyDerivation = try container.decode(KeyDerivation.self, forKey: .keyDerivation)
  }
}

/// The work of scrypt's parameters, N × r × p: what one cost is compared with another by (the
/// server's rehash of a weaker password hash at sign-in, the least a device accepts from a
/// server). One rule for the server's password hashes and the devices' key derivation.
package func scryptWork(logRounds: UInt8, blockSize: UInt8, parallelism: UInt8) -> Double {
  Double(1 << Int(min(logRounds, 62))) * Double(blockSize) * Double(parallelism)
}
