import Foundation
import Synchronization
import Testing
import VLogServerTesting
import VLogSync
import VLogTesting

@testable import VLog
@testable import VLogServer

/// A server that is down while ``down`` is set: every call is answered 503 with a
/// `Retry-After`, as the server answers when its database cannot be reached.
final class Outage: Transport {
  let base: any Transport
  var server: String { base.server }
  let retryAfter: Int
  let down = Mutex(true)
  init(_ base: any Transport, retryAfter: Int) {
    self.base = base
    self.retryAfter = retryAfter
  }

  func send(_ request: TransportRequest) async throws -> TransportResponse {
    guard down.withLock({ $0 }) else { return try await base.send(request) }
    return TransportResponse(
      status: 503,
      headers: ["content-type": "application/json", "retry-after": "\(retryAfter)"],
      body: Array(#"{"code":"unavailable","message":"the database cannot be reached"}"#.utf8))
  }
}

extension AutomaticSync {
  /// How many syncs started, and what it does now.
  var progress: (Int, SyncStatus.Activity) { (syncCount, status.activity) }
}

@Suite("Automatic sync", .timeLimit(.minutes(5)))
struct AutomaticSyncTests {
  static let ann = Credentials(username: "ann", password: "correct horse battery")
  /// The default back-off without its randomness, so waits are exact.
  static let backoff = SyncBackoff(jitter: 0)

  /// Runs `wait` and says whether it finished, or gives up after two minutes so that a wake-up
  /// that never comes fails the test instead of hanging it. Not a bound on how long things may
  /// take: each wait is woken by the event it waits for, however busy the machine.
  private func finishes(_ wait: @escaping @Sendable () async throws -> Bool) async -> Bool {
    await withTaskGroup(of: Bool.self) { group in
      group.addTask { (try? await wait()) ?? false }
      group.addTask {
        try? await Task.sleep(for: .seconds(120))
        return false
      }
      let first = await group.next() ?? false
      group.cancelAll()
      return first
    }
  }

  /// Waits until `condition` holds, checking it at each status the automatic sync publishes
  /// (every change these tests wait for publishes one), and says whether it came true.
  private func eventually<C>(
    _ sync: AutomaticSync<C>, _ condition: @escaping @Sendable () async -> Bool
  ) async -> Bool {
    let updates = await sync.statusUpdates()
    return await finishes {
      for await _ in updates where await condition() { return true }
      return await condition()
    }
  }

  /// Waits until a task sleeps on `clock` until `distance` from now or later: the poll, once it
  /// has gone back to sleep. A loaded machine may take a while to get there, and a poll that
  /// went to sleep after the clock moved on would be due an interval too late.
  private func pollWaits(on clock: TestClock, _ distance: Duration = .seconds(20)) async -> Bool {
    let deadline = clock.now.advanced(by: distance)
    return await finishes {
      try await clock.waitForSleeper(until: deadline)
      return true
    }
  }

  /// Lets the scheduler's tasks run after the clock moved, without expecting anything.
  private func settle() async {
    for _ in 0..<200 { await Task.yield() }
    // A pause, not a wait for anything: cancellation only shortens it.
    try? await Task.sleep(for: .milliseconds(20))
  }

  @Test("app start syncs; edits in a row run one sync two seconds after the last")
  func editsCoalesce() async throws {
    try await withServer { server in
      try await withTemporaryDirectory { root in
        let device = try openDevice(
          0, root: root, transport: InProcessTransport(server: server), credentials: Self.ann,
          seed: 1, clock: ManualClock())
        defer { device.store.close() }
        try await device.account.createAccount()
        let clock = TestClock()
        let sync = AutomaticSync(
          account: device.account, clock: clock, backoff: Self.backoff, live: .off)
        await sync.start()
        #expect(await sync.status.activity == .scheduled)
        clock.advance(by: .seconds(2))
        #expect(await eventually(sync) { await sync.progress == (1, .idle) })
        let first = await sync.status
        #expect(first.isInSync && first.lastSync != nil)

        for index in 1...5 {
          try await device.store.write { $0.createNote(text: "note \(index)") }
          let pending = try device.store.outboxCount()
          #expect(await eventually(sync) { await sync.status.pendingChanges == pending })
          clock.advance(by: .milliseconds(500))
        }
        #expect(await !sync.status.isInSync)
        // 1.5 s after the last edit: nothing yet.
        clock.advance(by: .seconds(1))
        await settle()
        #expect(await sync.syncCount == 1)
        clock.advance(by: .milliseconds(500))
        #expect(await eventually(sync) { await sync.progress == (2, .idle) })
        let status = await sync.status
        #expect(status.isInSync && status.pendingChanges == 0 && status.lastError == nil)
        #expect(try device.store.outboxCount() == 0)
        clock.advance(by: .seconds(60))
        await settle()
        #expect(await sync.syncCount == 2)
        await sync.stop()
      }
    }
  }

  @Test(
    "a failed sync waits out the back-off and Retry-After; edits don't hurry it, foreground does")
  func backoff() async throws {
    try await withServer { server in
      try await withTemporaryDirectory { root in
        let outage = Outage(InProcessTransport(server: server), retryAfter: 7)
        let device = try openDevice(
          0, root: root, transport: outage, credentials: Self.ann, seed: 1, clock: ManualClock())
        defer { device.store.close() }
        outage.down.withLock { $0 = false }
        try await device.account.createAccount()
        outage.down.withLock { $0 = true }
        let clock = TestClock()
        let sync = AutomaticSync(
          account: device.account, clock: clock, backoff: Self.backoff, live: .off)
        let updates = await sync.statusUpdates()
        await sync.start()
        clock.advance(by: .seconds(2))  // t = 2: the first sync, refused
        // The server's Retry-After (7 s) is longer than the first back-off (2 s).
        let waiting = SyncStatus.Activity.waitingToRetry(failures: 1, delay: .seconds(7))
        #expect(await eventually(sync) { await sync.status.activity == waiting })
        let failure = try #require(await sync.status.lastError)
        #expect(failure.isTransient && !failure.needsSignIn)
        #expect(failure.message.contains("database cannot be reached"))

        // An edit asks for a sync at t = 4; the retry still waits until t = 9.
        try await device.store.write { $0.createNote(text: "offline") }
        let pending = try device.store.outboxCount()
        #expect(await eventually(sync) { await sync.status.pendingChanges == pending })
        clock.advance(by: .seconds(6))  // t = 8
        await settle()
        #expect(await sync.syncCount == 1)
        clock.advance(by: .seconds(1))  // t = 9
        let second = SyncStatus.Activity.waitingToRetry(failures: 2, delay: .seconds(7))
        #expect(await eventually(sync) { await sync.progress == (2, second) })

        // The app comes to the foreground with the server back: the wait ends.
        outage.down.withLock { $0 = false }
        await sync.trigger(.foreground)
        clock.advance(by: .seconds(2))
        #expect(await eventually(sync) { await sync.progress == (3, .idle) })
        let status = await sync.status
        #expect(status.lastError == nil && status.isInSync && status.pendingChanges == 0)
        await sync.stop()

        // The stream ended with the stop, and its last status is the one above.
        var last: SyncStatus?
        for await update in updates { last = update }
        #expect(last == status)
      }
    }
  }

  @Test("refused credentials wait for the user instead of retrying")
  func refusedCredentials() async throws {
    try await withServer { server in
      try await withTemporaryDirectory { root in
        let transport = InProcessTransport(server: server)
        let owner = try openDevice(
          0, root: root, transport: transport, credentials: Self.ann, seed: 1,
          clock: ManualClock())
        defer { owner.store.close() }
        try await owner.account.createAccount()
        let stranger = try openDevice(
          1, root: root, transport: transport,
          credentials: Credentials(username: "ann", password: "wrong password"), seed: 2,
          clock: ManualClock())
        defer { stranger.store.close() }
        let clock = TestClock()
        let sync = AutomaticSync(
          account: stranger.account, clock: clock, backoff: Self.backoff, live: .off)
        await sync.start()
        clock.advance(by: .seconds(2))
        #expect(await eventually(sync) { await sync.status.lastError != nil })
        let failure = try #require(await sync.status.lastError)
        #expect(failure.needsSignIn && !failure.isTransient)
        #expect(await sync.status.activity == .idle)
        clock.advance(by: .seconds(600))
        await settle()
        #expect(await sync.syncCount == 1)
        await sync.stop()
      }
    }
  }

  @Test(
    "without a live channel (a transport that cannot hold one), the status says why and the sync polls every interval; a sign-in syncs at once"
  )
  func pollsWithoutChannel() async throws {
    try await withServer { server in
      try await withTemporaryDirectory { root in
        let device = try openDevice(
          0, root: root, transport: InProcessTransport(server: server), credentials: Self.ann,
          seed: 1, clock: ManualClock())
        defer { device.store.close() }
        try await device.account.createAccount()
        let clock = TestClock()
        let live = LiveOptions(
          reconnect: SyncBackoff(initial: .seconds(1), maximum: .seconds(8), jitter: 0),
          pollInterval: .seconds(30))
        let sync = AutomaticSync(
          account: device.account, clock: clock, backoff: Self.backoff, live: live)
        await sync.start()
        clock.advance(by: .seconds(2))
        #expect(await eventually(sync) { await sync.progress == (1, .idle) })
        #expect(
          await eventually(sync) {
            if case .waiting(_, let retry) = await sync.status.liveChannel {
              retry > .zero
            } else {
              false
            }
          })
        // No trigger for 29 seconds: no sync; at 30, the poll; at 60, another — counted from
        // the start, however late the poll's task first ran (it may run after the clock moved).
        #expect(await pollWaits(on: clock))
        #expect(clock.deadlines.contains(TestClock.Instant(offset: .seconds(30))))
        clock.advance(by: .seconds(27))
        await settle()
        #expect(await sync.syncCount == 1)
        clock.advance(by: .seconds(1))
        // The poll has asked for a sync two seconds from 30 (not from wherever the clock is
        // when a loaded machine gets round to it) before the clock moves on.
        #expect(await eventually(sync) { await sync.status.activity == .scheduled })
        clock.advance(by: .seconds(2))
        #expect(await eventually(sync) { await sync.progress == (2, .idle) })
        #expect(await pollWaits(on: clock))
        #expect(clock.deadlines.contains(TestClock.Instant(offset: .seconds(60))))
        clock.advance(by: .seconds(30))
        #expect(await eventually(sync) { await sync.status.activity == .scheduled })
        clock.advance(by: .seconds(2))
        #expect(await eventually(sync) { await sync.progress == (3, .idle) })
        // A sign-in runs a sync at once, with no coalescing delay.
        try await sync.signIn(password: Self.ann.password)
        #expect(await eventually(sync) { await sync.progress == (4, .idle) })
        await sync.stop()
        #expect(await sync.status.liveChannel == .off)
      }
    }
  }
}
