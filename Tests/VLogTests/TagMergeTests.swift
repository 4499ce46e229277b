import Foundation
import LMDB
import Testing
import VLogTesting

@testable import VLog

/// Each tag on a note merges on its own: the reproducers of tags lost to whole-list merges, and
/// how lists (every stored log, older versions) merge with per-tag changes.
@Suite("Tags merge one by one")
struct TagMergeTests {
  @Test(
    "two devices tag one note offline: both keep both tags, in any order of arrival",
    arguments: [false, true])
  func concurrentTagsBothSurvive(laterArrivesFirst: Bool) async throws {
    try await withReplicas(2) { replicas in
      let (a, b) = (replicas[0], replicas[1])
      let note = try a.store.write { $0.createNote(text: "C", tags: ["x"]) }
      try exchange(a.store, b.store)
      a.clock.advance(by: 10)
      b.clock.advance(by: 20)
      try b.store.write { $0.setTags(["x", "fromB"], of: note) }
      try a.store.write { $0.setTags(["x", "fromA"], of: note) }
      if laterArrivesFirst {
        try a.store.ingest(try allEvents(b.store))
        try b.store.ingest(try allEvents(a.store))
      } else {
        try exchange(a.store, b.store)
      }
      for store in [a.store, b.store] {
        #expect(try store.note(note)?.tags.map(\.name) == ["x", "fromA", "fromB"])
        #expect(try store.notes(taggedWith: "fromB").map(\.id) == [note])
        // Nothing is lost, so history calls nothing lost.
        #expect(try store.history(of: note).allSatisfy { $0.outcome != .lost })
      }
      #expect(try converged([a.store, b.store]))

      // A removal beats an addition only when it is newer.
      a.clock.advance(by: 10)
      try a.store.write { $0.setTags(["x", "fromB"], of: note) }  // a removes fromA
      b.clock.advance(by: 30)
      try b.store.write { $0.setTags(["x", "fromA", "fromB", "later"], of: note) }
      try exchange(a.store, b.store)
      for store in [a.store, b.store] {
        #expect(try store.note(note)?.tags.map(\.name) == ["x", "fromB", "later"])
      }
      #expect(try converged([a.store, b.store]))
    }
  }

  @Test("a tag removed on one device and added again on another: the newer change wins")
  func removalAgainstAddition() async throws {
    try await withReplicas(2) { replicas in
      let (a, b) = (replicas[0], replicas[1])
      let note = try a.store.write { $0.createNote(text: "C", tags: ["x", "y"]) }
      try exchange(a.store, b.store)
      a.clock.advance(by: 10)
      try a.store.write { $0.setTags(["y"], of: note) }
      b.clock.advance(by: 5)
      try b.store.write { $0.setTags(["x", "y", "z"], of: note) }
      try exchange(a.store, b.store)
      for store in [a.store, b.store] {
        #expect(try store.note(note)?.tags.map(\.name) == ["y", "z"])
      }
      #expect(try converged([a.store, b.store]))
    }
  }

  @Test("a change of order or spelling sets the whole list, which newer additions follow")
  func reorderSetsTheList() async throws {
    try await withReplicas(2) { replicas in
      let (a, b) = (replicas[0], replicas[1])
      let note = try a.store.write { $0.createNote(text: "C", tags: ["x", "y"]) }
      try exchange(a.store, b.store)
      a.clock.advance(by: 10)
      try a.store.write { $0.setTags(["Y", "x"], of: note) }
      let reorder = try #require(try allEvents(a.store).last)
      #expect(reorder.change == .tagsSet(note, tags: ["Y", "x"]))
      b.clock.advance(by: 20)
      try b.store.write { $0.setTags(["x", "y", "z"], of: note) }
      #expect(try allEvents(b.store).last?.change == .tagAdded(note, name: "z"))
      try exchange(a.store, b.store)
      for store in [a.store, b.store] {
        #expect(try store.note(note)?.tags.map(\.name) == ["Y", "x", "z"])
      }
      #expect(try converged([a.store, b.store]))
      // Setting the same tags again writes nothing.
      let count = try allEvents(a.store).count
      try a.store.write { $0.setTags(["Y", "x", "z"], of: note) }
      #expect(try allEvents(a.store).count == count)
    }
  }

