/// How a ``SyncAccount`` treats end-to-end encryption: whether its account is known to be
/// encrypted or is as the server says, the cost of stretching a new password, and the source of
/// random bytes.
public struct EncryptionOptions: Sendable {
  /// The cost of stretching a new password (scrypt), and the least a device accepts from a
  /// server for an existing account's: ``KeyDerivationCost/standard`` but in tests.
  public var cost: KeyDerivationCost
  /// Cryptographically secure random bytes: new keys of notes, content keys, recovery keys,
  /// salts.
  public var random: @Sendable (Int) -> [UInt8]
  /// Whether the account is end-to-end encrypted for certain (an app that makes only such
  /// accounts), or is as the server says before the first sign-in.
  ///
  /// A server that lies about it gets the password of an account it says is clear: a device
  /// that knows better — required encryption, or an account it signed in to encrypted before
  /// (its state file and credential store remember) — refuses such an answer.
  public var isRequired: Bool

  /// Encryption at `cost`, drawing from `random` (by default the system's generator),
  /// required or as the server says.
  public init(
    cost: KeyDerivationCost = .standard,
    random: @escaping @Sendable (Int) -> [UInt8] = systemRandomBytes,
    isRequired: Bool = true
  ) {
    self.cost = cost
    self.random = random
    self.isRequired = isRequired
  }

  /// Required encryption at the standard cost, with the system's generator.
  public static let standard = EncryptionOptions()

  /// Encrypted if the server says so before the first sign-in (`POST
  /// /v1/sessions/parameters`), at the standard cost: an app whose users have accounts of
  /// either kind. ``SyncAccount/createAccount()`` makes a clear account.
  public static let asTheServerSays = EncryptionOptions(isRequired: false)
}
