internal import Crypto
internal import Foundation
public import VLogWire
internal import _CryptoExtras

// The keys of an end-to-end encrypted account, made and used on its devices only.
//
// - The password is stretched with scrypt, under the account's random salt (`KeyDerivation`,
//   version 2; accounts made before it use a salt made from the user name), into a master
//   secret, from which HKDF draws two unrelated values: the *sign-in secret*, which the device
//   sends where a clear account sends its password (the server hashes it as it hashes passwords),
//   and the private half of the *password key pair*. Neither gives the other: the server, which
//   sees the sign-in secret, learns nothing from which the account key can be derived. (The
//   scheme of Bitwarden's master password hash and stretched key, with a key pair in place of
//   the stretched key.)
// - The recovery key, 32 random bytes shown once, gives the same two values by HKDF.
// - The account's keys (``AccountKeys``) are random. The server stores them only sealed (HPKE)
//   to the public halves of the password's and the recovery key's key pairs: a device that
//   holds the account's keys can seal new ones to them without the password, which is what
//   lets every device rotate the content key after a deletion (crypto-shredding).

/// scrypt's cost for stretching an encrypted account's password on its devices: the cost a
/// device makes new passwords with, and the least it accepts from a server for an existing one.
public struct KeyDerivationCost: Sendable, Hashable, CustomStringConvertible {
  /// log₂ of scrypt's N (CPU and memory cost).
  public var logRounds: UInt8
  /// scrypt's block size r.
  public var blockSize: UInt8
  /// scrypt's parallelism p.
  public var parallelism: UInt8

  /// Creates a cost.
  public init(logRounds: UInt8, blockSize: UInt8 = 8, parallelism: UInt8 = 1) {
    self.logRounds = logRounds
    self.blockSize = blockSize
    self.parallelism = parallelism
  }

  /// N = 2¹⁸, r = 8, p = 1: 256 MiB of memory per guess and under a second of a core — twice
  /// OWASP's recommended scrypt cost (N = 2¹⁷) in both. A password's stretching on the device
  /// is the only cost an attacker who holds the server's files pays per guess, so it is higher
  /// than the server's own password hashing.
  public static let standard = KeyDerivationCost(
    logRounds: UInt8(KeyDerivation.standardLogRounds))

  /// What one derivation costs: memory times passes, in 128-byte blocks (`N × r × p`).
  public var work: Double {
    scryptWork(logRounds: logRounds, blockSize: blockSize, parallelism: parallelism)
  }

  /// N = 2⁴: fast and weak, for tests only.
  public static let testing = KeyDerivationCost(logRounds: 4)

  /// `scrypt N=2^18 r=8 p=1`.
  public var description: String { "scrypt N=2^\(logRounds) r=\(blockSize) p=\(parallelism)" }
}

/// What a password gives on a device of an encrypted account: the secret that signs in, and
/// the private key that opens the account's keys. Derived, never stored.
public struct PasswordKeys: Sendable {
  /// What the device sends the server in place of the password: 43 characters of base64url.
  /// The server stores only its hash; it cannot be turned back into the password, nor into
  /// ``publicKey``'s private half.
  public let signInSecret: String
  /// The private half of the password's key pair: opens the account's keys sealed to
  /// ``publicKey``. It never leaves the device.
  private let privateBytes: [UInt8]

  /// The public half of the password's key pair, which the server stores so that any device
  /// of the account can seal new account keys to it (32 bytes).
  public let publicKey: [UInt8]
  /// Vouches for the account's keys (``AccountKeys/anchor(for:)``): what tells the account's
  /// own keys from keys a server sealed to ``publicKey`` itself.
  private let anchorBytes: [UInt8]
  var anchorKey: SymmetricKey { SymmetricKey(data: anchorBytes) }

  func privateKey() throws -> Curve25519.KeyAgreement.PrivateKey {
    try Curve25519.KeyAgreement.PrivateKey(rawRepresentation: privateBytes)
  }

  /// How the password was stretched: what the server keeps for the account's other devices.
  public let derivation: KeyDerivation

  /// Stretches `password` for the account `username` (compared without case, as the server
  /// does) as `derivation` says: under the account's salt at its cost (version 2), or under a
  /// salt made from the name (version 1, accounts made before).
  ///
  /// The password is taken in Unicode's composed form (NFC), so the same characters typed on
  /// two devices give the same keys.
  ///
  /// - Throws: `WireError` for a derivation that is not one (`KeyDerivation/validated(_:)`).
  public init(username: String, password: String, derivation: KeyDerivation) throws {
    let valid = try derivation.validated()
    let name = Array(username.lowercased().utf8)
    let salt =
      valid.version == 1
      ? Array(SHA256.hash(data: Array("vlog account keys v1\u{0}".utf8) + name))
      : Array(
        SHA256.hash(data: Array("vlog account keys v2\u{0}".utf8) + valid.saltBytes + [0] + name))
    let master = try KDF.Scrypt.deriveKey(
      from: Array(password.precomposedStringWithCanonicalMapping.utf8), salt: salt,
      outputByteCount: 32, rounds: 1 << valid.logRounds, blockSize: valid.blockSize,
      parallelism: valid.parallelism)
    try self.init(master: master, purpose: "password", derivation: valid)
  }

