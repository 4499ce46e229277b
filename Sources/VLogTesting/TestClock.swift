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

  private struct Sleeper {
    let id: Int
    let deadline: Instant
    let continuation: CheckedContinuation<Void, any Error>
  }

  /// A test waiting for a task to go to sleep until `deadline` or later.
  private struct Watcher {
    let id: Int
    let deadline: Instant
    let continuation: CheckedContinuation<Void, any Error>
  }

  private struct State {
    var now = Instant(offset: .zero)
    var nextID = 0
    var sleepers: [Sleeper] = []
    var watchers: [Watcher] = []
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
    let id = state.withLock { state in
      state.nextID += 1
      return state.nextID
    }
    try await withTaskCancellationHandler {
      try await withCheckedThrowingContinuation {
        (continuation: CheckedContinuation<Void, any Error>) in
        let (resumeNow, watchers) = state.withLock { state -> (Bool, [Watcher]) in
          if deadline <= state.now || Task.isCancelled { return (true, []) }
          state.sleepers.append(Sleeper(id: id, deadline: deadline, continuation: continuation))
          let watching = state.watchers.filter { $0.deadline <= deadline }
          state.watchers.removeAll { $0.deadline <= deadline }
          return (false, watching)
        }
        if resumeNow { continuation.resume() }
        for watcher in watchers { watcher.continuation.resume() }
      }
    } onCancel: {
      let sleeper = state.withLock { state -> Sleeper? in
        guard let index = state.sleepers.firstIndex(where: { $0.id == id }) else { return nil }
        return state.sleepers.remove(at: index)
      }
      sleeper?.continuation.resume(throwing: CancellationError())
    }
    try Task.checkCancellation()
  }

  /// Suspends until a task sleeps on the clock until `deadline` or later — at once if one does
  /// already — or throws `CancellationError` when the task is cancelled. A test waits so for a
  /// task to have gone to sleep before it moves the clock past the task's deadline: a task that
  /// goes to sleep after the clock passed its deadline wakes at once, not when it was due.
  public func waitForSleeper(until deadline: Instant) async throws {
    let id = state.withLock { state in
      state.nextID += 1
      return state.nextID
    }
    try await withTaskCancellationHandler {
      try await withCheckedThrowingContinuation {
        (continuation: CheckedContinuation<Void, any Error>) in
        let resumeNow = state.withLock { state -> Bool in
          if state.sleepers.contains(where: { $0.deadline >= deadline }) || Task.isCancelled {
            return true
          }
          state.watchers.append(Watcher(id: id, deadline: deadline, continuation: continuation))
          return false
        }
        if resumeNow { continuation.resume() }
      }
    } onCancel: {
      let watcher = state.withLock { state -> Watcher? in
        guard let index = state.watchers.firstIndex(where: { $0.id == id }) else { return nil }
        return state.watchers.remove(at: index)
      }
      watcher?.continuation.resume(throwing: CancellationError())
    }
    try Task.checkCancellation()
  }

  /// Moves the clock forward and wakes every sleeper whose deadline has come, after releasing
  /// the lock.
  public func advance(by duration: Duration) {
    let due = state.withLock { state -> [Sleeper] in
      state.now = state.now.advanced(by: duration)
      let now = state.now
      let due = state.sleepers.filter { $0.deadline <= now }
      state.sleepers.removeAll { $0.deadline <= now }
      return due
    }
    for sleeper in due { sleeper.continuation.resume() }
  }
}