  @Test(
    "lists an older version set merge with per-tag changes in any order: exactly these as of their stamp",
    arguments: 0..<6)
  func olderListsMerge(order: Int) async throws {
    try await withReplicas(2) { replicas in
      let (device, other) = (replicas[0], replicas[1])
      let note = try device.store.write { $0.createNote(text: "Mixed versions") }
      try exchange(device.store, other.store)
      let old = ReplicaID(Identifier(high: 7, low: 7))
      let start = UInt64(try #require(try device.store.note(note)).stamps.text.time.milliseconds)
      func stamp(_ offset: UInt64) -> Stamp {
        Stamp(time: HybridTime(milliseconds: start + offset, counter: 0), replica: old)
      }
      let events = [
        Event(stamp: stamp(10), change: .tagAdded(note, name: "early")),  // before the list
        Event(stamp: stamp(20), change: .tagsSet(note, tags: ["a", "b", "c"])),
        Event(stamp: stamp(30), change: .tagRemoved(note, tag: TagKey(name: "b"))),
        Event(stamp: stamp(40), change: .tagAdded(note, name: "d")),
        Event(stamp: stamp(50), change: .tagAdded(note, name: "A")),  // again: goes last
        Event(stamp: stamp(15), change: .tagsSet(note, tags: ["older"])),
      ]
      // Six orders of arrival, by rotation and reversal.
      var ordered = Array(events[order...] + events[..<order])
      if order % 2 == 1 { ordered.reverse() }
      for event in ordered { try device.store.ingest([event]) }
      try other.store.ingest(events)
      for store in [device.store, other.store] {
        #expect(try store.note(note)?.tags.map(\.name) == ["c", "d", "A"])
      }
      #expect(try converged([device.store, other.store]))
      _ = try device.store.rebuildProjections()
      #expect(try converged([device.store, other.store]))
    }
  }

  @Test(
    "a deletion takes the tag off every note as of its stamp, whatever arrives after; a newer addition keeps it",
    arguments: [false, true])
  func deletionAgainstConcurrentAdditions(deletionFirst: Bool) async throws {
    try await withReplicas(3) { replicas in
      let (a, b, c) = (replicas[0], replicas[1], replicas[2])
      let (n1, n2) = try a.store.write { changes in
        (changes.createNote(text: "1", tags: ["paris"]), changes.createNote(text: "2"))
      }
      try exchange(a.store, b.store)
      // b adds the tag before the deletion (by stamp), then another note after it.
      b.clock.advance(by: 5)
      try b.store.write { $0.setTags(["Paris"], of: n2) }
      let beforeDeletion = try allEvents(b.store)
      a.clock.advance(by: 10)
      try a.store.write { $0.deleteTag(named: "PARIS") }
      b.clock.advance(by: 20)
      let n3 = try b.store.write { $0.createNote(text: "3", tags: ["Paris"]) }
      let deletion = try allEvents(a.store).filter { $0.change.kind == .tagErased }
      if deletionFirst {
        try c.store.ingest(allEvents(a.store))
        try c.store.ingest(allEvents(b.store))
      } else {
        try c.store.ingest(beforeDeletion)
        try c.store.ingest(allEvents(b.store))
        try c.store.ingest(deletion)
        try c.store.ingest(allEvents(a.store))
      }
      try exchange(a.store, b.store)
      for store in [a.store, b.store, c.store] {
        #expect(try store.note(n1)?.tags.isEmpty == true)
        #expect(try store.note(n2)?.tags.isEmpty == true)
        #expect(try store.note(n3)?.tags.map(\.name) == ["Paris"])
        #expect(try store.tags().map(\.tag.name) == ["Paris"])
        // No change older than the deletion spells the name any more.
        for event in try allEvents(store) where event.stamp < deletion[0].stamp {
          #expect(!event.description.lowercased().contains("paris"), "\(event)")
        }
        #expect(try store.verify().isEmpty)
      }
      #expect(try converged([a.store, b.store, c.store]))
    }
  }

  @Test("an older version's deletion by name is stored by key, and its list keeps the tag no more")
  func legacyDeletionsMigrate() async throws {
    try await withReplicas(2) { replicas in
      let (device, other) = (replicas[0], replicas[1])
      let note = try device.store.write { $0.createNote(text: "n", tags: ["Quokka", "kept"]) }
      // What an older version wrote: the list without the tag, then the deletion by name.
      let old = ReplicaID(Identifier(high: 9, low: 9))
      let start = UInt64(try #require(try device.store.note(note)).stamps.tags.time.milliseconds)
      let legacy = [
        Event(
          stamp: Stamp(time: HybridTime(milliseconds: start + 1, counter: 0), replica: old),
          change: .tagsSet(note, tags: ["kept"])),
        Event(
          stamp: Stamp(time: HybridTime(milliseconds: start + 2, counter: 0), replica: old),
          change: .tagDeleted(name: "quokka")),
      ]
      try device.store.ingest(legacy)
      try other.store.ingest(try allEvents(device.store))
      for store in [device.store, other.store] {
        let events = try allEvents(store)
        #expect(events.allSatisfy { !$0.description.lowercased().contains("quokka") })
        #expect(events.last?.change == .tagErased(TagKey(name: "Quokka")))
        #expect(try store.note(note)?.tags.map(\.name) == ["kept"])
      }
      #expect(try converged([device.store, other.store]))
    }
  }
}

/// A log as versions before protocol 3 left it: a tag deletion by name, and a tags list older
/// than it that still spells the name.
enum LegacyTagLog {
  /// The legacy form of a deletion by key of `name`, or of a list that lost `name`.
  static func legacy(_ event: Event, name: String, list: [String]) -> Event? {
    switch event.change {
    case .tagErased(let key) where key == TagKey(name: name):
      return Event(stamp: event.stamp, change: .tagDeleted(name: name.lowercased()))
    case .tagsSet(let note, let tags) where tags == list.filter({ $0 != name }):
      return Event(stamp: event.stamp, change: .tagsSet(note, tags: list))
    default: return nil
    }
  }
}

@Suite("Deleted tags' names in older logs")
struct LegacyTagNameTests {
  @Test(
    "a store of format 6 (deletions by name) is migrated on open: the names go, verify is clean, state unchanged"
  )
  func storeFormat6() async throws {
    try withTemporaryDirectory { path in
      var store = try NoteStore.open(at: path, options: .init(durability: .noSync))
      let note = try store.write { $0.createNote(text: "n", tags: ["Quokka", "kept"]) }
      try store.write { $0.deleteTag(named: "Quokka") }
      #expect(try store.verify().isEmpty)
      let (digest, state) = (try store.eventSetDigest(), try store.stateDigest())
      try store.environment.write { transaction in
        try EventLog.rewriteEvents(in: store.schema.log, transaction: transaction) {
          LegacyTagLog.legacy($0, name: "Quokka", list: ["Quokka", "kept"])
        }
        try transaction.put(
          BigEndian.bytes(UInt32(6)), forKey: Keys.Meta.format, in: store.schema.meta)
      }
      // Verify sees what the older version left.
      let faults = try store.verify()
      #expect(faults.filter { $0.kind == .erasure }.count == 2, "\(faults)")
      #expect(try store.events().contains { $0.event.description.contains("quokka") })
      store.close()

      store = try NoteStore.open(at: path, options: .init(durability: .noSync))
      defer { store.close() }
      #expect(try store.verify().isEmpty)
      let events = try store.events().map(\.event)
      #expect(!events.contains { $0.description.lowercased().contains("quokka") })
      #expect(events.last?.change == .tagErased(TagKey(name: "quokka")))
      #expect(try store.eventSetDigest() == digest)
      #expect(try store.stateDigest() == state)
      #expect(try store.note(note)?.tags.map(\.name) == ["kept"])
    }
  }
}
