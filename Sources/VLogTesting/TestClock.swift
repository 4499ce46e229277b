internal import Synchronization

/// A `Clock` whose time moves only when told to: sleepers wake when ``advance(by:)`` passes their
/// deadline. For testing code that waits, such as `AutomaticSync`, without waiting.
public final class TestClock: Clock, Sendable {
  /// An instant: a duration since the clock was created.
  public struct Instant: InstantProtocol, Sendable {
    /// The time since the clock's start.
    public var offset: Duration

    /// Creates an instant.
    public init(offset: Duration) { self.offset = offset }

    /// The instant `duration` later.
    public func advanced(by duration: Duration) -> Instant {
      Instant(offset: offset + duration)
    }

    /// The duration from this instant to `other`.
    public func duration(to other: Instant) -> Duration { other.offset - offset }

    /// Earlier first.
    public static func < (lhs: Instant, rhs: Instant) -> Bool { lhs.offset < rhs.offset }
  }

  /// A task sleeping until `deadline`, or a test waiting for a task to go to sleep until
  /// `deadline` or later.
  private struct Waiter {
    let id: Int
    let deadline: Instant
    let continuation: CheckedContinuation<Void, any Error>
  }

  private struct State {
    var now = Instant(offset: .zero)
    var nextID = 0
    var sleepers: [Waiter] = []
    var watchers: [Waiter] = []

    /// Takes the waiter `id` out of its queue, if it is still there.
    mutating func remove(_ id: Int) -> Waiter? {
      if let index = sleepers.firstIndex(where: { $0.id == id }) {
        return sleepers.remove(at: index)
      }
      if let index = watchers.firstIndex(where: { $0.id == id }) {
        return watchers.remove(at: index)
      }
      return nil
    }
  }

  private let state = Mutex(State())

  /// Creates a clock at offset zero.
  public init() {}

  /// The current instant.
  public var now: Instant { state.withLock { $0.now } }

  /// The smallest step: a nanosecond.
  public var minimumResolution: Duration { .nanoseconds(1) }

  /// How many tasks are sleeping on the clock.
  public var sleeperCount: Int { state.withLock { $0.sleepers.count } }

  /// When the tasks sleeping on the clock are due, earliest first: a test can wait for a task
  /// to have gone to sleep before it moves the clock past the task's deadline.
  public var deadlines: [Instant] { state.withLock { $0.sleepers.map(\.deadline).sorted() } }

  /// Suspends until the clock is advanced to `deadline`, or throws `CancellationError` when the
  /// task is cancelled.
  public func sleep(until deadline: Instant, tolerance: Duration?) async throws {
    try await suspend(until: deadline) { state, sleeper in
      if deadline <= state.now { return nil }
      state.sleepers.append(sleeper)
      // The tests that waited for a task to sleep this long wake with it.
      let watching = state.watchers.filter { $0.deadline <= deadline }
      state.watchers.removeAll { $0.deadline <= deadline }
      return watching
    }
  }

  /// Suspends until a task sleeps on the clock until `deadline` or later — at once if one does
  /// already — or throws `CancellationError` when the task is cancelled. A test waits so for a
  /// task to have gone to sleep before it moves the clock past the task's deadline: a task that
  /// goes to sleep after the clock passed its deadline wakes at once, not when it was due.
  public func waitForSleeper(until deadline: Instant) async throws {
    try await suspend(until: deadline) { state, watcher in
      if state.sleepers.contains(where: { $0.deadline >= deadline }) { return nil }
      state.watchers.append(watcher)
      return []
    }
  }

  /// Suspends the task as a waiter until something resumes it, or throws `CancellationError`
  /// when it is cancelled (taking it out of its queue then). `enter`, run under the lock, queues
  /// the waiter and returns the waiters to wake with its entry, or returns nil to resume at once.
  private func suspend(
    until deadline: Instant, enter: (inout State, Waiter) -> [Waiter]?
  ) async throws {
    let id = state.withLock { state in
      state.nextID += 1
      return state.nextID
    }
    try await withTaskCancellationHandler {
      try await withCheckedThrowingContinuation {
        (continuation: CheckedContinuation<Void, any Error>) in
        let waiter = Waiter(id: id, deadline: deadline, continuation: continuation)
        let woken = state.withLock { state -> [Waiter]? in
          Task.isCancelled ? nil : enter(&state, waiter)
        }
        guard let woken else { return continuation.resume() }
        for other in woken { other.continuation.resume() }
      }
    } onCancel: {
      let waiter = state.withLock { $0.remove(id) }
      waiter?.continuation.resume(throwing: CancellationError())
    }
    try Task.checkCancellation()
  }

  /// Moves the clock forward and wakes every sleeper whose deadline has come, after releasing
  /// the lock.
  public func advance(by duration: Duration) {
    let due = state.withLock { state -> [Waiter] in
      state.now = state.now.advanced(by: duration)
      let now = state.now
      let due = state.sleepers.filter { $0.deadline <= now }
      state.sleepers.removeAll { $0.deadline <= now }
      return due
    }
    for sleeper in due { sleeper.continuation.resume() }
  }
}
