internal import Foundation
internal import LMDB
internal import Logging
internal import NIOCore
internal import PostgresNIO

/// The live channels' signals: `NOTIFY` in the transactions that commit them, `LISTEN` on a
/// connection of each server's own.
extension PostgresStorage {
  /// How often the `LISTEN` connection is asked a trivial query, so that one the network
  /// stopped answering is found and replaced (a closed one is found at once).
  static let listenHeartbeat: Duration = .seconds(10)

  /// Sends `signal` on ``LiveSignal/channel`` in the transaction of `connection`: PostgreSQL
  /// delivers it to every listening server when, and only if, the transaction commits.
  func notify(_ signal: LiveSignal, on connection: PostgresConnection) async throws {
    try await connection.query(
      "SELECT pg_notify(\(LiveSignal.channel), \(signal.payload))", logger: logger)
  }

  /// Listens on ``LiveSignal/channel`` and sends what it hears to ``liveFeed`` until
  /// cancelled. Each time the listening starts — the first time, and after a lost connection,
  /// waiting 1 second doubling up to 30 between attempts — it sends
  /// ``LiveSignal/resynchronize``: signals sent meanwhile were missed.
  func listenForSignals() async {
    var failures = 0
    while !Task.isCancelled {
      let started = Locked(false)
      do {
        try await client.withConnection { [self] connection in
          try await connection.listen(on: LiveSignal.channel) { notifications in
            started.withLock { $0 = true }
            liveFeed.send(.resynchronize)
            try await hear(notifications, on: connection)
          }
        }
      } catch {
        if !Task.isCancelled {
          logger.warning(
            "listening for live signals failed; listening again",
            metadata: ["error": "\(Self.describe(error))"])
        }
      }
      failures = started.withLock { $0 } ? 1 : failures + 1
      let wait = min(30.0, pow(2, Double(failures - 1))) * Double.random(in: 1...1.2)
      do { try await Task.sleep(for: .seconds(wait)) } catch { return }
    }
  }

  /// Sends the signals of `notifications` to the feed, and checks the connection every
  /// ``listenHeartbeat``; throws when either fails, after closing the connection.
  private func hear(
    _ notifications: PostgresNotificationSequence, on connection: PostgresConnection
  ) async throws {
    do {
      try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask { [liveFeed, logger] in
          for try await notification in notifications {
            if let signal = LiveSignal(payload: notification.payload) {
              liveFeed.send(signal)
            } else {
              logger.warning(
                "an unknown live signal was ignored",
                metadata: ["payload": "\(notification.payload.prefix(100))"])
            }
          }
          throw StorageError.unavailable("the database ended the LISTEN connection")
        }
        tasks.addTask { [self] in
          while true {
            try await Task.sleep(for: Self.listenHeartbeat)
            _ = try await withDeadline(databaseTimeout) { [logger] in
              try await connection.query("SELECT 1", logger: logger)
            }
          }
        }
        try await tasks.next()
        tasks.cancelAll()
      }
    } catch  where Task.isCancelled {
      // The server is stopping: the connection goes back as it is.
      throw error
    } catch {
      // A connection that stopped answering goes back to the pool closed, not to be reused:
      // closed before it is given back, so that no other call is handed it meanwhile.
      do { try await connection.close() } catch {}  // closed either way
      throw error
    }
  }
}
