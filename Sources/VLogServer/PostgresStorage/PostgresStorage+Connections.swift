internal import LMDB
internal import NIOCore
internal import NIOPosix
internal import PostgresNIO

/// Connections: transactions, the deadline for getting a connection, and what a failure means
/// (the database unreachable, the account deleted).
extension PostgresStorage {
  /// Runs `body` in a transaction on one connection: committed if it returns, rolled back if
  /// it throws (its error is what this throws).
  func transaction<R: Sendable>(
    timeout: Duration? = nil, _ body: @escaping @Sendable (PostgresConnection) async throws -> R
  ) async throws -> R {
    try await withConnection(timeout: timeout) { [self] connection in
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

  /// Runs `body` on a connection of the pool, within `timeout` (nil: ``databaseTimeout``).
  ///
  /// Fails with ``StorageError`` `unavailable` when no connection can be had within
  /// ``connectionWait`` (the database is down or unreachable), when the connection fails, or
  /// when the whole call has not finished within its timeout (a database that stopped
  /// answering, or a network that drops its packets). Past the deadline, the connection is
  /// closed — the pool discards it, and the database ends its transaction — and the call
  /// fails at once, without waiting for `body`, which may be waiting on an answer that never
  /// comes.
  func withConnection<R: Sendable>(
    timeout: Duration? = nil, _ body: @escaping @Sendable (PostgresConnection) async throws -> R
  ) async throws -> R {
    let held = HeldConnection()
    let total = timeout ?? databaseTimeout
    let acquire = min(connectionWait, total)
    do {
      let acquiring: @Sendable () -> String? = {
        held.isAcquired ? nil : "no database connection within \(acquire)"
      }
      let expire: @Sendable (String) -> String = { reason in
        held.expire()
        return "\(reason); its connection was closed"
      }
      let work: @Sendable () async throws -> R = { [client] in
        try await client.withConnection { connection in
          try held.acquired(connection)
          return try await body(connection)
        }
      }
      return try await withDeadline(
        total, checkpoints: [(acquire, acquiring)], expire: expire, work)
    } catch let error as StorageError {
      throw error
    } catch is CancellationError {
      throw CancellationError()
    } catch  where !held.isAcquired {
      // The pool gave no connection: whatever its error says (connections that keep failing
      // trip its circuit breaker, an error of a module of its own), the database cannot be
      // reached.
      throw StorageError.unavailable("no database connection: \(Self.describe(error))")
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

/// Runs `body` in a task of its own and returns what it returns, or fails with
/// ``StorageError`` `unavailable` when it has not finished after `limit`, or when a
/// checkpoint's check (run when its time has passed) gives a reason to stop.
///
/// On failure, `expire` runs first (to make `body` fail soon, for example by closing its
/// connection) and gives the error's message; the call does not wait for `body`, whose task is
/// cancelled. A task group would wait for it, and so would hang as long as the database does.
func withDeadline<R: Sendable>(
  _ limit: Duration,
  checkpoints: [(Duration, @Sendable () -> String?)] = [],
  expire: @escaping @Sendable (_ reason: String) -> String = { $0 },
  _ body: @escaping @Sendable () async throws -> R
) async throws -> R {
  let race = DeadlineRace<R>()
  let last: @Sendable () -> String? = { "the database did not answer within \(limit)" }
  let schedule = checkpoints.filter { $0.0 < limit } + [(limit, last)]
  // The timers are an event loop's: cancelled when the call finishes, they are gone (a
  // cancelled `Task.sleep` keeps its timer until it would have fired, and every call of a
  // busy server would leave two behind).
  let eventLoop = MultiThreadedEventLoopGroup.singleton.any()
  return try await withTaskCancellationHandler {
    try await withCheckedThrowingContinuation { continuation in
      race.start(
        continuation,
        work: Task {
          let result: Result<R, any Error>
          do { result = .success(try await body()) } catch { result = .failure(error) }
          race.finish(result)
        },
        timers: schedule.map {
          race.timer(after: $0.0, on: eventLoop, check: $0.1, expire: expire)
        })
    }
  } onCancel: {
    race.cancel()
  }
}

/// A call racing its deadline: the continuation resumed once, by whichever comes first, and
/// the tasks to cancel then.
final class DeadlineRace<R: Sendable>: Sendable {
  private struct State {
    var continuation: CheckedContinuation<R, any Error>?
    var work: Task<Void, Never>?
    var timers: [Scheduled<Void>] = []
    /// The result that came before `start` recorded the continuation.
    var early: Result<R, any Error>?
    var cancelled = false
  }
  // `Locked`, not `Mutex`: ThreadSanitizer models its pthread mutex.
  private let state = Locked(State())

  func start(
    _ continuation: CheckedContinuation<R, any Error>, work: Task<Void, Never>,
    timers: [Scheduled<Void>]
  ) {
    let (early, cancelled) = state.withLock { state in
      state.work = work
      state.timers = timers
      if state.early == nil { state.continuation = continuation }
      return (state.early, state.cancelled)
    }
    if cancelled { work.cancel() }
    if let early {
      for timer in timers { timer.cancel() }
      continuation.resume(with: early)
    }
  }

  /// A timer on `eventLoop` that, after `delay`, stops the call if `check` gives a reason,
  /// with the message `expire` makes of it. Cancelled when the call finishes first.
  func timer(
    after delay: Duration, on eventLoop: any EventLoop,
    check: @escaping @Sendable () -> String?, expire: @escaping @Sendable (String) -> String
  ) -> Scheduled<Void> {
    eventLoop.scheduleTask(in: TimeAmount(delay)) { [self] in
      guard let reason = check() else { return }
      stop(StorageError.unavailable(expire(reason)))
    }
  }

  /// The work finished: its result is the answer unless the deadline came first.
  func finish(_ result: Result<R, any Error>) {
    let (continuation, timers) = state.withLock { state in
      if state.continuation == nil, state.work == nil { state.early = result }
      return (state.continuation.take(), state.timers)
    }
    for timer in timers { timer.cancel() }
    continuation?.resume(with: result)
  }

  /// The deadline came first: fails the call and cancels the work.
  func stop(_ error: any Error) {
    let (continuation, work) = state.withLock { state in
      if state.continuation == nil, state.work == nil { state.early = .failure(error) }
      return (state.continuation.take(), state.work)
    }
    guard let continuation else { return }
    work?.cancel()
    continuation.resume(throwing: error)
  }

  /// The caller was cancelled: so is the work, which then finishes the call.
  func cancel() {
    let work = state.withLock { state in
      state.cancelled = true
      return state.work
    }
    work?.cancel()
  }
}

/// The connection a call to the database holds, so that its deadline can close it.
final class HeldConnection: Sendable {
  private struct State {
    var connection: PostgresConnection?
    var acquired = false
    var expired = false
  }
  // `Locked`, not `Mutex`: ThreadSanitizer models its pthread mutex.
  private let state = Locked(State())

  /// Whether the call has had its connection.
  var isAcquired: Bool { state.withLock { $0.acquired } }

  /// Records the call's connection; closes it and throws if the deadline has passed already.
  func acquired(_ connection: PostgresConnection) throws {
    let expired = state.withLock { state in
      state.acquired = true
      if !state.expired { state.connection = connection }
      return state.expired
    }
    if expired {
      let closing: EventLoopFuture<Void> = connection.close()
      _ = closing
      throw StorageError.unavailable("the call's deadline passed before it had a connection")
    }
  }

  /// The deadline has passed: closes the connection if there is one (its statement in flight
  /// fails, and the pool drops it), and any connection that comes later.
  func expire() {
    let connection = state.withLock { state in
      state.expired = true
      return state.connection.take()
    }
    let closing: EventLoopFuture<Void>? = connection?.close()
    _ = closing
  }
}
