internal import PostgresNIO
internal import Synchronization

/// Connections: transactions, the deadline for getting a connection, and what a failure means
/// (the database unreachable, the account deleted).
extension PostgresStorage {
  /// Runs `body` in a transaction on one connection: committed if it returns, rolled back if
  /// it throws (its error is what this throws).
  func transaction<R: Sendable>(
    _ body: @escaping @Sendable (PostgresConnection) async throws -> R
  ) async throws -> R {
    try await withConnection { [self] connection in
      try await connection.query("BEGIN", logger: logger)
      do {
        let result = try await body(connection)
        try await connection.query("COMMIT", logger: logger)
        return result
      } catch {
        // The body's error is the one to report; a connection whose rollback fails is closed
        // by the pool, which ends the transaction as well.
        _ = try? await connection.query("ROLLBACK", logger: logger)
        throw error
      }
    }
  }

  /// How long a request waits for a connection before it is answered 503 `unavailable`.
  static let acquireTimeout: Duration = .seconds(5)

  /// Runs `body` on a connection of the pool. Fails with ``StorageError`` `unavailable` when no
  /// connection can be had within ``acquireTimeout`` (the database is down or unreachable) or
  /// the connection fails, so that a request during an outage is answered at once and
  /// retried, instead of waiting for the pool's reconnection backoff.
  func withConnection<R: Sendable>(
    _ body: @escaping @Sendable (PostgresConnection) async throws -> R
  ) async throws -> R {
    let acquired = Flag()
    do {
      return try await withThrowingTaskGroup(of: R?.self) { [client] group in
        group.addTask {
          try await client.withConnection { connection in
            acquired.set()
            return try await body(connection)
          }
        }
        group.addTask {
          // Cancelled (not an error) when the body finishes first.
          try? await Task.sleep(for: Self.acquireTimeout)
          guard Task.isCancelled || acquired.isSet else {
            throw StorageError.unavailable(
              "the database did not answer within \(Self.acquireTimeout)")
          }
          return nil
        }
        while let result = try await group.next() {
          if let value = result {
            group.cancelAll()
            return value
          }
        }
        throw StorageError.unavailable("the database did not answer")
      }
    } catch {
      throw Self.availability(error)
    }
  }

  /// A foreign-key violation (SQLSTATE 23503) means the account was deleted after the
  /// request's token was checked: answered like a revoked token.
  static func deletedAccount(_ error: any Error) -> any Error {
    guard let psql = error as? PSQLError, psql.serverInfo?[.sqlState] == "23503" else {
      return error
    }
    return StorageError.accountDeleted
  }

  /// `error`, or ``StorageError`` `unavailable` if it says the database cannot be reached:
  /// a connection that failed or closed, or PostgreSQL's connection, operator-intervention and
  /// resource errors (SQLSTATE classes 08, 57, 53) and an unknown or closed database.
  static func availability(_ error: any Error) -> any Error {
    guard let psql = error as? PSQLError else { return error }
    switch psql.code {
    case .connectionError, .serverClosedConnection, .clientClosedConnection, .poolClosed,
      .uncleanShutdown:
      return StorageError.unavailable("the database connection failed: \(psql.code)")
    default:
      break
    }
    if let state = psql.serverInfo?[.sqlState],
      ["08", "57", "53"].contains(String(state.prefix(2))) || state == "3D000"
        || state == "55000"
    {
      return StorageError.unavailable(
        "the database refused: \(psql.serverInfo?[.message] ?? state)")
    }
    return error
  }

  /// What went wrong talking to the database, for a message: PostgreSQL's own message when it
  /// sent one.
  static func describe(_ error: any Error) -> String {
    if let error = error as? StorageError { return error.message }
    if let error = error as? PSQLError {
      if let message = error.serverInfo?[.message] { return message }
      return "\(error.code)"
    }
    return "\(error)"
  }
}

/// Runs `body`, failing with a timeout if it has not finished after `limit`.
func withDeadline<R: Sendable>(
  _ limit: Duration, _ body: @escaping @Sendable () async throws -> R
) async throws -> R {
  try await withThrowingTaskGroup(of: R?.self) { group in
    group.addTask { try await body() }
    group.addTask {
      try await Task.sleep(for: limit)
      return nil
    }
    defer { group.cancelAll() }
    guard let first = try await group.next(), let value = first else {
      throw StorageError.unavailable("the database did not answer within \(limit)")
    }
    return value
  }
}

/// A flag set once, read from other tasks.
final class Flag: Sendable {
  private let value = Atomic<Bool>(false)
  func set() { value.store(true, ordering: .releasing) }
  var isSet: Bool { value.load(ordering: .acquiring) }
}
