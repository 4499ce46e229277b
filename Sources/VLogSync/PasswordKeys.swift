internal import Crypto
internal import Foundation
public import VLogWire
internal import _CryptoExtras

// The keys of an end-to-end encrypted account, made and used on its devices only.
//
// - The password is stretched with scrypt, under the account's random salt (`KeyDerivation`,
//   version 2; accounts made before it use a salt made from the user name, and clear accounts
//   whose server hashed the password itself reproduce that hash, version 3), into a master
//   secret, from which HKDF draws two unrelated values: the *sign-in secret*, which the device
//   sends in place of the password — for every account, clear ones too, so that no device ever
//   sends a password (the server hashes the secret as it hashed passwords) — and the private
//   half of the *password key pair*. Neither gives the other: the server, which
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

  /// The memory one derivation holds, in 128-byte blocks (`N × r`): p runs its passes one
  /// after another in the same memory, so it adds work, not memory.
  public var memory: Double {
    scryptWork(logRounds: logRounds, blockSize: blockSize, parallelism: 1)
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
  /// does) as `derivation` says: under the account's salt at its cost (version 2), under a
  /// salt made from the name (version 1, encrypted accounts made before), or as the server
  /// hashed a clear account's password before devices stretched it (version 3).
  ///
  /// The password is taken in Unicode's composed form (NFC), so the same characters typed on
  /// two devices give the same keys — but in version 3 as typed, as the server hashed it.
  ///
  /// - Throws: `WireError` for a derivation that is not one (`KeyDerivation/validated(_:)`).
  public init(username: String, password: String, derivation: KeyDerivation) throws {
    let valid = try derivation.validated()
    let name = Array(username.lowercased().utf8)
    let salt: [UInt8]
    var bytes = Array(password.precomposedStringWithCanonicalMapping.utf8)
    switch valid.version {
    case 1: salt = Array(SHA256.hash(data: Array("vlog account keys v1\u{0}".utf8) + name))
    case KeyDerivation.serverHashVersion:
      salt = valid.saltBytes
      bytes = Array(password.utf8)
    default:
      salt = Array(
        SHA256.hash(data: Array("vlog account keys v2\u{0}".utf8) + valid.saltBytes + [0] + name))
    }
    let master = try KDF.Scrypt.deriveKey(
      from: bytes, salt: salt, outputByteCount: 32, rounds: 1 << valid.logRounds,
      blockSize: valid.blockSize, parallelism: valid.parallelism)
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
    let seed = HKDF<SHA256>.expand(
      pseudoRandomKey: master, info: Array("vlog \(purpose) key pair".utf8), outputByteCount: 32)
    anchorBytes =
      HKDF<SHA256>.expand(
        pseudoRandomKey: master, info: Array("vlog \(purpose) anchor".utf8), outputByteCount: 32
      ).bytes
    signInSecret = SignInSecret.drawn(from: master.bytes, purpose: purpose)
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

  /// How a new password of an account whose passwords are stretched as `current` says is
  /// stretched: under the same salt (one salt per account, so that a new salt does not tell
  /// the server when passwords change, and devices that pinned it take the new password), at
  /// `cost` or the current cost where that is more; a new derivation when there is no
  /// current one of version 2 (a new account, or one moving from version 1 or 3).
  public static func forNewPassword(
    current: KeyDerivation?, cost: KeyDerivationCost, random: (Int) -> [UInt8]
  ) -> KeyDerivation {
    guard let current, current.version == currentVersion else {
      return .new(cost: cost, random: random)
    }
    var kept = current
    if cost.memory > current.cost.memory || cost.work > current.cost.work {
      kept.logRounds = Int(cost.logRounds)
      kept.blockSize = Int(cost.blockSize)
      kept.parallelism = Int(cost.parallelism)
    }
    return kept
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
  /// password with it: a server that names a weaker one would get a secret cheaper to guess
  /// from, and one that names a far costlier one would hold the device for minutes. Memory and
  /// work are judged apart, with p bounded, so that p cannot stand in for memory:
  ///
  /// - memory (`128 × r × N`) and work (`N × r × p`) at least `own`'s — half of them for
  ///   version 3, the server's own hash of a clear account's password, made at the server's
  ///   cost (OWASP's, half a device's) — and at most 4 times `own`'s; p at most 4;
  /// - version 1 (a salt from the name, the same on every server: guesses can be computed
  ///   before any account exists) only when `allowingVersionOne` says the user chose to
  ///   migrate such an account;
  /// - version 3 only for an account the answer says is clear;
  /// - once the device signed in with a derivation (`pinned`), the same salt and version at
  ///   no less memory and work; only a move from version 3 or 1 to version 2 (a password
  ///   changed on another device) is accepted with a new salt; a device that saw version 2
  ///   (`seenVersion`, from a state file older than pins) takes only version 2.
  ///
  /// Version 1 names no cost: the device uses `own`, as such accounts' devices did.
  ///
  /// - Throws: ``AccountKeyError`` saying what is refused.
  public func checked(
    own: KeyDerivationCost, encrypted: Bool, pinned: KeyDerivation? = nil,
    seenVersion: Int? = nil, allowingVersionOne: Bool = false
  ) throws(AccountKeyError) -> KeyDerivation {
    let valid: KeyDerivation
    do { valid = try validated() } catch {
      throw AccountKeyError("the server's key derivation is malformed: \(error)")
    }
    // A pin of version 3 or 1 takes the same version and salt, or a move to version 2.
    if let pinned, pinned.version != Self.currentVersion, valid.version != Self.currentVersion {
      guard valid.version == pinned.version, valid.salt == pinned.salt,
        valid.cost.memory >= pinned.cost.memory, valid.cost.work >= pinned.cost.work
      else {
        throw AccountKeyError(
          "the server names another key derivation (version \(valid.version), \(valid.cost)) "
            + "than the one this device signed in to the account with (version "
            + "\(pinned.version), \(pinned.cost)): refusing to stretch the password with it")
      }
    }
    if let pinned, pinned.version == Self.currentVersion {
      guard valid.version == pinned.version, valid.salt == pinned.salt else {
        throw AccountKeyError(
          "the server names another key derivation (version \(valid.version), another salt) "
            + "than the one this device signed in to the account with: refusing to stretch "
            + "the password with it")
      }
      guard valid.cost.memory >= pinned.cost.memory, valid.cost.work >= pinned.cost.work else {
        throw AccountKeyError(
          "the server names a key derivation weaker (\(valid.cost)) than the one this device "
            + "signed in to the account with (\(pinned.cost)): refusing to stretch the password "
            + "with it")
      }
    }
    // A device that saw version 2 for the account (a state file from before pins) takes no
    // other.
    if let seenVersion, seenVersion >= Self.currentVersion, valid.version != Self.currentVersion {
      throw AccountKeyError(
        "the server names key derivation version \(valid.version), but this device saw "
          + "version \(seenVersion) for the account: refusing to stretch the password with it")
    }
    switch valid.version {
    case 1:
      guard allowingVersionOne else {
        throw AccountKeyError(
          "the server names key derivation version 1 (a salt made from the name, which lets "
            + "guesses be computed before any account exists): a device takes it only to "
            + "migrate such an account, when the user asks for it")
      }
      return .versionOne(cost: own)
    case Self.serverHashVersion:
      guard !encrypted else {
        throw AccountKeyError(
          "the server names key derivation version 3, which only clear accounts have, for an "
            + "end-to-end encrypted account: refusing to stretch the password with it")
      }
      if let pinned, pinned.version != Self.serverHashVersion {
        throw AccountKeyError(
          "the server names key derivation version 3, but this device signed in to the "
            + "account with version \(pinned.version): refusing to stretch the password with it")
      }
    default: break
    }
    let cost = valid.cost
    let least = valid.version == Self.serverHashVersion ? 0.5 : 1
    guard cost.memory >= own.memory * least, cost.work >= own.work * least else {
      throw AccountKeyError(
        "the server names a key derivation weaker than this device accepts (\(cost), at "
          + "least \(own)\(least < 1 ? " at half its memory and work" : "")): refusing to send "
          + "a secret drawn with it")
    }
    guard cost.memory <= own.memory * 4, cost.work <= own.work * 4,
      cost.parallelism <= Self.parallelismBound
    else {
      throw AccountKeyError(
        "the server names a key derivation costlier than this device takes (\(cost): at most "
          + "4 times the memory and work of \(own), and p at most \(Self.parallelismBound)): "
          + "refusing to spend them on it")
    }
    return valid
  }

  /// The largest scrypt parallelism a device accepts from a server.
  public static let parallelismBound = 4
}
