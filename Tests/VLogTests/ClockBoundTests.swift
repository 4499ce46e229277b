import Foundation
import Testing
import VLogTesting

@testable import VLog

@Suite("The clock is bounded")
struct ClockBoundTests {
  static let stranger = ReplicaID(Identifier(high: 9, low: 9))
  /// 2100-01-01T00:00:00Z.
  static let year2100 = HybridTime(milliseconds: 4_102_444_800_000, counter: 0).rawValue

  static func options(_ clock: ManualClock) -> NoteStore.Options {
    .init(durability: .noSync, dependencies: .testing(clock: clock, seed: 1))
  }

  static func wallMilliseconds(_ clock: ManualClock) -> UInt64 {
    UInt64(clock.now.timeIntervalSince1970 * 1000)
  }

  @Test(
    "a remote event stamped far ahead, up to the top of the 64-bit range, is stored and merged, and local writes go on stamped near the wall clock",
    arguments: [UInt64.max, UInt64.max - 1, year2100])
  func farAhead(raw: UInt64) async throws {
    let clock = ManualClock()
    try await withTemporaryStore(options: Self.options(clock)) { store in
      let id = try store.write { $0.createNote(text: "mine") }
      let remote = Event(
        stamp: Stamp(time: HybridTime(rawValue: raw), replica: Self.stranger),
        change: .textSet(id, text: "from the future"))
      #expect(try store.ingest([remote]).appended == 1)
      // Before the bound, this write trapped (or was stamped in the remote event's future).
      try store.write { $0.setArchived(true, of: id) }
      try store.write { $0.setTags(["a"], of: id) }
      let local = try store.events().suffix(2).map(\.event.stamp)
      for stamp in local {
        #expect(stamp.replica == store.replicaID)
        #expect(stamp.time.milliseconds <= Self.wallMilliseconds(clock) + 600_000)
      }
      #expect(local[0] < local[1])
      let note = try #require(try store.note(id))
      #expect(note.text == "from the future")
      #expect(note.isArchived)
      #expect(try store.verify().isEmpty)
    }
  }

  @Test("a remote stamp within the bound moves the clock, so a later local edit wins over it")
  func withinBound() async throws {
    let clock = ManualClock()
    try await withTemporaryStore(options: Self.options(clock)) { store in
      let id = try store.write { $0.createNote(text: "mine") }
      let ahead = HybridTime(
        milliseconds: Self.wallMilliseconds(clock) + 5 * 60_000, counter: 3)
      try store.ingest([
        Event(stamp: Stamp(time: ahead, replica: Self.stranger), change: .textSet(id, text: "b"))
      ])
      try store.write { $0.setText("after seeing b", of: id) }
      #expect(try store.note(id)?.text == "after seeing b")
    }
  }

  @Test("the bound is the store's option: with a zero bound, the clock stays at the wall clock")
  func zeroBound() async throws {
    let clock = ManualClock()
    var options = Self.options(clock)
    options.maximumClockSkew = .zero
    try await withTemporaryStore(options: options) { store in
      let id = try store.write { $0.createNote(text: "mine") }
      let ahead = HybridTime(milliseconds: Self.wallMilliseconds(clock) + 60_000, counter: 0)
      try store.ingest([
        Event(stamp: Stamp(time: ahead, replica: Self.stranger), change: .textSet(id, text: "b"))
      ])
      try store.write { $0.setArchived(true, of: id) }
      let last = try #require(try store.events().last?.event.stamp.time)
      #expect(last.milliseconds == Self.wallMilliseconds(clock))
    }
  }

  @Test("a clock that has issued the last time there is refuses to tick instead of trapping")
  func endOfTime() {
    var clock = HybridClock(latest: HybridTime(rawValue: .max))
    #expect(clock.tick(wallMilliseconds: .max) == nil)
    var carry = HybridClock(latest: HybridTime(milliseconds: 5, counter: .max))
    #expect(carry.tick(wallMilliseconds: 0) == HybridTime(milliseconds: 6, counter: 0))
  }

  @Test(
    "restamping the outbox moves only this replica's unacknowledged events stamped ahead; index, digest and projections follow"
  )
  func restampOutbox() async throws {
    let clock = ManualClock()
    try await withTemporaryStore(options: Self.options(clock)) { store in
      let early = try store.write { $0.createNote(text: "acknowledged, on time") }
      try store.acknowledge(through: try store.lastSequence())
      clock.advance(by: 3600)
      let ahead = try store.write { $0.createNote(text: "made an hour ahead") }
      // A remote event stamped ahead too: not this replica's, so it keeps its stamp.
      let remote = Event(
        stamp: Stamp(
          time: HybridTime(milliseconds: Self.wallMilliseconds(clock), counter: 9),
          replica: Self.stranger),
        change: .textSet(early, text: "remote, ahead"))
      try store.ingest([remote])
      clock.advance(by: -3600)
      let before = try store.events()
      let outbox = try store.outbox()
      let restamped = try store.restampOutbox(after: clock.now)
      #expect(restamped.map(\.old) == outbox.map(\.event.stamp))
      #expect(restamped.allSatisfy { $0.new.time.milliseconds <= Self.wallMilliseconds(clock) + 1 })
      let after = try store.events()
      // Same places, same changes; only the outbox events' stamps changed.
      #expect(after.map(\.sequence) == before.map(\.sequence))
      #expect(after.map(\.event.change) == before.map(\.event.change))
      #expect(after.filter { $0.event.stamp.replica != store.replicaID }.map(\.event) == [remote])
      #expect(try store.outbox().map(\.event.stamp) == restamped.map(\.new))
      for pair in restamped {
        #expect(try store.event(withID: pair.old) == nil)
        #expect(try store.event(withID: pair.new)?.event.stamp == pair.new)
      }
      var digest = EventSetDigest.empty
      for logged in after { digest.add(logged.event.stamp) }
      #expect(try store.eventSetDigest() == digest)
      #expect(try store.verify().isEmpty)
      #expect(try store.note(ahead)?.text == "made an hour ahead")
      // The remote event kept its stamp and its win.
      #expect(try store.note(early)?.text == "remote, ahead")
      // A second call finds nothing more to do.
      #expect(try store.restampOutbox(after: clock.now).isEmpty)
      // A later local write is stamped after the restamped events.
      try store.write { $0.setArchived(true, of: ahead) }
      let last = try #require(try store.events().last?.event.stamp)
      #expect(restamped.allSatisfy { $0.new < last })
    }
  }
}
