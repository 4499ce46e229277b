/// How a ``SyncAccount`` of an end-to-end encrypted account draws its keys: the cost of
/// stretching the password, and the source of random bytes.
public struct EncryptionOptions: Sendable {
  /// The cost of stretching the password (scrypt): ``KeyDerivationCost/standard`` but in
  /// tests. Every device of an account must use the same.
  public var cost: KeyDerivationCost
  /// Cryptographically secure random bytes: new keys of notes, content keys, recovery keys.
  public var random: @Sendable (Int) -> [UInt8]

  /// Encryption at `cost`, drawing from `random` (by default the system's generator).
  public init(
    cost: KeyDerivationCost = .standard,
    random: @escaping @Sendable (Int) -> [UInt8] = systemRandomBytes
  ) {
    self.cost = cost
    self.random = random
  }

  /// The standard cost and the system's generator.
  public static let standard = EncryptionOptions()
}
