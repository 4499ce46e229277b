internal import Logging
internal import PostgresNIO
internal import VLog

/// Maintenance: retention across accounts, verification, and compaction.
extension PostgresStorage {
  /// Rewrites every table of VLog's with `VACUUM FULL`, so that the bytes of erased rows (a
  /// deleted account's, deleted notes' old values) leave the table files; what PostgreSQL's
  /// WAL and backups hold is theirs to expire. Each table is locked (`ACCESS EXCLUSIVE`: no
  /// reads, no writes) while it is rewritten, about as long as copying it once. Not bound by
  /// the database timeout.
  ///
  /// `VACUUM FULL` copies a deleted row that a transaction still open could read, so that
  /// transaction's snapshot would keep the row's bytes in the new files. That includes its
  /// own snapshot, which counts every transaction of the cluster, whatever its database, that
  /// was running when it began. Compaction therefore first waits for every transaction that
  /// began before it to end (of this database, and those of other databases that hold a
  /// transaction id), saying which it waits for every 10 seconds, and fails, having rewritten
  /// nothing, when one is still open after `patience`.
  ///
  /// - Returns: The tables' size (with their indexes and TOAST) before and after, in bytes.
  func compact(patience: Duration) async throws -> (bytesBefore: Int, bytesAfter: Int) {
    try await client.withConnection { [logger] connection in
      try await Self.waitForOlderSnapshots(on: connection, patience: patience, logger: logger)
      func size() async throws -> Int {
        let rows = try await connection.query(
          """
          SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
          FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname LIKE 'vlog\\_%'
          """, logger: logger)
        var total = 0
        for try await bytes in rows.decode(Int64.self) { total = Int(bytes) }
        return total
      }
      let before = try await size()
      let rows = try await connection.query(
        """
        SELECT tablename FROM pg_tables
        WHERE schemaname = current_schema() AND tablename LIKE 'vlog\\_%' ORDER BY tablename
        """, logger: logger)
      var tables: [String] = []
      for try await name in rows.decode(String.self) { tables.append(name) }
      for table in tables {
        // The names come from the catalogue and match vlog_[a-z_]*: safe to splice.
        guard table.utf8.allSatisfy({ $0 == UInt8(ascii: "_") || (97...122).contains($0) }) else {
          continue
        }
        try await connection.query(PostgresQuery(unsafeSQL: "VACUUM FULL \(table)"), logger: logger)
      }
      return (before, try await size())
    }
  }

  /// Waits until no transaction that began before the call is still running anywhere in the
  /// cluster, and no other session of this database holds a snapshot from before it, so that
  /// every row deleted before the call is dead to all of them and to the rewrite's own
  /// snapshot.
  private static func waitForOlderSnapshots(
    on connection: PostgresConnection, patience: Duration, logger: Logger
  ) async throws {
    // The first transaction id not yet begun when compaction starts.
    var start = ""
    for try await xid in try await connection.query(
      "SELECT pg_snapshot_xmax(pg_current_snapshot())::text", logger: logger
    ).decode(String.self) {
      start = xid
    }
    let clock = ContinuousClock()
    let began = clock.now
    var told = began - .seconds(10)
    while true {
      // A snapshot's xmin is the oldest transaction id still running in the whole cluster: a
      // new snapshot, the rewrite's own included, counts that transaction as running and so
      // keeps what it could see. age(x) counts back from the next transaction id: an older id
      // has a greater age. Sessions of other roles may hide their ids; the snapshot does not.
      let rows = try await connection.query(
        """
        SELECT pid, coalesce(datname, ''), coalesce(application_name, ''), coalesce(state, ''),
          coalesce(to_char(xact_start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), '')
        FROM pg_stat_activity
        WHERE pid <> pg_backend_pid()
          AND (age(backend_xid) > age(\(start)::xid)
            OR (datname = current_database() AND age(backend_xmin) > age(\(start)::xid)))
        UNION ALL
        SELECT 0, '', '', '', ''
        WHERE pg_snapshot_xmin(pg_current_snapshot()) < '\(start)'::xid8
          AND NOT EXISTS (
            SELECT FROM pg_stat_activity
            WHERE pid <> pg_backend_pid() AND age(backend_xid) > age(\(start)::xid))
        ORDER BY 1
        """, logger: logger)
      var sessions: [String] = []
      for try await (pid, database, application, state, since) in rows.decode(
        (Int32, String, String, String, String).self)
      {
        guard pid != 0 else {
          sessions.append("a transaction this role cannot see (another role's, or prepared)")
          continue
        }
        let name = application.isEmpty ? "" : " '\(application)'"
        let place = database.isEmpty ? "" : " of database \(database)"
        let when = since.isEmpty ? "" : ", in a transaction since \(since)"
        sessions.append(
          "pid \(pid)\(name)\(place) (\(state.isEmpty ? "state unknown" : state)\(when))")
      }
      guard !sessions.isEmpty else { return }
      let list = sessions.joined(separator: "; ")
      if clock.now - began >= patience {
        throw StorageError.unusable(
          """
          \(sessions.count) transaction(s) that began before compaction are still open after \
          \(patience), and VACUUM FULL would keep the deleted rows they can read: \(list). \
          Nothing was rewritten; end them (SELECT pg_terminate_backend(pid), or COMMIT \
          PREPARED) and compact again
          """)
      }
      if clock.now - told >= .seconds(10) {
        told = clock.now
        logger.notice(
          "compaction waits for transactions that began before it, which can still read deleted rows: \(list)"
        )
      }
      try await Task.sleep(for: .milliseconds(100))
    }
  }

  /// The numbers of every account with a log.
  func accountNumbers() async throws -> [Int64] {
    try await withConnection { [self] connection in
      let rows = try await connection.query(
        "SELECT account FROM vlog_heads ORDER BY account", logger: logger)
      var numbers: [Int64] = []
      for try await number in rows.decode(Int64.self) { numbers.append(number) }
      return numbers
    }
  }

  @discardableResult
  func applyRetention(_ retention: Duration?, now: Milliseconds) async throws -> Int {
    guard retention != nil else { return 0 }
    var redacted = 0
    for account in try await accountNumbers() {
      redacted += try await transaction { [self] connection in
        let head = try await self.head(of: account, on: connection, locking: true)
        var writer = PostgresLogWriter(
          account: account, head: head, rules: logRules, now: now, connection: connection,
          logger: logger)
        let count = try await writer.applyRetention(retention, now: now)
        _ = try await writer.commit()
        return count
      }
    }
    return redacted
  }

  func verify(retention: (period: Duration?, now: Milliseconds)) async throws -> ServerVerification
  {
    let accounts = try await accountNumbers()
    var faults: [VerificationFault] = []
    var events = 0
    for account in accounts {
      let (checked, found) = try await transaction { [self] connection in
        try await connection.query(
          "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", logger: logger)
        return try await PostgresVerifier(account: account, connection: connection, logger: logger)
          .verify(retention: retention)
      }
      events += checked
      faults += found.map {
        VerificationFault(kind: $0.kind, message: "account \(account): \($0.message)")
      }
    }
    return ServerVerification(accounts: accounts.count, events: events, faults: faults)
  }
}
