import Foundation
import Testing
import VLogTesting

@testable import VLog

@Suite("Text conflicts: nothing typed is lost")
struct TextConflictTests {
  /// A note on two devices, synced; then each edits its text offline.
  private func editedOnBoth(
    _ phone: Replica, _ laptop: Replica
  ) throws -> (note: NoteID, fromPhone: Stamp, fromLaptop: Stamp) {
    let note = try phone.store.write { $0.createNote(text: "Shopping: bread") }
    try exchange(phone.store, laptop.store)
    phone.clock.advance(by: 10)
    laptop.clock.advance(by: 20)
    try phone.store.write { $0.setText("Shopping: bread, milk", of: note) }
    try laptop.store.write { $0.setText("Shopping: bread, eggs", of: note) }
    return (
      note, try #require(try phone.store.note(note)).stamps.text,
      try #require(try laptop.store.note(note)).stamps.text
    )
  }

  @Test(
    "two devices edit one text offline: every replica shows the newer and keeps the other as a conflict, in any order",
    arguments: [false, true])
  func concurrentEditsKept(laterArrivesFirst: Bool) async throws {
    try await withReplicas(3) { replicas in
      let (phone, laptop, tablet) = (replicas[0], replicas[1], replicas[2])
      let (note, fromPhone, _) = try editedOnBoth(phone, laptop)
      if laterArrivesFirst {
        try tablet.store.ingest(try allEvents(laptop.store))
        try tablet.store.ingest(try allEvents(phone.store))
      } else {
        try tablet.store.ingest(try allEvents(phone.store))
        try tablet.store.ingest(try allEvents(laptop.store))
      }
      try exchange(phone.store, laptop.store)
      for store in [phone.store, laptop.store, tablet.store] {
        let read = try #require(try store.note(note))
        #expect(read.text == "Shopping: bread, eggs")
        #expect(read.conflicts == [TextConflict(stamp: fromPhone, text: "Shopping: bread, milk")])
      }
      #expect(try converged([phone.store, laptop.store, tablet.store]))
    }
  }

  @Test("edits made one after another, each device synced first, never make a conflict")
  func sequentialEditsNoConflict() async throws {
    try await withReplicas(2) { replicas in
      let (phone, laptop) = (replicas[0], replicas[1])
      let note = try phone.store.write { $0.createNote(text: "v0") }
      for round in 1...6 {
        let device = round % 2 == 0 ? phone : laptop
        try exchange(phone.store, laptop.store)
        device.clock.advance(by: 5)
        try device.store.write { $0.setText("v\(round)", of: note) }
      }
      try exchange(phone.store, laptop.store)
      for store in [phone.store, laptop.store] {
        let read = try #require(try store.note(note))
        #expect(read.text == "v6")
        #expect(read.conflicts.isEmpty)
      }
    }
  }

  @Test("a change that names the conflicts resolves them everywhere; undo brings them back")
  func resolveAndUndo() async throws {
    try await withReplicas(2) { replicas in
      let (phone, laptop) = (replicas[0], replicas[1])
      let (note, fromPhone, _) = try editedOnBoth(phone, laptop)
      try exchange(phone.store, laptop.store)
      // An ordinary edit that does not name the conflict keeps it.
      phone.clock.advance(by: 30)
      try phone.store.write { $0.setText("Shopping: bread, eggs!", of: note) }
      #expect(try phone.store.note(note)?.conflicts.map(\.stamp) == [fromPhone])
      phone.clock.advance(by: 5)
      try phone.store.write {
        $0.setText("Shopping: bread, eggs, milk", of: note, resolving: [fromPhone])
      }
      try exchange(phone.store, laptop.store)
      for store in [phone.store, laptop.store] {
        let read = try #require(try store.note(note))
        #expect(read.text == "Shopping: bread, eggs, milk")
        #expect(read.conflicts.isEmpty)
      }
      // Undo of the resolution: the text before it, and the conflict, come back.
      phone.clock.advance(by: 5)
      #expect(try phone.store.undo())
      var read = try #require(try phone.store.note(note))
      #expect(read.text == "Shopping: bread, eggs!")
      #expect(read.conflicts.map(\.text) == ["Shopping: bread, milk"])
      try exchange(phone.store, laptop.store)
      #expect(try laptop.store.note(note)?.conflicts.map(\.text) == ["Shopping: bread, milk"])
      // Redo resolves it again.
      phone.clock.advance(by: 5)
      #expect(try phone.store.redo())
      read = try #require(try phone.store.note(note))
      #expect(read.text == "Shopping: bread, eggs, milk")
      #expect(read.conflicts.isEmpty)
      try exchange(phone.store, laptop.store)
      #expect(try converged([phone.store, laptop.store]))
    }
  }

