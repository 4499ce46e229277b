public import Foundation
internal import VLog
internal import VLogWire

/// What calls for a sync.
public enum SyncTrigger: Sendable, Hashable, CustomStringConvertible {
  /// The app started (``AutomaticSync/start()`` sends it).
  case launch
  /// The user signed in.
  case signIn
  /// A local change was committed (observed from the store; apps need not send it).
  case edit
  /// The app came to the foreground.
  case foreground
  /// The network came back.
  case networkAvailable
  /// The user asked (pull to refresh, a "Sync now" button).
  case manual
  /// The live channel said the server's log reaches past this device's cursor: another device
  /// pushed. Runs a sync at once, without the coalescing delay.
  case remoteChange
  /// The poll interval passed while the live channel was not open.
  case poll

  /// Whether the trigger says the world may have changed, so that a failed sync's back-off no
  /// longer applies: everything but an edit and a poll.
  public var resetsBackoff: Bool { self != .edit && self != .poll }

  /// The trigger's name, for logs.
  public var description: String {
    switch self {
    case .launch: "launch"
    case .signIn: "sign-in"
    case .edit: "edit"
    case .foreground: "foreground"
    case .networkAvailable: "network available"
    case .manual: "manual"
    case .remoteChange: "remote change"
    case .poll: "poll"
    }
  }
}

/// How long to wait after failed syncs before trying again: doubling from ``initial`` up to
/// ``maximum``, never sooner than the server's `Retry-After`, spread by up to ``jitter`` so that
/// devices cut off together do not come back together.
public struct SyncBackoff: Sendable, Hashable {
  /// The wait after the first failure.
  public var initial: Duration
  /// The longest wait.
  public var maximum: Duration
  /// The fraction of each wait added at random (0 for none).
  public var jitter: Double

  /// Creates a back-off: by default 2 s, 4 s, 8 s … up to 5 minutes, plus up to 20 %.
  public init(
    initial: Duration = .seconds(2), maximum: Duration = .seconds(300), jitter: Double = 0.2
  ) {
    self.initial = initial
    self.maximum = maximum
    self.jitter = jitter
  }

  /// The wait before attempt `failures + 1`, after `failures` failures in a row (at least 1).
  public func delay(
    afterFailures failures: Int, retryAfter: Duration? = nil,
    random: inout some RandomNumberGenerator
  ) -> Duration {
    var wait = initial
    var doublings = max(1, failures) - 1
    while doublings > 0 && wait < maximum {
      wait *= 2
      doublings -= 1
    }
    wait = min(wait, maximum)
    if jitter > 0 { wait += wait * Double.random(in: 0...jitter, using: &random) }
    return max(wait, retryAfter ?? .zero)
  }
}

/// What a sync UI shows: whether a sync runs or waits, when the last one succeeded, the last
/// error, the clock skew, and whether everything is on the server.
public struct SyncStatus: Sendable, Hashable {
  /// What the automatic sync is doing.
  public enum Activity: Sendable, Hashable {
    /// Nothing is scheduled: the last sync succeeded, or failed in a way that waits for the
    /// next trigger (see ``Failure/isTransient``).
    case idle
    /// A sync will start after the coalescing delay.
    case scheduled
    /// A sync is running.
    case syncing
    /// The last sync failed; the next attempt comes after `delay` (or at the next trigger that
    /// resets the back-off).
    case waitingToRetry(failures: Int, delay: Duration)
  }

  /// Why the last sync failed.
  public struct Failure: Sendable, Hashable {
    /// What went wrong, for people.
    public var message: String
    /// Whether trying again later can succeed by itself (see ``APIError/isTransient``); if
    /// not, something must change first (credentials, a new app version, the device's clock).
    public var isTransient: Bool
    /// Whether the server refused the account's credentials or token: the user must sign in.
    public var needsSignIn: Bool
  }

  /// What the automatic sync is doing.
  public var activity: Activity = .idle
  /// When the last successful sync finished.
  public var lastSync: Date?
  /// Why the last sync failed; nil once one succeeds.
  public var lastError: Failure?
  /// The server's clock minus this device's, as last measured.
  public var clockSkew: Duration?
  /// Local changes not yet stored by the server.
  public var pendingChanges = 0
  /// Whether, at the end of the last sync, the store held exactly the server's events and had
  /// nothing left to push: everything is synced.
  public var isInSync = false
  /// The live channel, through which the server says at once when another device pushed.
  public var liveChannel = LiveChannelState.off

