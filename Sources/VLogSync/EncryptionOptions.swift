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
  /// No device sends a password, so a server that lies about it learns no more than from the
  /// truth: a secret stretched from the password at no less than the device's cost. A device
  /// that knows better — required encryption, or an account it signed in to encrypted before
  /// (its state file and credential store remember) — still refuses such an answer.
  public var isRequired: Bool

  /// Whether the device takes key derivation version 1 (a salt made from the user name, as
  /// encrypted accounts were made before version 2) from the server: only when the user asked
  /// to migrate such an account, whose password is then changed to move it to version 2.
  /// Without it, a server that names version 1 is refused: its guesses could be computed
  /// before the account existed.
  public var migratesVersionOne: Bool

  /// Encryption at `cost`, drawing from `random` (by default the system's generator),
  /// required or as the server says.
  public init(
    cost: KeyDerivationCost = .standard,
    random: @escaping @Sendable (Int) -> [UInt8] = systemRandomBytes,
    isRequired: Bool = true, migratesVersionOne: Bool = false
  ) {
    self.cost = cost
    self.random = random
    self.isRequired = isRequired
    self.migratesVersionOne = migratesVersionOne
  }

  /// Required encryption at the standard cost, with the system's generator.
  public static let standard = EncryptionOptions()

  /// Encrypted if the server says so before the first sign-in (`POST
  /// /v1/sessions/parameters`), at the standard cost: an app whose users have accounts of
  /// either kind. ``SyncAccount/createAccount()`` makes a clear account.
  public static let asTheServerSays = EncryptionOptions(isRequired: false)
}
