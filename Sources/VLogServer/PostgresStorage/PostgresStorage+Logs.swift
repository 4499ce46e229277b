internal import NIOCore
internal import PostgresNIO
internal import VLog
internal import VLogWire

/// Event logs: a sync (push and page) under the account's head row, and repair.
extension PostgresStorage {
  func sync(
    account: UInt64, pushing events: [Event], comparingSealedValues: Bool, after cursor: UInt64,
    limit: Int, maximumBytes: Int, retention: (period: Duration?, now: Milliseconds)
  ) async throws -> SyncOutcome {
    let number = Int64(clamping: account)
    guard !events.isEmpty else {
      return try await withConnection { [self] connection in
        let head = try await self.head(of: number, on: connection, locking: false)
        return try await page(
          number, head: head, after: cursor, limit: (limit, maximumBytes), skipping: [],
          stored: 0, on: connection)
      }
    }
    return try await transaction { [self] connection in
      let head = try await self.head(of: number, on: connection, locking: true)
      guard cursor <= head.sequence else {
        throw StorageError.invalidCursor(cursor, head.sequence)
      }
      var pushed = Set<Stamp>()
      var fresh: [Event] = []
      for event in events where pushed.insert(event.stamp).inserted { fresh.append(event) }
      var writer = PostgresLogWriter(
        account: number, head: head, rules: logRules, now: retention.now, connection: connection,
        logger: logger)
      // What the appends look up and which events the log holds already (a retry), in one
      // statement after the head's lock: it sees every push that committed before.
      let known = try await writer.prefetch(for: fresh)
      // Held already: a retry, or another event under the same id, which is refused.
      if !known.isEmpty {
        let held = try await self.events(account: number, ids: Array(known), on: connection)
        let collisions = fresh.filter {
          guard let held = held[$0.stamp] else { return false }
          return !$0.isStored(as: held, comparingSealedValues: comparingSealedValues)
        }
        guard collisions.isEmpty else { throw StorageError.eventCollision(collisions.map(\.stamp)) }
      }
      fresh.removeAll { known.contains($0.stamp) }
      for event in fresh { try await writer.append(event) }
      try await writer.applyRetention(retention.period, now: retention.now)
      // The channels hear of the new head with the commit's own statement.
      _ = try await writer.commit(
        signaling: .head(account: account, sequence: writer.head.sequence))
      // A device that was up to date pulls only what it pushed, which a page skips: no
      // statement needed.
      if cursor == head.sequence, limit > 0 {
        return SyncOutcome(
          events: [], cursor: writer.head.sequence, more: false, stored: writer.appended,
          head: writer.head)
      }
      return try await page(
        number, head: writer.head, after: cursor, limit: (limit, maximumBytes),
        skipping: pushed, stored: writer.appended, on: connection)
    }
  }

  func heads(of accounts: [UInt64]) async throws -> [UInt64: UInt64] {
    let numbers = accounts.map { Int64(clamping: $0) }
    return try await withConnection { [self] connection in
      let rows = try await connection.query(
        "SELECT account, last_sequence FROM vlog_heads WHERE account = ANY(\(numbers))",
        logger: logger)
      var heads = Dictionary(accounts.map { ($0, UInt64(0)) }) { first, _ in first }
      for try await (account, sequence) in rows.decode((Int64, Int64).self) {
        guard let account = UInt64(exactly: account) else { continue }
        heads[account] = try PostgresLogWriter.sequence(sequence)
      }
      return heads
    }
  }

  /// The account's head; with `locking`, locks its row until the transaction ends (creating
  /// the row of an account that has none).
  func head(of account: Int64, on connection: PostgresConnection, locking: Bool)
    async throws -> Head
  {
    for _ in 0..<2 {
      let rows =
        locking
        ? try await connection.execute(LockedHeadQuery(account: account), logger: logger)
        : try await connection.execute(HeadQuery(account: account), logger: logger)
      for try await (sequence, digest) in rows {
        guard let digest = EventSetDigest(bytes: Array(digest.readableBytesView)) else {
          throw StorageError.damaged("account \(account): the head's digest is malformed")
        }
        return Head(sequence: try PostgresLogWriter.sequence(sequence), digest: digest)
      }
      guard locking else { return Head() }
      let created = try await connection.query(
        """
        INSERT INTO vlog_heads (account, last_sequence, digest)
        SELECT number, 0, \(ByteBuffer(bytes: EventSetDigest.empty.bytes))
        FROM vlog_accounts WHERE number = \(account)
        ON CONFLICT DO NOTHING RETURNING account
        """, logger: logger)
      var exists = false
      for try await _ in created { exists = true }
      // Deleted after the request's token was checked: it takes nothing more.
      guard exists else { throw StorageError.accountDeleted }
    }
    throw StorageError.damaged("account \(account) has no head")
  }