  @Test("retention never erases an unresolved conflict's text; once resolved, it goes")
  func retentionKeepsConflicts() async throws {
    try await withReplicas(retentions: [.period(.zero), .period(.zero)]) { replicas in
      let (phone, laptop) = (replicas[0], replicas[1])
      let (note, fromPhone, _) = try editedOnBoth(phone, laptop)
      try exchange(phone.store, laptop.store)
      // More writes run retention: the conflict stays readable.
      laptop.clock.advance(by: 5)
      try laptop.store.write { $0.setArchived(true, of: note) }
      try exchange(phone.store, laptop.store)
      for store in [phone.store, laptop.store] {
        #expect(try store.note(note)?.conflicts.map(\.text) == ["Shopping: bread, milk"])
        #expect(try store.verify().isEmpty)
      }
      laptop.clock.advance(by: 5)
      try laptop.store.write { $0.setText("merged", of: note, resolving: [fromPhone]) }
      try exchange(phone.store, laptop.store)
      laptop.clock.advance(by: 5)
      try laptop.store.write { $0.setArchived(false, of: note) }
      try exchange(phone.store, laptop.store)
      for store in [phone.store, laptop.store] {
        let texts = try allEvents(store).filter { $0.change.kind == .textSet }
        #expect(texts.filter { !$0.isRedacted }.count == 1, "only the text shown is kept")
        #expect(try store.note(note)?.conflicts.isEmpty == true)
      }
      #expect(try converged([phone.store, laptop.store]))
    }
  }

  @Test("deleting the note erases every conflicting text; a rebuild gives the same conflicts")
  func deleteAndRebuild() async throws {
    try await withReplicas(2) { replicas in
      let (phone, laptop) = (replicas[0], replicas[1])
      let (note, _, _) = try editedOnBoth(phone, laptop)
      try exchange(phone.store, laptop.store)
      let before = try laptop.store.stateDigest()
      _ = try laptop.store.rebuildProjections()
      #expect(try laptop.store.stateDigest() == before)
      #expect(try laptop.store.note(note)?.conflicts.count == 1)
      #expect(try laptop.store.verify().isEmpty)
      try phone.store.write { $0.deleteNote(note) }
      try exchange(phone.store, laptop.store)
      for store in [phone.store, laptop.store] {
        #expect(try store.note(note) == nil)
        let texts = try allEvents(store).filter { $0.change.kind == .textSet }
        #expect(texts.allSatisfy { $0.isRedacted })
      }
    }
  }

  @Test("an edit of an older version, which names no text, replaces every older text")
  func olderVersionEdit() async throws {
    try await withReplicas(2) { replicas in
      let (phone, laptop) = (replicas[0], replicas[1])
      let (note, _, fromLaptop) = try editedOnBoth(phone, laptop)
      try exchange(phone.store, laptop.store)
      let old = ReplicaID(Identifier(high: 7, low: 7))
      let later = Stamp(
        time: HybridTime(milliseconds: fromLaptop.time.milliseconds + 100, counter: 0),
        replica: old)
      try phone.store.ingest([Event(stamp: later, change: .textSet(note, text: "from v1"))])
      let read = try #require(try phone.store.note(note))
      #expect(read.text == "from v1")
      #expect(read.conflicts.isEmpty)
    }
  }
}
