/// Runs an account's syncs on a clock: many triggers in a row run one sync a fixed delay (two
/// seconds in the app) after the last, and a trigger during a sync runs one more afterwards.
///
/// The thin driver of ``SyncCoalescer``: it performs the coalescer's actions with tasks that sleep
/// on the injected clock, so tests advance a test clock instead of waiting.
public actor SyncScheduler<C: Clock> where C.Duration == Duration, C.Instant: Sendable {
  private let clock: C
  private let action: @Sendable () async -> Void
  private var coalescer: SyncCoalescer<C.Instant>
  private var timer: Task<Void, Never>?
  /// How many syncs have started.
  public private(set) var syncCount = 0

  /// Creates a scheduler that calls `action` (typically `account.sync()`) on `clock`.
  public init(
    clock: C, delay: Duration = .seconds(2), action: @escaping @Sendable () async -> Void
  ) {
    self.clock = clock
    self.action = action
    self.coalescer = SyncCoalescer(delay: delay)
  }

  /// Something happened that calls for a sync: an edit, app start, sign-in.
  public func trigger() {
    perform(coalescer.trigger(at: clock.now))
  }

  private func timerFired() {
    perform(coalescer.timerFired(at: clock.now))
  }

  private func syncFinished() {
    perform(coalescer.syncFinished(at: clock.now))
  }

  private func perform(_ action: SyncCoalescer<C.Instant>.Action) {
    switch action {
    case .none:
      break
    case .armTimer(let deadline):
      timer?.cancel()
      timer = Task { [clock] in
        do { try await clock.sleep(until: deadline, tolerance: nil) } catch { return }
        self.timerFired()
      }
    case .startSync:
      syncCount += 1
      let work = self.action
      Task {
        await work()
        self.syncFinished()
      }
    }
  }
}
