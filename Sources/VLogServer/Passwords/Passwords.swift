internal import Crypto
internal import Foundation
internal import VLogWire
internal import _CryptoExtras

/// How hard a password hash is to compute: scrypt's cost parameters.
public struct PasswordCost: Sendable, Hashable {
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

  /// N = 2¹⁷, r = 8, p = 1: OWASP's recommended scrypt cost, 128 MiB and about half a second
  /// of a core per hash. A sign-in pays it once per token (tokens last 30 days by default).
  public static let standard = PasswordCost(logRounds: 17)

  /// The memory and time one hash takes, in units of 128-byte blocks times passes: what an
  /// attacker pays per guess. A stored hash of less work than the server's cost is hashed
  /// again at the next sign-in.
  public var work: Double {
    scryptWork(logRounds: logRounds, blockSize: blockSize, parallelism: parallelism)
  }

  /// N = 2⁴: fast and weak, for tests only.
  public static let testing = PasswordCost(logRounds: 4)

  /// The extra hashing that brings a check of a hash at this cost up to the work of one at
  /// `target`: scrypt at this N and r, with the parallelism that makes up the difference (at
  /// most 255); nil when this cost is not below the target's. After an operator raises the
  /// cost, a wrong password for an account hashed at the old cost then takes as long as one
  /// for a name no account has, which is checked against a decoy at the new cost.
  func padding(upTo target: PasswordCost) -> PasswordCost? {
    let missing = target.work - work
    let unit = scryptWork(logRounds: logRounds, blockSize: blockSize, parallelism: 1)
    guard missing > 0, unit > 0 else { return nil }
    let parallelism = min(255, max(1, (missing / unit).rounded()))
    return PasswordCost(
      logRounds: logRounds, blockSize: blockSize, parallelism: UInt8(parallelism))
  }
}

/// The scrypt hash of what signs in to an account, with its salt and cost, as stored in an
/// account record: the hash of a sign-in secret a device drew from the password — or, for a
/// clear account made before devices stretched passwords (no ``derivation``, no keys), of the
/// password itself, which the account's next sign-in replaces (``signInSecretOfPassword``).
struct PasswordHash: Sendable, Hashable {
  var cost: PasswordCost
  var salt: [UInt8]
  var hash: [UInt8]
  /// How a clear account's devices stretch its password into the secret hashed here, which
  /// the server tells them before they sign in; nil for an encrypted account (its keys' record
  /// names it), a recovery key's secret, and a clear account whose password itself is hashed.
  var derivation: KeyDerivation?

  static let saltCount = 16
  static let hashCount = 32

  /// The cost that marks a plain hash: SHA-256 of the salt and the secret, no stretching —
  /// for a recovery key's sign-in secret, 256 random bits that no guessing reaches.
  static let plain = PasswordCost(logRounds: 0, blockSize: 0, parallelism: 0)

  /// The plain hash of `secret` (``plain``) under `salt`: no stretching, so nothing to fail.
  init(plainHashing secret: String, salt: [UInt8]) {
    cost = Self.plain
    self.salt = salt
    hash = sha256(salt + Array(secret.utf8))
    derivation = nil
  }

  /// Hashes `secret` with a new salt.
  init(
    hashing secret: String, cost: PasswordCost, salt: [UInt8], derivation: KeyDerivation? = nil
  ) throws {
    self.cost = cost
    self.salt = salt
    self.hash = try Self.derive(secret, salt: salt, cost: cost)
    self.derivation = derivation
  }

  /// Reads what ``encoded`` wrote; nil for bytes of another form.
  init?(decoding bytes: some Collection<UInt8>) {
    let bytes = Array(bytes)
    let fixed = 3 + Self.saltCount + Self.hashCount
    guard bytes.count >= fixed else { return nil }
    cost = PasswordCost(logRounds: bytes[0], blockSize: bytes[1], parallelism: bytes[2])
    salt = Array(bytes[3..<(3 + Self.saltCount)])
    hash = Array(bytes[(3 + Self.saltCount)..<fixed])
    derivation = nil
    guard bytes.count > fixed else { return }
    let fields = Array(bytes[fixed...])
    guard fields.count >= 5, fields.count == 5 + Int(fields[4]) else { return nil }
    let derivation = KeyDerivation(
      version: Int(fields[0]), logRounds: Int(fields[1]), blockSize: Int(fields[2]),
      parallelism: Int(fields[3]), salt: Array(fields[5...]))
    // Stored bytes of another form are no record (as `EncryptionRecord(decoding:)` answers):
    // the caller reports the account's record as damaged; the reason adds nothing to that.
    guard let valid = try? derivation.validated() else { return nil }
    self.derivation = valid
  }

  /// The cost (3 bytes), the salt and the hash; then, for a clear account's secret, its key
  /// derivation: version, log₂ N, r, p and the salt's length, a byte each, then the salt.
  var encoded: [UInt8] {
    var bytes = [cost.logRounds, cost.blockSize, cost.parallelism] + salt + hash
    if let derivation {
      let salt = derivation.saltBytes
      bytes += [derivation.version, derivation.logRounds, derivation.blockSize]
        .map { UInt8(clamping: $0) }
      bytes += [UInt8(clamping: derivation.parallelism), UInt8(clamping: salt.count)] + salt
    }
    return bytes
  }

  /// Whether `secret` hashes to this hash, compared in constant time; with `padding`, after
  /// hashing it again at that cost too (``PasswordCost/padding(upTo:)``), whatever the match.
  func matches(_ secret: String, padding: PasswordCost? = nil) throws -> Bool {
    let candidate = try Self.derive(secret, salt: salt, cost: cost)
    if let padding { _ = try Self.derive(secret, salt: salt, cost: padding) }
    return zip(candidate, hash).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
      && candidate.count == hash.count
  }

  /// For the hash of a clear account's password itself: the sign-in secret a device draws from
  /// the password as key derivation version 3 says — the same master secret, this hash, so the
  /// server draws it without the password.
  var signInSecretOfPassword: String { SignInSecret.drawn(from: hash, purpose: "password") }

  /// For the hash of a clear account's password itself: the key derivation that reproduces it
  /// on a device (version 3: its salt and cost).
  var passwordDerivation: KeyDerivation {
    KeyDerivation(
      version: KeyDerivation.serverHashVersion, logRounds: Int(cost.logRounds),
      blockSize: Int(cost.blockSize), parallelism: Int(cost.parallelism), salt: salt)
  }

  private static func derive(_ password: String, salt: [UInt8], cost: PasswordCost) throws
    -> [UInt8]
  {
    if cost == plain { return PasswordHash(plainHashing: password, salt: salt).hash }
    let key = try KDF.Scrypt.deriveKey(
      from: Array(password.utf8), salt: salt, outputByteCount: hashCount,
      rounds: 1 << Int(cost.logRounds), blockSize: Int(cost.blockSize),
      parallelism: Int(cost.parallelism))
    return key.withUnsafeBytes { Array($0) }
  }
}

/// SHA-256, for token hashes and blob checks.
func sha256(_ bytes: some DataProtocol) -> [UInt8] {
  Array(SHA256.hash(data: bytes))
}
