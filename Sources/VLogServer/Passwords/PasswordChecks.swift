internal import CoreMetrics
internal import Hummingbird
internal import LMDB
internal import NIOCore
internal import NIOPosix
internal import VLog
internal import VLogWire

/// What every check of a password (or a recovery key's secret) goes through: hashed off the
/// event loops, at most as many at once as the throttle allows, its failures counted, and an
/// unknown name checked against a decoy so the answer's timing tells nothing.
struct PasswordChecks: Sendable {
  let accounts: any AccountStorage
  /// Tells an encrypted account, whose record hashes a secret, from a clear account made
  /// before devices stretched passwords, whose record hashes the password itself.
  let keys: any KeyStorage
  let throttle: PasswordThrottle
  /// The cost new passwords are hashed at.
  let cost: PasswordCost
  /// A hash computed for unknown user names, so that signing in as one takes as long as a wrong
  /// password. It is at the server's cost: a check of a record hashed at a lower one (before
  /// the operator raised it) is padded up to it.
  let decoy: PasswordHash
  let randomBytes: @Sendable (_ count: Int) -> [UInt8]
  let metrics: ServerMetrics

  /// The scrypt hash of a password (or a sign-in secret), under a new salt, at the server's
  /// cost: one of the password checks the throttle allows at once.
  func hash(_ secret: String, derivation: KeyDerivation? = nil) async throws -> PasswordHash {
    let salt = randomBytes(PasswordHash.saltCount)
    let cost = self.cost
    return try await throttle.hash(for: []) {
      try await Self.offLoop {
        try PasswordHash(hashing: secret, cost: cost, salt: salt, derivation: derivation)
      }
    }
  }

  /// Checks what a device sent to sign in to `account` (nil: a name no account has, checked
  /// against the decoy), throttled by `subjects` as ``check(_:against:subjects:)`` is.
  ///
  /// What a device sends is the secret drawn from the password, which the record hashes. A
  /// clear account made before devices stretched passwords has the hash of the password
  /// itself: it takes the secret drawn from that hash (key derivation version 3, which the
  /// server names for it), and the first time it does, the record is replaced — by the hash
  /// of `upgrade`'s secret under its version 2 derivation, which the device sends with it, so
  /// that the hash kept before (and any copy of it in a backup) signs in no more; without one,
  /// by the hash of the version 3 secret. Until then it also takes the password itself, which
  /// devices of earlier versions send; from then on, only a secret.
  ///
  /// - Returns: The account's hash after the check (the new one when it was replaced); nil
  ///   when the check failed.
  func signIn(
    _ secret: String, to account: AccountRecord?, upgrade: SecretUpgrade? = nil,
    subjects: [PasswordThrottle.Subject]
  ) async throws -> PasswordHash? {
    var hashesPassword = false
    if let account, account.password.derivation == nil {
      hashesPassword = try await keys.encryption(of: account.number) == nil
    }
    let hash = account?.password ?? decoy
    let padding = hash.cost.padding(upTo: decoy.cost)
    let (matches, drawn) = try await throttle.hash(for: subjects) { [hashesPassword] in
      try await Self.offLoop {
        let drawn =
          hashesPassword && SignInSecret.equalInConstantTime(hash.signInSecretOfPassword, secret)
        return (try hash.matches(secret, padding: padding) || drawn, drawn)
      }
    }
    let succeeded = account != nil && matches
    try await throttle.record(
      subjects, succeeded: succeeded, clearing: subjects.prefix(1).map(\.key))
    guard let account, succeeded else {
      metrics.signInFailures.increment()
      return nil
    }
    guard drawn else { return account.password }
    let replaced =
      if let upgrade {
        try await self.hash(upgrade.secret, derivation: upgrade.keyDerivation)
      } else {
        try await self.hash(secret, derivation: account.password.passwordDerivation)
      }
    return try await accounts.rehashPassword(
      account: account.number, from: account.password, to: replaced)
      ? replaced : account.password
  }

  /// The plain hash (``PasswordHash/plain``) of a recovery key's sign-in secret, under a new
  /// salt: 256 random bits need no stretching.
  func hashRecoverySecret(_ secret: String) -> PasswordHash {
    PasswordHash(plainHashing: secret, salt: randomBytes(PasswordHash.saltCount))
  }

  /// What a recovery secret is checked against for a name with no encrypted account: a plain
  /// hash, as a recovery key's is.
  static let recoveryDecoy = PasswordHash(
    plainHashing: "decoy", salt: [UInt8](repeating: 0, count: PasswordHash.saltCount))

  /// Checks `secret` against `stored` (`decoy` — by default the password decoy — when there is
  /// nothing to check against), throttled by `subjects`: a failure counts against each, a
  /// success forgets the first's.
  ///
  /// - Returns: Whether it matched a real hash; a failure is counted in the metrics.
  func check(
    _ secret: String, against stored: PasswordHash?, decoy: PasswordHash? = nil,
    subjects: [PasswordThrottle.Subject]
  ) async throws -> Bool {
    let decoy = decoy ?? self.decoy
    let hash = stored ?? decoy
    let padding = hash.cost.padding(upTo: decoy.cost)
    let matches = try await throttle.hash(for: subjects) {
      try await Self.offLoop { try hash.matches(secret, padding: padding) }
    }
    let succeeded = stored != nil && matches
    try await throttle.record(
      subjects, succeeded: succeeded, clearing: subjects.prefix(1).map(\.key))
    if !succeeded { metrics.signInFailures.increment() }
    return succeeded
  }

  /// Checks an account's password again before a change that needs it (the caller holds a
  /// token of it), throttled by the account's own failed checks and the address's: not by the
  /// name's, which anyone can make fail, so that nobody keeps the account's holder from
  /// changing the password or re-keying.
  ///
  /// - Throws: ``ServerError`` `wrongPassword` (403) if it does not match.
  func confirm(_ password: String, of account: UInt64, _ context: ServerContext) async throws {
    guard let stored = try await accounts.account(number: account) else {
      throw ServerError.unauthorized
    }
    let subjects =
      [(ThrottleKey(kind: .account, value: String(account)), ThrottleBudget.name)]
      + Self.addressSubject(context, .address)
    guard try await signIn(password, to: stored, subjects: subjects) != nil else {
      throw ServerError.wrongPassword
    }
  }

  /// The request's address as a throttle subject judged by `budget`, or none for a
  /// connection without an IP address.
  static func addressSubject(_ context: ServerContext, _ budget: ThrottleBudget)
    -> [PasswordThrottle.Subject]
  {
    guard let address = context.clientAddress else { return [] }
    let kind: ThrottleKey.Kind = budget == .recoveryAddress ? .recoveryAddress : .address
    return [(ThrottleKey(kind: kind, value: ThrottleKey.addressPrefix(address)), budget)]
  }

  /// Runs slow work (password hashing) on NIO's thread pool, off the event loops.
  static func offLoop<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await NIOThreadPool.singleton.runIfActive(work)
  }
}

/// The storage's secret (``AccountStorage/serverSecret()``), read once and kept.
final class ServerSecret: Sendable {
  private let accounts: any AccountStorage
  private let cache = Locked<[UInt8]?>(nil)

  init(_ accounts: any AccountStorage) { self.accounts = accounts }

  /// The secret.
  func value() async throws -> [UInt8] {
    if let secret = cache.withLock({ $0 }) { return secret }
    let secret = try await accounts.serverSecret()
    cache.withLock { $0 = secret }
    return secret
  }
}
