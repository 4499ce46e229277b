/// Decides when to sync: many triggers in a row (edits, app start, sign-in) run one sync, a
/// fixed delay after the last of them.
///
/// A pure state machine, generic over the clock's instants: each method takes an event and
/// returns the ``Action`` the caller must perform, so the logic is tested without time passing
/// or a network. A trigger during a sync is remembered and runs one more sync, after the delay,
/// once the current one finishes.
public struct SyncCoalescer<Instant: InstantProtocol>: Sendable where Instant: Sendable {
  /// What the caller must do after an event.
  public enum Action: Equatable, Sendable {
    /// Nothing.
    case none
    /// Arm the timer to fire at this instant (replacing any armed timer).
    case armTimer(Instant)
    /// Start a sync now, and report its end with ``syncFinished(at:)``.
    case startSync
  }

  private enum State: Equatable, Sendable {
    case idle
    case waiting(until: Instant)
    case syncing(triggeredMeanwhile: Bool)
  }

  /// How long after the last trigger a sync starts (two seconds in the app).
  public let delay: Instant.Duration
  private var state = State.idle

  /// Creates a coalescer that waits `delay` after the last trigger.
  public init(delay: Instant.Duration) {
    self.delay = delay
  }

  /// Whether a sync is running.
  public var isSyncing: Bool {
    if case .syncing = state { return true }
    return false
  }

  /// Something happened that calls for a sync.
  public mutating func trigger(at now: Instant) -> Action {
    switch state {
    case .idle, .waiting:
      state = .waiting(until: now.advanced(by: delay))
      return .armTimer(now.advanced(by: delay))
    case .syncing:
      state = .syncing(triggeredMeanwhile: true)
      return .none
    }
  }

  /// Something calls for a sync at once (another device's change, a sign-in): a sync starts
  /// now, taking with it any trigger that waited for the delay; during a sync, one more runs
  /// after it, as for ``trigger(at:)``.
  public mutating func triggerNow(at now: Instant) -> Action {
    switch state {
    case .idle, .waiting:
      state = .syncing(triggeredMeanwhile: false)
      return .startSync
    case .syncing:
      state = .syncing(triggeredMeanwhile: true)
      return .none
    }
  }

  /// The armed timer fired. A timer that was replaced by a later one is ignored.
  public mutating func timerFired(at now: Instant) -> Action {
    guard case .waiting(let deadline) = state else { return .none }
    guard now >= deadline else { return .armTimer(deadline) }
    state = .syncing(triggeredMeanwhile: false)
    return .startSync
  }

  /// The sync started by ``Action/startSync`` ended, successfully or not.
  public mutating func syncFinished(at now: Instant) -> Action {
    guard case .syncing(let triggeredMeanwhile) = state else { return .none }
    if triggeredMeanwhile {
      state = .waiting(until: now.advanced(by: delay))
      return .armTimer(now.advanced(by: delay))
    }
    state = .idle
    return .none
  }
}
