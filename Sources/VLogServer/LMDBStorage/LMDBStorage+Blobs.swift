internal import Foundation
internal import LMDB
internal import VLog
internal import VLogWire

/// Attachments' blobs, in `blobs`, and those no event uses any more, in `releasedBlobs`, until
/// their grace period ends.
extension LMDBStorage {
  // MARK: - Blobs

  /// Stores an account's blob. Returns false if it was already stored; a released one then
  /// waits a whole grace period again from `now`.
  func storeBlob(_ bytes: [UInt8], hash: BlobHash, account: UInt64, now: Milliseconds) async throws
    -> Bool
  {
    try await onWriter { [self] in
      try write { transaction in
        _ = try name(of: account, in: transaction)
        let key = BigEndian.bytes(account) + hash.bytes
        guard try !transaction.containsValue(forKey: key, in: blobs) else {
          if try transaction.containsValue(forKey: key, in: releasedBlobs) {
            try transaction.put(BigEndian.bytes(now.rawValue), forKey: key, in: releasedBlobs)
          }
          return false
        }
        try transaction.put(bytes, forKey: key, in: blobs)
        return true
      }
    }
  }

  /// An account's blob.
  func blob(_ hash: BlobHash, account: UInt64) async throws -> [UInt8]? {
    try read { transaction in
      try transaction.value(forKey: BigEndian.bytes(account) + hash.bytes, in: blobs)
    }
  }

  /// The hashes whose blobs the account does not hold, or released before `releasedBefore`.
  func missingBlobs(_ hashes: [BlobHash], account: UInt64, releasedBefore: Milliseconds)
    async throws
    -> [BlobHash]
  {
    try read { transaction in
      let prefix = BigEndian.bytes(account)
      return try hashes.filter { hash in
        let key = prefix + hash.bytes
        guard try transaction.containsValue(forKey: key, in: blobs) else { return true }
        let released = try transaction.withValue(forKey: key, in: releasedBlobs) {
          $0.flatMap { BigEndian.read(UInt64.self, from: Array($0)) }
        }
        return released.map { $0 < releasedBefore.rawValue } ?? false
      }
    }
  }

  /// Removes the blobs released before `releasedBefore` that no event uses again, and forgets
  /// the release of those an event uses again.
  ///
  /// - Returns: The number of blobs removed.
  func sweepReleasedBlobs(releasedBefore: Milliseconds) async throws -> Int {
    try await onWriter { [self] in
      try write { transaction in
        var due: [[UInt8]] = []
        try transaction.forEach(in: releasedBlobs) { key, value in
          guard let released = BigEndian.read(UInt64.self, from: Array(value)),
            released < releasedBefore.rawValue
          else { return }
          due.append(Array(key))
        }
        var removed = 0
        for key in due {
          _ = try transaction.delete(forKey: key, in: releasedBlobs)
          guard key.count == 40, let account = BigEndian.read(UInt64.self, from: Array(key[..<8])),
            let hash = BlobHash(bytes: Array(key[8...])),
            try !eventLog(of: account).references(hash, in: transaction)
          else { continue }
          if try transaction.delete(forKey: key, in: blobs) { removed += 1 }
        }
        return removed
      }
    }
  }
}
