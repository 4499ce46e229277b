internal import VLog
internal import VLogWire

/// The slice of ``ServerStorage`` that keeps an end-to-end encrypted account's keys: the record
/// of its content keys and their links, and its notes' and attachments' keys.
protocol KeyStorage: Sendable {
  /// What an encrypted account's devices need of its keys; nil for an account that is not
  /// encrypted (or does not exist).
  func encryption(of account: UInt64) async throws -> EncryptionRecord?

  /// Stores keys of an encrypted account's notes and attachments, wrapped by its content key
  /// of `epoch`, in one transaction. An object that holds a key keeps it (its events are
  /// sealed by it); an object whose deletion the log holds takes none.
  ///
  /// - Returns: How many keys were stored.
  /// - Throws: ``StorageError`` `keysChanged` if the account's epoch is not `epoch` (or it is
  ///   not encrypted); nothing is stored then.
  func storeObjectKeys(_ keys: [Identifier: [UInt8]], account: UInt64, epoch: UInt64)
    async throws -> Int

  /// The keys of `objects` the account holds, and the epoch that wrapped them, read at once.
  func objectKeys(of objects: [Identifier], account: UInt64) async throws -> ObjectKeyPage

  /// The account's keys in order of the objects' ids, after `after`: at most `limit`.
  func objectKeys(account: UInt64, after: Identifier?, limit: Int) async throws -> ObjectKeyPage

  /// Rotates an encrypted account's content key, in one transaction: the next epoch's record
  /// and link (none for a re-keying), the new recovery key with `recoverySecret` (its secret
  /// hashed) if the rotation replaces it, and every object key replaced by the rotation's. A
  /// re-keying also signs out every session of the account but the one whose token hash is
  /// `keeping`, as a password change does.
  ///
  /// - Returns: The new record.
  /// - Throws: ``StorageError`` `keysChanged` if the account's epoch is not the rotation's, or
  ///   the rotation lacks the key of an object the account holds one of; nothing changes then.
  func rotateKeys(
    account: UInt64, by rotation: KeyRotation.Checked, recoverySecret: PasswordHash?,
    keeping: [UInt8]?
  ) async throws
    -> EncryptionRecord

  /// The links of an encrypted account's epochs after `epoch`, in order: each the next
  /// content key sealed by the one before.
  func links(account: UInt64, after epoch: UInt64) async throws -> [[UInt8]]
}

/// Object keys read from storage, with the epoch of the content key that wrapped them.
struct ObjectKeyPage: Sendable, Equatable {
  /// The account's epoch when they were read.
  var epoch: UInt64
  /// The keys, by object.
  var keys: [Identifier: [UInt8]]
  /// Whether a listing has more after these.
  var more = false
}
