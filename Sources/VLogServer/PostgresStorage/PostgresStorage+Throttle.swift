internal import NIOCore
internal import PostgresNIO
internal import VLog

/// Throttle counters in `vlog_throttle`, shared by every server of the database. A count is
/// one upsert per key, so servers counting at once never lose a count.
extension PostgresStorage {
  func throttleCounts(_ keys: [[UInt8]]) async throws -> [[UInt8]: ThrottleCount] {
    guard !keys.isEmpty else { return [:] }
    return try await withConnection { [self] connection in
      let rows = try await connection.query(
        """
        SELECT key, count, first, last FROM vlog_throttle
        WHERE key = ANY(\(keys.map { ByteBuffer(bytes: $0) })::bytea[])
        """, logger: logger)
      var counts: [[UInt8]: ThrottleCount] = [:]
      for try await (key, count, first, last) in rows.decode(
        (ByteBuffer, Int64, Int64, Int64).self)
      {
        counts[Array(buffer: key)] = ThrottleCount(
          count: UInt64(clamping: count), first: UInt64(clamping: first),
          last: UInt64(clamping: last))
      }
      return counts
    }
  }

  func countThrottle(_ keys: [(key: [UInt8], window: UInt64)], now: Milliseconds) async throws {
    guard !keys.isEmpty else { return }
    let time = Int64(clamping: now.rawValue)
    _ = try await withConnection { [self] connection in
      // One statement: every key counts, or none does.
      try await connection.query(
        """
        INSERT INTO vlog_throttle AS t (key, count, first, last, span)
        SELECT key, 1, \(time), \(time), span
        FROM UNNEST(\(keys.map { ByteBuffer(bytes: $0.key) })::bytea[],
          \(keys.map { Int64(clamping: $0.window) })::bigint[]) AS u(key, span)
        ON CONFLICT (key) DO UPDATE SET
          count = CASE WHEN t.first + EXCLUDED.span > \(time) THEN t.count + 1 ELSE 1 END,
          first = CASE WHEN t.first + EXCLUDED.span > \(time) THEN t.first ELSE \(time) END,
          last = \(time), span = EXCLUDED.span
        """, logger: logger)
    }
  }

  func clearThrottle(_ keys: [[UInt8]]) async throws {
    guard !keys.isEmpty else { return }
    _ = try await withConnection { [self] connection in
      try await connection.query(
        "DELETE FROM vlog_throttle WHERE key = ANY(\(keys.map { ByteBuffer(bytes: $0) })::bytea[])",
        logger: logger)
    }
  }

  func sweepThrottles(firstBefore: Milliseconds) async throws -> Int {
    try await withConnection { [self] connection in
      let rows = try await connection.query(
        "DELETE FROM vlog_throttle WHERE first < \(Int64(clamping: firstBefore.rawValue)) RETURNING 1",
        logger: logger)
      var removed = 0
      for try await _ in rows { removed += 1 }
      return removed
    }
  }
}
