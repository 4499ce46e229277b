internal import VLog
internal import VLogWire

/// The slice of ``ServerStorage`` that keeps each account's attachment bytes, by hash.
protocol BlobStorage: Sendable {
  /// Stores an account's blob. Returns false if it was already stored; a released one then
  /// waits a whole grace period again from `now` (wall-clock milliseconds).
  func storeBlob(_ bytes: [UInt8], hash: BlobHash, account: UInt64, now: Milliseconds) async throws
    -> Bool

  /// An account's blob.
  func blob(_ hash: BlobHash, account: UInt64) async throws -> [UInt8]?

  /// The hashes among `hashes` whose blobs the account does not hold, or holds released
  /// (no event uses them) since before `releasedBefore`, in the order given.
  func missingBlobs(_ hashes: [BlobHash], account: UInt64, releasedBefore: Milliseconds)
    async throws
    -> [BlobHash]

  /// Removes the blobs released before `releasedBefore` (wall-clock milliseconds) that no
  /// event uses again, and keeps, no longer released, those an event uses again.
  ///
  /// - Returns: The number of blobs removed.
  func sweepReleasedBlobs(releasedBefore: Milliseconds) async throws -> Int
}