  /// The state of an automatic sync's live channel.
  public enum LiveChannelState: Sendable, Hashable {
    /// Not held: the automatic sync is not running, or runs without one
    /// (``LiveOptions/off``).
    case off
    /// Being opened.
    case connecting
    /// Open: other devices' changes arrive within milliseconds.
    case open
    /// Not open: the last attempt failed or the channel ended (`reason`); the next attempt
    /// comes after `retryIn`, and meanwhile the automatic sync polls.
    case waiting(reason: String, retryIn: Duration)
  }

  /// Creates a status.
  public init() {}
}

/// Syncs an account by itself: wires what calls for a sync — local edits (observed from the
/// store), app start, sign-in, and what the app signals (foreground, network back, a "Sync
/// now" button) — into one coalesced sync two seconds after the last trigger, retries failures
/// with back-off (honouring the server's `Retry-After`), and publishes a ``SyncStatus`` for the
/// UI.
///
/// While it runs it holds the account's live channel (``SyncAccount/openLiveChannel(silenceLimit:)``):
/// when another device pushes, the server says so within milliseconds and this one syncs at
/// once. A channel that fails or ends is opened again after a back-off with jitter (1 second
/// doubling up to a minute, by default); while it is not open, the automatic sync polls, every
/// 60 seconds by default (``LiveOptions``). ``SyncStatus/liveChannel`` says which.
///
/// ```swift
/// let sync = AutomaticSync(account: account)
/// await sync.start()                        // syncs soon, then after every edit
/// Task { for await status in await sync.statusUpdates() { show(status) } }
/// await sync.trigger(.foreground)           // from the app's lifecycle events
/// ```
///
/// Generic over the clock it waits on, so tests advance a `TestClock` instead of waiting.
public actor AutomaticSync<C: Clock> where C.Duration == Duration, C.Instant: Sendable {
  /// The account it syncs.
  public let account: SyncAccount
  private let clock: C
  private let backoff: SyncBackoff
  private var random: SystemRandomNumberGenerator = SystemRandomNumberGenerator()
  private var coalescer: SyncCoalescer<C.Instant>
  private var timer: Task<Void, Never>?
  private var edits: Task<Void, Never>?
  private var failures = 0
  private var retryNotBefore: C.Instant?
  private var isStopped = false
  private var subscribers: [Int: AsyncStream<SyncStatus>.Continuation] = [:]
  private var nextSubscriber = 0
  private let live: LiveOptions
  private var liveTask: Task<Void, Never>?
  private var pollTask: Task<Void, Never>?
  /// The newest head the live channel announced.
  private var remoteHead: UInt64 = 0
  /// The current status.
  public private(set) var status = SyncStatus()
  /// How many syncs have started.
  public private(set) var syncCount = 0

  /// Creates an automatic sync for an account; nothing happens until ``start()``.
  ///
  /// - Parameters:
  ///   - account: The account to sync.
  ///   - clock: The clock delays are measured on.
  ///   - delay: How long after the last trigger a sync starts.
  ///   - backoff: How long to wait after failures.
  ///   - live: Whether to hold the live channel, how to reopen it, and how often to poll
  ///     without it.
  public init(
    account: SyncAccount, clock: C, delay: Duration = .seconds(2),
    backoff: SyncBackoff = SyncBackoff(), live: LiveOptions = .standard
  ) {
    self.account = account
    self.clock = clock
    self.backoff = backoff
    self.live = live
    self.coalescer = SyncCoalescer(delay: delay)
  }

  /// Starts: observes the store's local edits, opens the live channel, and triggers a first
  /// sync (``SyncTrigger/launch``).
  public func start() async {
    guard edits == nil, !isStopped else { return }
    let changes = account.store.changes()
    edits = Task { [weak self] in
      for await change in changes where change.source == .user {
        await self?.trigger(.edit)
      }
    }
    if live.isEnabled {
      liveTask = Task { await self.holdLiveChannel() }
      // The first poll is due an interval from now, whenever the task gets to run: a task
      // that started late on a busy machine must not push every poll after it later.
      let firstPoll = clock.now.advanced(by: live.pollInterval)
      pollTask = Task { await self.poll(from: firstPoll) }
    }
    await refreshStatus()
    trigger(.launch)
  }

  /// Stops: no more syncs start (one running finishes), the live channel closes, status
  /// streams end.
  public func stop() {
    isStopped = true
    edits?.cancel()
    edits = nil
    timer?.cancel()
    timer = nil
    liveTask?.cancel()
    liveTask = nil
    pollTask?.cancel()
    pollTask = nil
    publish { $0.liveChannel = .off }
    for continuation in subscribers.values { continuation.finish() }
    subscribers.removeAll()
  }

  /// Signs in with the password (``SyncAccount/signIn(password:)``), then syncs at once and
  /// opens the live channel again if it was waiting.
  ///
  /// - Throws: What signing in throws.
  public func signIn(password: String) async throws {
    try await account.signIn(password: password)
    trigger(.signIn)
  }

  /// Creates the account on the server (``SyncAccount/createAccount()``), signs in, and syncs
  /// at once.
  ///
  /// - Throws: What creating the account or signing in throws.
  public func createAccount() async throws {
    try await account.createAccount()
    try await account.signIn()
    trigger(.signIn)
  }

  /// Something happened that calls for a sync. Every trigger but an edit also ends the wait
  /// after a failure: the app came back, the network returned, the user asked.
  public func trigger(_ trigger: SyncTrigger) {
    guard !isStopped else { return }
    if trigger.resetsBackoff {
      failures = 0
      retryNotBefore = nil
    }
    // A closed store keeps the last count shown; the sync itself reports the error.
    if trigger == .edit, let pending = try? account.store.outboxCount() {
      publish {
        $0.pendingChanges = pending
        $0.isInSync = false
      }
    }
    switch trigger {
    case .remoteChange, .signIn: perform(coalescer.triggerNow(at: clock.now))
    default: perform(coalescer.trigger(at: clock.now))
    }
    if trigger == .signIn, case .waiting = status.liveChannel, live.isEnabled {
      liveTask?.cancel()
      liveTask = Task { await self.holdLiveChannel() }
    }
  }

  /// The status now, then each change of it, until ``stop()``. Only the newest status is kept
  /// for a consumer that is busy.
  public func statusUpdates() -> AsyncStream<SyncStatus> {
    let (stream, continuation) = AsyncStream<SyncStatus>.makeStream(
      bufferingPolicy: .bufferingNewest(1))
    guard !isStopped else {
      continuation.finish()
      return stream
    }
    let id = nextSubscriber
    nextSubscriber += 1
    subscribers[id] = continuation
    continuation.yield(status)
    continuation.onTermination = { [weak self] _ in
      Task { await self?.unsubscribe(id) }
    }
    return stream
  }

  private func unsubscribe(_ id: Int) {
    subscribers[id] = nil
  }

  private func publish(_ change: (inout SyncStatus) -> Void) {
    var next = status
    change(&next)
    guard next != status else { return }
    status = next
    for continuation in subscribers.values { continuation.yield(next) }
  }

  private func timerFired() {
    // A retry waits out its back-off even when edits asked for a sync sooner.
    if let notBefore = retryNotBefore, clock.now < notBefore {
      arm(notBefore)
      return
    }
    perform(coalescer.timerFired(at: clock.now))
  }

  private func perform(_ action: SyncCoalescer<C.Instant>.Action) {
    guard !isStopped else { return }
    switch action {
    case .none:
      break
    case .armTimer(let deadline):
      if case .waitingToRetry = status.activity {} else { publish { $0.activity = .scheduled } }
      arm(deadline)
    case .startSync:
      syncCount += 1
      publish { $0.activity = .syncing }
      let account = self.account
      Task {
        let outcome: Result<SyncReport, any Error>
        do { outcome = .success(try await account.sync()) } catch { outcome = .failure(error) }
        await self.syncFinished(outcome)
      }
    }
  }

  private func arm(_ deadline: C.Instant) {
    timer?.cancel()
    timer = Task { [clock] in
      do { try await clock.sleep(until: deadline, tolerance: nil) } catch { return }
      self.timerFired()
    }
  }

  private func syncFinished(_ outcome: Result<SyncReport, any Error>) async {
    switch outcome {
    case .success(let report):
      failures = 0
      retryNotBefore = nil
      await refreshStatus()
      publish {
        $0.activity = .idle
        $0.lastError = nil
        $0.isInSync = report.inSync && $0.pendingChanges == 0
      }
      perform(coalescer.syncFinished(at: clock.now))
      // A head announced during the sync that the sync did not reach.
      if remoteHead > (await account.state).cursor, !coalescer.isSyncing {
        trigger(.remoteChange)
      }
    case .failure(let error):
      let apiError = error as? APIError
      let transient = apiError.map { $0.isTransient || $0.body?.code == .clockSkew } ?? false
      let failure = SyncStatus.Failure(
        message: "\(error)", isTransient: transient,
        needsSignIn: apiError?.status == 401 || apiError?.code == .signedOut)
      await refreshStatus()
      publish {
        $0.lastError = failure
        $0.isInSync = false
        $0.activity = .idle
      }
      guard transient else {
        // Nothing changes by waiting: the next trigger tries again.
        perform(coalescer.syncFinished(at: clock.now))
        return
      }
      failures += 1
      let delay = backoff.delay(
        afterFailures: failures, retryAfter: apiError?.retryAfter, random: &random)
      retryNotBefore = clock.now.advanced(by: delay)
      publish { $0.activity = .waitingToRetry(failures: failures, delay: delay) }
      // A sync afterwards, whether or not something triggered one meanwhile.
      _ = coalescer.syncFinished(at: clock.now)
      perform(coalescer.trigger(at: clock.now))
    }
  }

  // MARK: - Live channel

  /// Holds the live channel until stopped: opens it, syncs when it announces a head past the
  /// cursor, and opens it again after a back-off when it fails or ends.
  private func holdLiveChannel() async {
    var failures = 0
    while !Task.isCancelled, !isStopped {
      publish { $0.liveChannel = .connecting }
      var reason = "the server ended the live channel"
      var retryAfter: Duration?
      do {
        let channel = try await account.openLiveChannel(silenceLimit: live.silenceLimit)
        publish { $0.liveChannel = .open }
        failures = 0
        for try await message in channel {
          switch message {
          case .head(let head): await heard(head: head)
          case .ping: break
          case .closed(let body): reason = body.message
          }
        }
      } catch {
        reason = "\(error)"
        retryAfter = (error as? APIError)?.retryAfter
      }
      guard !Task.isCancelled, !isStopped else { return }
      failures += 1
      let delay = live.reconnect.delay(
        afterFailures: failures, retryAfter: retryAfter, random: &random)
      publish { $0.liveChannel = .waiting(reason: reason, retryIn: delay) }
      do { try await clock.sleep(for: delay) } catch { return }
    }
  }

  /// The live channel said the server's log reaches `head`: a sync if the cursor is behind.
  /// During a sync, the head waits for its end (``syncFinished(_:)``), which usually covers
  /// it — the announcement of this device's own push arrives while it runs.
  private func heard(head: UInt64) async {
    remoteHead = max(remoteHead, head)
    guard !coalescer.isSyncing else { return }
    if head > (await account.state).cursor { trigger(.remoteChange) }
  }

  /// Every poll interval, a sync if the live channel is not open.
  private func poll(from first: C.Instant) async {
    var due = first
    while !Task.isCancelled {
      do { try await clock.sleep(until: due, tolerance: nil) } catch { return }
      if status.liveChannel != .open { trigger(.poll) }
      // Every interval from the first, skipping those already past.
      repeat { due = due.advanced(by: live.pollInterval) } while due <= clock.now
    }
  }

  /// Reads the account's state and the outbox into the status.
  private func refreshStatus() async {
    let state = await account.state
    // A closed store keeps the last count shown; the sync itself reports the error.
    let pending = (try? account.store.outboxCount()) ?? status.pendingChanges
    publish {
      $0.lastSync = state.lastSync
      $0.clockSkew = state.clockSkewMilliseconds.map { .milliseconds($0) }
      $0.pendingChanges = pending
      if pending > 0 { $0.isInSync = false }
    }
  }
}