  /// The events after `cursor` up to the head: at most `limit.events` of them, and as many as
  /// fit in `limit.bytes` of encoded events, but at least one.
  func page(
    _ account: Int64, head: Head, after cursor: UInt64, limit: (events: Int, bytes: Int),
    skipping pushed: Set<Stamp>, stored: Int, on connection: PostgresConnection
  ) async throws -> SyncOutcome {
    guard cursor <= head.sequence else { throw StorageError.invalidCursor(cursor, head.sequence) }
    var events: [Event] = []
    var budget = PageBudget(events: limit.events, bytes: limit.bytes)
    var last = cursor
    // Rows come in batches, so a page of small events takes one round trip and a page of
    // large ones stops reading where the byte limit falls.
    var from = cursor
    let batch = max(1, min(limit.events, 5000))
    scan: while from < head.sequence, limit.events > 0 {
      let rows = try await connection.execute(
        PageQuery(
          account: account, after: Int64(clamping: from),
          through: Int64(clamping: head.sequence), limit: Int64(batch + pushed.count)),
        logger: logger)
      var read = 0
      for try await (sequence, record) in rows {
        read += 1
        let sequence = try PostgresLogWriter.sequence(sequence)
        guard sequence == from + 1 else {
          throw StorageError.damaged(
            "account \(account): event \(from + 1) is missing from the log")
        }
        from = sequence
        let event = try PostgresLogWriter.event(record: record, sequence: sequence)
        if !pushed.contains(event.stamp) {
          guard budget.take(size: record.readableBytes - LogRecord.headerSize) else { break scan }
          events.append(event)
        }
        last = sequence
        guard !budget.isFull else { break scan }
      }
      guard read > 0 else {
        throw StorageError.damaged("account \(account): event \(from + 1) is missing from the log")
      }
    }
    return SyncOutcome(
      events: events, cursor: last, more: last < head.sequence, stored: stored,
      head: head)
  }

  func compare(account: UInt64, with client: EventSetBuckets, limit: Int) async throws
    -> Comparison
  {
    let number = Int64(clamping: account)
    return try await transaction { [self] connection in
      try await connection.query(
        "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", logger: logger)
      let head = try await self.head(of: number, on: connection, locking: false)
      let rows = try await connection.query(
        "SELECT id FROM vlog_events WHERE account = \(number) ORDER BY id", logger: logger)
      var ids: [Stamp] = []
      var buckets = EventSetBuckets()
      for try await id in rows.decode(ByteBuffer.self) {
        let stamp = try PostgresLogWriter.stamp(id)
        ids.append(stamp)
        buckets.add(stamp)
      }
      let differing = buckets.differing(from: client)
      let wanted = Set(differing)
      var byBucket: [Int: [Stamp]] = [:]
      for id in ids where wanted.contains(EventSetBuckets.bucket(of: id)) {
        byBucket[EventSetBuckets.bucket(of: id), default: []].append(id)
      }
      return Comparison(
        differing: differing, ids: byBucket, limit: limit, eventSetDigest: head.digest)
    }
  }

  func events(account: UInt64, ids: [Stamp], maximumBytes: Int) async throws -> [Event] {
    try await withConnection { [self] connection in
      guard !ids.isEmpty else { return [] }
      let found = try await events(account: Int64(clamping: account), ids: ids, on: connection)
      var events: [Event] = []
      var budget = PageBudget(bytes: maximumBytes)
      for id in ids {
        guard let event = found[id] else { continue }
        guard budget.take(size: event.encoded().count) else { break }
        events.append(event)
      }
      return events
    }
  }

  /// The events of the account's log with these ids, by id; ids it does not hold are left out.
  private func events(account: Int64, ids: [Stamp], on connection: PostgresConnection)
    async throws -> [Stamp: Event]
  {
    let rows = try await connection.query(
      """
      SELECT sequence, record FROM vlog_events
      WHERE account = \(account) AND id = ANY(\(ids.map { ByteBuffer(bytes: $0.bytes) })::bytea[])
      """, logger: logger)
    var found: [Stamp: Event] = [:]
    for try await (sequence, record) in rows.decode((Int64, ByteBuffer).self) {
      let event = try PostgresLogWriter.event(
        record: record, sequence: try PostgresLogWriter.sequence(sequence))
      found[event.stamp] = event
    }
    return found
  }
}
