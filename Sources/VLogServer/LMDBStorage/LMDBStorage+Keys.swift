internal import Foundation
internal import LMDB
internal import VLog
internal import VLogWire

/// An end-to-end encrypted account's keys, its notes' and attachments' keys and the links
/// between its keys' epochs, in `accountKeys`, `objectKeys` and `keyLinks`.
extension LMDBStorage {
  func encryption(of account: UInt64) async throws -> EncryptionRecord? {
    try read { transaction in try encryption(of: account, in: transaction) }
  }

  func encryption(
    of account: UInt64, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> EncryptionRecord? {
    guard let bytes = try transaction.value(forKey: BigEndian.bytes(account), in: accountKeys)
    else { return nil }
    guard var record = EncryptionRecord(decoding: bytes) else {
      throw StorageError.damaged("account \(account)'s keys are not a record of keys")
    }
    record.rotationDue = try transaction.containsValue(
      forKey: Self.rotationDueKey(account), in: accountKeys)
    return record
  }

  static func rotationDueKey(_ account: UInt64) -> [UInt8] {
    BigEndian.bytes(account) + Array("due".utf8)
  }

  /// The current epoch of an encrypted account.
  ///
  /// - Throws: ``StorageError`` `keysChanged` if it is not `expected` (or the account is not
  ///   encrypted).
  func checkEpoch(
    _ expected: UInt64, of account: UInt64, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> EncryptionRecord {
    guard let record = try encryption(of: account, in: transaction) else {
      throw StorageError.keysChanged("the account is not end-to-end encrypted")
    }
    guard record.epoch == expected else {
      throw StorageError.keysChanged(
        "the account's keys are at epoch \(record.epoch), not \(expected)")
    }
    return record
  }

  func storeObjectKeys(_ keys: [Identifier: [UInt8]], account: UInt64, epoch: UInt64)
    async throws -> Int
  {
    let log = eventLog(of: account)
    return try await onWriter { [self] in
      try write { transaction in
        _ = try checkEpoch(epoch, of: account, in: transaction)
        var stored = 0
        for (object, wrapped) in keys {
          let key = BigEndian.bytes(account) + object.bytes
          guard try !transaction.containsValue(forKey: key, in: objectKeys),
            try log.deletion(of: object, in: transaction) == nil
          else { continue }
          try transaction.put(wrapped, forKey: key, in: objectKeys)
          stored += 1
        }
        return stored
      }
    }
  }

  func objectKeys(of objects: [Identifier], account: UInt64) async throws -> ObjectKeyPage {
    try read { transaction in
      var page = ObjectKeyPage(
        epoch: try encryption(of: account, in: transaction)?.epoch ?? 0, keys: [:])
      for object in objects {
        if let wrapped = try transaction.value(
          forKey: BigEndian.bytes(account) + object.bytes, in: objectKeys)
        {
          page.keys[object] = wrapped
        }
      }
      return page
    }
  }

  func objectKeys(account: UInt64, after: Identifier?, limit: Int) async throws -> ObjectKeyPage {
    try read { transaction in
      var page = ObjectKeyPage(
        epoch: try encryption(of: account, in: transaction)?.epoch ?? 0, keys: [:])
      let prefix = BigEndian.bytes(account)
      let start = after.map { prefix + $0.bytes + [0] } ?? prefix
      try transaction.withEntries(in: objectKeys, range: .from(start)) { entries in
        while let (object, wrapped) = try entries.next({ key, value in
          (Self.object(ofKey: key, account: account), Array(value))
        }) {
          guard let object else { break }
          guard page.keys.count < limit else {
            page.more = true
            break
          }
          page.keys[object] = wrapped
        }
      }
      return page
    }
  }

  /// The object an `objectKeys` key names, nil past the account's keys.
  static func object(ofKey key: UnsafeRawBufferPointer, account: UInt64)
    -> Identifier?
  {
    guard key.count == 24, key.loadUnaligned(as: UInt64.self).bigEndian == account else {
      return nil
    }
    return Identifier(bytes: key, at: 8)
  }

  func rotateKeys(
    account: UInt64, by rotation: KeyRotation.Checked, recoverySecret: PasswordHash?,
    keeping: [UInt8]?
  ) async throws
    -> EncryptionRecord
  {
    let record = try await onWriter { [self] in
      try write { transaction in
        let record = try checkEpoch(rotation.epoch, of: account, in: transaction)
        let prefix = BigEndian.bytes(account)
        var held: [Identifier] = []
        try transaction.forEach(in: objectKeys, range: .prefix(prefix)) { key, _ in
          if let object = Self.object(ofKey: key, account: account) { held.append(object) }
        }
        for object in held {
          guard let wrapped = rotation.keys[object] else {
            throw StorageError.keysChanged(
              "the rotation lacks the key of object \(object), which the account holds")
          }
          try transaction.put(wrapped, forKey: prefix + object.bytes, in: objectKeys)
        }
        let next = record.rotated(by: rotation, recoverySecret: recoverySecret)
        // A re-keying has no link: nothing leads to its keys from the epochs before.
        if let link = rotation.link {
          try transaction.put(link, forKey: prefix + BigEndian.bytes(next.epoch), in: keyLinks)
        }
        try transaction.put(next.encoded, forKey: prefix, in: accountKeys)
        _ = try transaction.delete(forKey: Self.rotationDueKey(account), in: accountKeys)
        if rotation.link == nil {
          for hash in try tokenHashes(of: account, in: transaction) where hash != keeping {
            _ = try transaction.delete(forKey: hash, in: tokens)
            _ = try transaction.delete(forKey: prefix + hash, in: accountTokens)
          }
        }
        return next
      }
    }
    if rotation.link == nil {
      liveFeed.send(.passwordChanged(account: account, keeping: keeping))
    }
    return record
  }

  func links(account: UInt64, after epoch: UInt64) async throws -> [[UInt8]] {
    try read { transaction in
      var links: [[UInt8]] = []
      let prefix = BigEndian.bytes(account)
      guard epoch < .max else { return [] }
      try transaction.forEach(
        in: keyLinks,
        range: .from(prefix + BigEndian.bytes(epoch + 1), to: BigEndian.bytes(account + 1))
      ) { _, value in links.append(Array(value)) }
      return links
    }
  }
}
