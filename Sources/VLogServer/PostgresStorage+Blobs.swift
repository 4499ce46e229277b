internal import NIOCore
internal import PostgresNIO
internal import VLog

/// Attachment bytes.
extension PostgresStorage {
  func storeBlob(_ bytes: [UInt8], hash: BlobHash, account: UInt64) async throws -> Bool {
    try await withConnection { [self] connection in
      do {
        let rows = try await connection.query(
          """
          INSERT INTO vlog_blobs (account, hash, bytes)
          VALUES (\(Int64(clamping: account)), \(ByteBuffer(bytes: hash.bytes)), \(ByteBuffer(bytes: bytes)))
          ON CONFLICT DO NOTHING RETURNING account
          """, logger: logger)
        var stored = false
        for try await _ in rows { stored = true }
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

  func missingBlobs(_ hashes: [BlobHash], account: UInt64) async throws -> [BlobHash] {
    guard !hashes.isEmpty else { return [] }
    return try await withConnection { [self] connection in
      let rows = try await connection.query(
        """
        SELECT hash FROM vlog_blobs
        WHERE account = \(Int64(clamping: account))
          AND hash = ANY(\(hashes.map { ByteBuffer(bytes: $0.bytes) }))
        """, logger: logger)
      var held = Set<[UInt8]>()
      for try await hash in rows.decode(ByteBuffer.self) {
        held.insert(Array(hash.readableBytesView))
      }
      return hashes.filter { !held.contains($0.bytes) }
    }
  }
}
