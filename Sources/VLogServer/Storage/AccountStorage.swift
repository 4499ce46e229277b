internal import VLog
internal import VLogWire

/// The slice of ``ServerStorage`` that keeps accounts: their names, passwords and deletion,
/// and the server's secret.
protocol AccountStorage: Sendable {
  /// Creates an account: end-to-end encrypted if it has `encryption`, with that record of its
  /// keys.
  ///
  /// - Throws: ``StorageError`` `accountExists` if the name is taken.
  func createAccount(named name: String, password: PasswordHash, encryption: EncryptionRecord?)
    async throws

  /// The account stored under a normalised user name.
  func account(named name: String) async throws -> AccountRecord?

  /// An account, by number.
  func account(number: UInt64) async throws -> AccountRecord?

  /// Replaces an account's password and revokes every token of it but the one whose hash is
  /// `keeping`, in one transaction; for an encrypted account, replaces its keys' seal to the
  /// password with `seal` in the same transaction.
  ///
  /// - Throws: ``StorageError`` `accountDeleted` if the account no longer exists, `keysChanged`
  ///   if `seal` is not at the account's epoch (nothing changes then).
  func setPassword(
    account: UInt64, password: PasswordHash, keeping: [UInt8]?, seal: PasswordSeal.Checked?
  ) async throws

  /// 32 random bytes made the first time any instance asks and the same ever after, for every
  /// instance on this storage: what the answers about names no account has are drawn from,
  /// so that they are the same every time without telling the name is unknown.
  func serverSecret() async throws -> [UInt8]

  /// Replaces an account's password hash with the same password's hash at another cost (a
  /// rehash at sign-in), if the stored hash is still `current`: a password changed meanwhile
  /// wins. Tokens and keys are untouched.
  ///
  /// - Returns: Whether the hash was replaced.
  func rehashPassword(account: UInt64, from current: PasswordHash, to new: PasswordHash)
    async throws -> Bool

  /// Deletes an account and everything of it — events and their indexes, blobs, tokens, the
  /// account record — in one transaction. Pushes and uploads that were authorised before and
  /// arrive after it store nothing. The account's number is never given again.
  ///
  /// - Throws: ``StorageError`` `accountDeleted` if the account no longer exists.
  func deleteAccount(_ account: UInt64) async throws
}

extension AccountStorage {
  /// Replaces a clear account's password.
  func setPassword(account: UInt64, password: PasswordHash, keeping: [UInt8]?) async throws {
    try await setPassword(account: account, password: password, keeping: keeping, seal: nil)
  }

  /// Creates an account that is not encrypted.
  func createAccount(named name: String, password: PasswordHash) async throws {
    try await createAccount(named: name, password: password, encryption: nil)
  }
}

/// An account as storage keeps it.
struct AccountRecord: Sendable, Equatable {
  /// The account's number: what every key of its data starts with, never given again.
  var number: UInt64
  /// The normalised user name.
  var name: String
  /// The password's scrypt hash.
  var password: PasswordHash
}
