import Testing
import VLogSync
import VLogTesting

/// Instants of a test clock, in whole seconds.
struct Tick: InstantProtocol, Sendable {
  var seconds: Int
  func advanced(by duration: Duration) -> Tick {
    Tick(seconds: seconds + Int(duration.components.seconds))
  }
  func duration(to other: Tick) -> Duration { .seconds(other.seconds - seconds) }
  static func < (a: Tick, b: Tick) -> Bool { a.seconds < b.seconds }
}

@Suite("Sync coalescing")
struct SyncCoalescerTests {
  @Test("triggers in a row run one sync, two seconds after the last")
  func burst() {
    var coalescer = SyncCoalescer<Tick>(delay: .seconds(2))
    #expect(coalescer.trigger(at: Tick(seconds: 0)) == .armTimer(Tick(seconds: 2)))
    #expect(coalescer.trigger(at: Tick(seconds: 1)) == .armTimer(Tick(seconds: 3)))
    #expect(coalescer.trigger(at: Tick(seconds: 1)) == .armTimer(Tick(seconds: 3)))
    // The first timer, replaced, fires and is ignored (re-armed for the real deadline).
    #expect(coalescer.timerFired(at: Tick(seconds: 2)) == .armTimer(Tick(seconds: 3)))
    #expect(coalescer.timerFired(at: Tick(seconds: 3)) == .startSync)
    #expect(coalescer.isSyncing)
    #expect(coalescer.timerFired(at: Tick(seconds: 3)) == SyncCoalescer<Tick>.Action.none)
    #expect(coalescer.syncFinished(at: Tick(seconds: 4)) == SyncCoalescer<Tick>.Action.none)
    #expect(!coalescer.isSyncing)
  }

  @Test("a trigger during a sync runs exactly one more sync after it")
  func triggerDuringSync() {
    var coalescer = SyncCoalescer<Tick>(delay: .seconds(2))
    _ = coalescer.trigger(at: Tick(seconds: 0))
    #expect(coalescer.timerFired(at: Tick(seconds: 2)) == .startSync)
    #expect(coalescer.trigger(at: Tick(seconds: 3)) == SyncCoalescer<Tick>.Action.none)
    #expect(coalescer.trigger(at: Tick(seconds: 4)) == SyncCoalescer<Tick>.Action.none)
    #expect(coalescer.syncFinished(at: Tick(seconds: 5)) == .armTimer(Tick(seconds: 7)))
    #expect(coalescer.timerFired(at: Tick(seconds: 7)) == .startSync)
    #expect(coalescer.syncFinished(at: Tick(seconds: 8)) == SyncCoalescer<Tick>.Action.none)
  }

  @Test(
    "over any sequence of events, syncs never overlap and every trigger is followed by a sync",
    arguments: 0..<50)
  func randomSequences(seed: Int) {
    var coalescer = SyncCoalescer<Tick>(delay: .seconds(2))
    var generator = SeededGenerator(seed: UInt64(seed))
    var now = 0
    var timer: Int?
    var syncing = false
    var pendingTrigger = false
    var syncs = 0
    for _ in 0..<200 {
      now += Int.random(in: 0...2, using: &generator)
      let action: SyncCoalescer<Tick>.Action
      switch Int.random(in: 0..<3, using: &generator) {
      case 0:
        action = coalescer.trigger(at: Tick(seconds: now))
        pendingTrigger = true
      case 1 where timer.map({ $0 <= now }) ?? false:
        timer = nil
        action = coalescer.timerFired(at: Tick(seconds: now))
      default:
        guard syncing else { continue }
        syncing = false
        action = coalescer.syncFinished(at: Tick(seconds: now))
      }
      switch action {
      case .none: break
      case .armTimer(let deadline): timer = deadline.seconds
      case .startSync:
        #expect(!syncing, "a sync started while another ran")
        syncing = true
        syncs += 1
        pendingTrigger = false
      }
    }
    // Drain: finish any sync and fire timers until quiet; a pending trigger must get its sync.
    for _ in 0..<10 {
      if syncing {
        syncing = false
        if case .armTimer(let deadline) = coalescer.syncFinished(at: Tick(seconds: now)) {
          timer = deadline.seconds
        }
      }
      if let deadline = timer {
        now = max(now, deadline)
        timer = nil
        switch coalescer.timerFired(at: Tick(seconds: now)) {
        case .startSync:
          syncing = true
          syncs += 1
          pendingTrigger = false
        case .armTimer(let next): timer = next.seconds
        case .none: break
        }
      }
    }
    #expect(!pendingTrigger, "a trigger was never followed by a sync")
    #expect(!syncing && timer == nil)
  }
}
