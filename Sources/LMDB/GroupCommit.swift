internal import Dispatch

/// Writes that share commits: those submitted while a commit is in flight are applied
/// together in the next write transaction, and share its sync to disk.
///
/// Each write runs in a transaction of its own nested in the group's
/// (``WriteTransaction/nested(_:)``), in the order submitted, so that one that throws takes
/// back only its own writes and fails alone; the others commit. Each caller resumes only once
/// the group's commit is durable (as durable as the environment's
/// ``Environment/Durability``), with its own result, or with the commit's error if the commit
/// failed.
///
/// Where writes come one at a time, a group is one write, and costs what ``Environment/write(_:)``
/// on the writer queue does. Where many come at once (a server's pushes), the number of commits,
/// and of syncs, is the number of groups: while one commits, the next gathers.
///
/// ```swift
/// let commits = GroupCommit(environment)
/// let stored = try await commits.write { transaction in
///   try transaction.put(value, forKey: key, in: database)
///   return true
/// }
/// ```
public final class GroupCommit: Sendable {
  private let environment: Environment
  private let maximumGroup: Int
  /// Planted in the crash harness's server, to show that it catches the bug: callers resume
  /// before their group commits.
  private let acknowledgesBeforeCommit: Bool
  /// The writes submitted and not yet taken by a group.
  private let pending = Locked<[any PendingWrite]>([])

  /// The writes submitted and not yet taken by a group.
  package var pendingWrites: Int { pending.withLock { $0.count } }

  /// Groups the writes to `environment`, at most `maximumGroup` to a commit.
  ///
  /// Writes of a group run one after the other in the environment's writer queue (that of
  /// ``Environment/onWriterQueue(_:)``), with its other work.
  public convenience init(_ environment: Environment, maximumGroup: Int = 64) {
    self.init(environment, maximumGroup: maximumGroup, acknowledgesBeforeCommit: false)
  }

  package init(_ environment: Environment, maximumGroup: Int, acknowledgesBeforeCommit: Bool) {
    self.environment = environment
    self.maximumGroup = max(1, maximumGroup)
    self.acknowledgesBeforeCommit = acknowledgesBeforeCommit
  }

  /// Runs `body` in the next group's write transaction, in a nested transaction of its own,
  /// and returns its result once the group has committed.
  ///
  /// `body` may run more than once (when the map grows, the group runs again from the
  /// start): it must have no effects outside the transaction. It must not wait for another
  /// write of this group or of the environment.
  ///
  /// - Returns: What `body` returns.
  /// - Throws: What `body` throws (its writes are undone, the group's others kept), or the
  ///   ``LMDBError`` that failed the group's transaction or commit (no write of the group is
  ///   kept).
  public func write<R: Sendable>(
    _ body: @escaping @Sendable (borrowing WriteTransaction) throws -> R
  ) async throws -> R {
    try await write(body, afterCommit: { _ in })
  }

  /// Runs `body` in the next group's write transaction, in a nested transaction of its own,
  /// then `afterCommit` with its result once the group has committed, and returns the result.
  ///
  /// `afterCommit` runs on the writer queue, in the order the writes were submitted, before
  /// any caller of the group resumes and before the next group begins: where what happens
  /// after a commit must follow the order of the commits (telling observers what changed).
  /// It runs only for a write whose body succeeded in a group that committed.
  ///
  /// - Returns: What `body` returns.
  /// - Throws: As ``write(_:)``.
  public func write<R: Sendable>(
    _ body: @escaping @Sendable (borrowing WriteTransaction) throws -> R,
    afterCommit: @escaping @Sendable (R) -> Void
  ) async throws -> R {
    try await withCheckedThrowingContinuation { continuation in
      pending.withLock {
        $0.append(Pending(body: body, afterCommit: afterCommit, continuation: continuation))
      }
      // One turn of the queue for each write: the first turn after a write was submitted
      // takes it, with everything else pending; the later turns find less, or nothing.
      environment.writerQueue.async { self.commitPending() }
    }
  }

  /// Applies the pending writes, up to a group's size, in one write transaction; on the
  /// writer queue.
  private func commitPending() {
    let group = pending.withLock { pending -> [any PendingWrite] in
      let count = min(pending.count, maximumGroup)
      defer { pending.removeFirst(count) }
      return Array(pending.prefix(count))
    }
    guard !group.isEmpty else { return }
    do {
      try environment.write { transaction in
        for write in group { try write.apply(in: transaction) }
        if acknowledgesBeforeCommit { for write in group { write.finish(failure: nil) } }
      }
    } catch {
      if !acknowledgesBeforeCommit { for write in group { write.finish(failure: error) } }
      return
    }
    for write in group { write.committed() }
    if !acknowledgesBeforeCommit { for write in group { write.finish(failure: nil) } }
  }
}

/// A write waiting for its group, type-erased so that writes of any result share a queue.
private protocol PendingWrite: AnyObject, Sendable {
  /// Runs the write in a transaction nested in `transaction`, keeping its outcome.
  func apply(in transaction: borrowing WriteTransaction) throws
  /// Runs what follows the write's commit, if its body succeeded.
  func committed()
  /// Resumes the caller: with `failure` if the group failed, else with the write's outcome.
  func finish(failure: (any Error)?)
}

private final class Pending<R: Sendable>: PendingWrite, @unchecked Sendable {
  // Unchecked: `outcome` and `isFinished` are written and read only on the writer queue, by the one group that
  // took this write.
  let body: @Sendable (borrowing WriteTransaction) throws -> R
  let afterCommit: @Sendable (R) -> Void
  let continuation: CheckedContinuation<R, any Error>
  var outcome: Result<R, any Error>?
  var isFinished = false

  init(
    body: @escaping @Sendable (borrowing WriteTransaction) throws -> R,
    afterCommit: @escaping @Sendable (R) -> Void,
    continuation: CheckedContinuation<R, any Error>
  ) {
    self.body = body
    self.afterCommit = afterCommit
    self.continuation = continuation
  }

  func committed() {
    if case .success(let value) = outcome { afterCommit(value) }
  }

  func apply(in transaction: borrowing WriteTransaction) throws {
    outcome = try transaction.nested(body)
  }

  func finish(failure: (any Error)?) {
    guard !isFinished else { return }
    isFinished = true
    if let failure {
      continuation.resume(throwing: failure)
    } else if let outcome {
      continuation.resume(with: outcome)
    }
  }
}
