internal import NIOCore
internal import PostgresNIO
internal import VLog

/// Attachment bytes.
extension PostgresStorage {
  func storeBlob(_ bytes: [UInt8], hash: BlobHash, account: UInt64, now: Milliseconds) async throws
    -> Bool
  {
    try await withConnection { [self] connection in
      do {
        // A released blob stored again waits a whole grace period again.
        let rows = try await connection.query(
          """
          INSERT INTO vlog_blobs (account, hash, bytes)
          VALUES (\(Int64(clamping: account)), \(ByteBuffer(bytes: hash.bytes)), \(ByteBuffer(bytes: bytes)))
          ON CONFLICT (account, hash) DO UPDATE SET released_at = \(Int64(clamping: now.rawValue))
            WHERE vlog_blobs.released_at IS NOT NULL
          RETURNING xmax = 0
          """, logger: logger)
        var stored = false
        for try await inserted in rows.decode(Bool.self) { stored = inserted }
        return stored
      } catch {
        throw Self.deletedAccount(error)
      }
    }
  }

  func blob(_ hash: BlobHash, account: UInt64) async throws -> [UInt8]? {
    try await withConnection { [self] connection in
      let rows = try await connection.query(
        """
        SELECT bytes FROM vlog_blobs
        WHERE account = \(Int64(clamping: account)) AND hash = \(ByteBuffer(bytes: hash.bytes))
        """, logger: logger)
      for try await bytes in rows.decode(ByteBuffer.self) { return Array(bytes.readableBytesView) }
      return nil
    }
  }

  func missingBlobs(_ hashes: [BlobHash], account: UInt64, releasedBefore: Milliseconds)
    async throws
    -> [BlobHash]
  {
    guard !hashes.isEmpty else { return [] }
    return try await withConnection { [self] connection in
      let rows = try await connection.query(
        """
        SELECT hash FROM vlog_blobs
        WHERE account = \(Int64(clamping: account))
          AND hash = ANY(\(hashes.map { ByteBuffer(bytes: $0.bytes) }))
          AND (released_at IS NULL OR released_at >= \(Int64(clamping: releasedBefore.rawValue)))
        """, logger: logger)
      var held = Set<[UInt8]>()
      for try await hash in rows.decode(ByteBuffer.self) {
        held.insert(Array(hash.readableBytesView))
      }
      return hashes.filter { !held.contains($0.bytes) }
    }
  }

  func sweepReleasedBlobs(releasedBefore: Milliseconds) async throws -> Int {
    try await transaction { [self] connection in
      let cutoff = Int64(clamping: releasedBefore.rawValue)
      let rows = try await connection.query(
        """
        WITH removed AS (
          DELETE FROM vlog_blobs b
          WHERE b.released_at < \(cutoff) AND NOT EXISTS (
            SELECT 1 FROM vlog_blob_references r WHERE r.account = b.account AND r.hash = b.hash)
          RETURNING 1
        ), kept AS (
          UPDATE vlog_blobs SET released_at = NULL
          WHERE released_at < \(cutoff) AND EXISTS (
            SELECT 1 FROM vlog_blob_references r
            WHERE r.account = vlog_blobs.account AND r.hash = vlog_blobs.hash)
        )
        SELECT count(*) FROM removed
        """, logger: logger)
      var removed = 0
      for try await count in rows.decode(Int64.self) { removed = Int(count) }
      return removed
    }
  }
}
