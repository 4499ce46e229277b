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
}

/// A password's scrypt hash with its salt and cost, as stored in an account record.
struct PasswordHash: Sendable, Hashable {
  var cost: PasswordCost
  var salt: [UInt8]
  var hash: [UInt8]

  static let saltCount = 16
  static let hashCount = 32

  /// Hashes `password` with a new salt.
  init(hashing password: String, cost: PasswordCost, salt: [UInt8]) throws {
    self.cost = cost
    self.salt = salt
    self.hash = try Self.derive(password, salt: salt, cost: cost)
  }

  init?(decoding bytes: some Collection<UInt8>) {
    let bytes = Array(bytes)
    guard bytes.count == 3 + Self.saltCount + Self.hashCount else { return nil }
    cost = PasswordCost(logRounds: bytes[0], blockSize: bytes[1], parallelism: bytes[2])
    salt = Array(bytes[3..<(3 + Self.saltCount)])
    hash = Array(bytes[(3 + Self.saltCount)...])
  }

  var encoded: [UInt8] {
    [cost.logRounds, cost.blockSize, cost.parallelism] + salt + hash
  }

  /// Whether `password` hashes to this hash, compared in constant time.
  func matches(_ password: String) throws -> Bool {
    let candidate = try Self.derive(password, salt: salt, cost: cost)
    return zip(candidate, hash).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
      && candidate.count == hash.count
  }

  private static func derive(_ password: String, salt: [UInt8], cost: PasswordCost) throws
    -> [UInt8]
  {
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