  /// Stretches `password` for `username` as accounts made before version 2 did: under a salt
  /// made from the name, at `cost` (`KeyDerivation/versionOne(cost:)`).
  public init(username: String, password: String, cost: KeyDerivationCost) throws {
    try self.init(username: username, password: password, derivation: .versionOne(cost: cost))
  }

  /// The two values HKDF draws from `master` for `purpose` (`password` or `recovery`).
  init(master: SymmetricKey, purpose: String, derivation: KeyDerivation) throws {
    self.derivation = derivation
    let secret = HKDF<SHA256>.expand(
      pseudoRandomKey: master, info: Array("vlog \(purpose) sign-in".utf8), outputByteCount: 32)
    let seed = HKDF<SHA256>.expand(
      pseudoRandomKey: master, info: Array("vlog \(purpose) key pair".utf8), outputByteCount: 32)
    anchorBytes =
      HKDF<SHA256>.expand(
        pseudoRandomKey: master, info: Array("vlog \(purpose) anchor".utf8), outputByteCount: 32
      ).bytes
    signInSecret = Base64URL.encode(secret.bytes)
    privateBytes = seed.bytes
    publicKey = Array(
      try Curve25519.KeyAgreement.PrivateKey(rawRepresentation: privateBytes).publicKey
        .rawRepresentation)
  }
}

extension PasswordKeys {
  /// ``init(username:password:derivation:)`` on a thread of its own. Stretching a password holds a
  /// core for as long as its cost says (about half a second at the standard cost): on the
  /// cooperative pool, which has one thread per core, it would stall every other task of the
  /// process meanwhile — a server on the same pool, an app's other work.
  ///
  /// - Throws: What ``init(username:password:derivation:)`` throws.
  public static func stretching(
    username: String, password: String, derivation: KeyDerivation
  ) async throws -> PasswordKeys {
    try await withCheckedThrowingContinuation { continuation in
      Thread.detachNewThread {
        continuation.resume(
          with: Result {
            try PasswordKeys(username: username, password: password, derivation: derivation)
          })
      }
    }
  }
}

extension KeyDerivation {
  /// A new password's derivation, as a device makes it: the current version, 16 bytes of salt
  /// from `random`, at `cost`.
  public static func new(cost: KeyDerivationCost, random: (Int) -> [UInt8]) -> KeyDerivation {
    KeyDerivation(
      version: currentVersion, logRounds: Int(cost.logRounds), blockSize: Int(cost.blockSize),
      parallelism: Int(cost.parallelism), salt: random(saltBytes))
  }

  /// Version 1 at `cost`: a salt from the name, as accounts made before version 2 have.
  public static func versionOne(cost: KeyDerivationCost) -> KeyDerivation {
    KeyDerivation(
      version: 1, logRounds: Int(cost.logRounds), blockSize: Int(cost.blockSize),
      parallelism: Int(cost.parallelism), salt: [])
  }

  /// scrypt's cost named here.
  public var cost: KeyDerivationCost {
    KeyDerivationCost(
      logRounds: UInt8(clamping: logRounds), blockSize: UInt8(clamping: blockSize),
      parallelism: UInt8(clamping: parallelism))
  }

  /// Checks a derivation a server named for an existing account before the device stretches a
  /// password with it: a version it knows and no lower than `seenVersion` (the highest this
  /// device has seen for the account), a cost of at least `floor`'s work, at most 1 GiB of
  /// memory. A server that names a weaker one would get a secret cheaper to guess from.
  ///
  /// Version 1 names no cost: the device uses `floor`, as such accounts' devices did.
  ///
  /// - Throws: ``AccountKeyError`` saying what is refused.
  public func checked(floor: KeyDerivationCost, seenVersion: Int?) throws(AccountKeyError)
    -> KeyDerivation
  {
    let valid: KeyDerivation
    do { valid = try validated() } catch {
      throw AccountKeyError("the server's key derivation is malformed: \(error)")
    }
    if let seenVersion, valid.version < seenVersion {
      throw AccountKeyError(
        "the server names key derivation version \(valid.version), but this account's was "
          + "version \(seenVersion) on this device: refusing to stretch the password with it")
    }
    if valid.version == 1 { return .versionOne(cost: floor) }
    guard valid.cost.work >= floor.work else {
      throw AccountKeyError(
        "the server names a key derivation weaker than this device accepts (\(valid.cost), "
          + "at least \(floor)): refusing to send a secret drawn with it")
    }
    return valid
  }
}

/// base64url without padding (RFC 4648 §5).
private enum Base64URL {
  static func encode(_ bytes: [UInt8]) -> String {
    Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
      .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
  }
}
