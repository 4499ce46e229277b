internal import PostgresNIO
internal import VLog

/// Maintenance: retention across accounts, and verification.
extension PostgresStorage {
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
  func applyRetention(_ retention: Duration?, now: UInt64) async throws -> Int {
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

  func verify(retention: (period: Duration?, now: UInt64)) async throws -> ServerVerification {
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