extension AutomaticSync where C == ContinuousClock {
  /// Creates an automatic sync on the continuous clock.
  public init(
    account: SyncAccount, delay: Duration = .seconds(2), backoff: SyncBackoff = SyncBackoff(),
    live: LiveOptions = .standard
  ) {
    self.init(
      account: account, clock: ContinuousClock(), delay: delay, backoff: backoff, live: live)
  }
}

/// How an ``AutomaticSync`` uses the live channel.
public struct LiveOptions: Sendable, Hashable {
  /// Whether it holds the channel and polls without it; if not, it syncs only when triggered.
  public var isEnabled: Bool
  /// How long to wait before opening the channel again after it failed or ended.
  public var reconnect: SyncBackoff
  /// How often to sync while the channel is not open.
  public var pollInterval: Duration
  /// How long the channel may stay silent before it counts as gone: more than the server's
  /// keep-alive interval (25 seconds by default).
  public var silenceLimit: Duration

  /// Creates options: by default the channel is held, opened again after 1 second doubling up
  /// to a minute (plus up to half as much at random, so that devices cut off together do not
  /// come back together), and the sync polls every 60 seconds without it.
  public init(
    isEnabled: Bool = true,
    reconnect: SyncBackoff = SyncBackoff(
      initial: .seconds(1), maximum: .seconds(60), jitter: 0.5),
    pollInterval: Duration = .seconds(60), silenceLimit: Duration = .seconds(30)
  ) {
    self.isEnabled = isEnabled
    self.reconnect = reconnect
    self.pollInterval = pollInterval
    self.silenceLimit = silenceLimit
  }

  /// The defaults.
  public static let standard = LiveOptions()
  /// No live channel and no polling: syncs only when triggered.
  public static let off = LiveOptions(isEnabled: false)
}
