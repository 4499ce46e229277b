import Foundation
import Testing
import VLogTesting

@testable import VLog

@Suite("Merging: the cases of the design")
struct MergeScenarioTests {
  @Test("the phone edits the text while the laptop archives: both changes survive")
  func textAndArchiveBothSurvive() async throws {
    try await withReplicas(2) { replicas in
      let (phone, laptop) = (replicas[0], replicas[1])
      let id = try phone.store.write { $0.createNote(text: "Groceries") }
      try exchange(phone.store, laptop.store)

      phone.clock.advance(by: 60)
      laptop.clock.advance(by: 90)
      try phone.store.write { $0.setText("Groceries: milk, eggs", of: id) }
      try laptop.store.write { $0.setArchived(true, of: id) }
      try exchange(phone.store, laptop.store)

      for store in [phone.store, laptop.store] {
        let note = try #require(try store.note(id))
        #expect(note.text == "Groceries: milk, eggs")
        #expect(note.isArchived)
        #expect(try store.timeline().isEmpty)
        #expect(try store.archivedNotes().map(\.id) == [id])
      }
      #expect(try converged([phone.store, laptop.store]))
    }
  }

  @Test(
    "two devices add attachments to one note offline: both keep both, oldest first, in any order of arrival",
    arguments: [false, true])
  func concurrentAttachmentsBothSurvive(laterArrivesFirst: Bool) async throws {
    try await withReplicas(2) { replicas in
      let (phone, laptop) = (replicas[0], replicas[1])
      let (note, kept) = try phone.store.write { changes in
        let note = changes.createNote(text: "Trip")
        return (note, changes.addAttachment([1], mimeType: "image/png", to: note))
      }
      try exchange(phone.store, laptop.store)
      phone.clock.advance(by: 10)
      laptop.clock.advance(by: 20)
      let fromPhone = try phone.store.write {
        $0.addAttachment([2], mimeType: "image/png", to: note)
      }
      let fromLaptop = try laptop.store.write {
        $0.addAttachment([3], mimeType: "image/jpeg", to: note)
      }
      if laterArrivesFirst {
        try phone.store.ingest(try allEvents(laptop.store))
        try laptop.store.ingest(try allEvents(phone.store))
      } else {
        try exchange(phone.store, laptop.store)
      }
      for store in [phone.store, laptop.store] {
        let read = try #require(try store.note(note))
        #expect(read.attachments.map(\.id) == [kept, fromPhone, fromLaptop])
      }
      #expect(try converged([phone.store, laptop.store]))

      // A list set later means exactly its attachments, in its order; an attachment added
      // after it goes after them; a deletion takes one off for good.
      laptop.clock.advance(by: 10)
      try laptop.store.write { $0.setAttachments([fromLaptop, kept], of: note) }
      phone.clock.advance(by: 30)
      let last = try phone.store.write { $0.addAttachment([4], mimeType: "image/png", to: note) }
      try phone.store.write { $0.deleteAttachment(kept) }
      try exchange(phone.store, laptop.store)
      for store in [phone.store, laptop.store] {
        #expect(try store.note(note)?.attachments.map(\.id) == [fromLaptop, last])
      }
      #expect(try converged([phone.store, laptop.store]))
    }
  }

  @Test(
    "attachments an older version added (the add and the whole list) merge with ones added per element"
  )
  func olderAttachmentListsMerge() async throws {
    try await withReplicas(2) { replicas in
      let (device, other) = (replicas[0], replicas[1])
      let note = try device.store.write { $0.createNote(text: "Mixed versions") }
      try exchange(device.store, other.store)
      // An older version adds an attachment as two events: the add, then the whole list.
      let old = ReplicaID(Identifier(high: 7, low: 7))
      let start = UInt64(try #require(try device.store.note(note)).stamps.text.time.milliseconds)
      func stamp(_ offset: UInt64) -> Stamp {
        Stamp(time: HybridTime(milliseconds: start + offset, counter: 0), replica: old)
      }
      // Its bytes are not here yet: a device fetches them when it needs them.
      let hash = try #require(BlobHash(bytes: [UInt8](repeating: 0xAB, count: 32)))
      let oldAttachment = Attachment(
        id: AttachmentID(Identifier(high: 8, low: 8)), noteID: note, mimeType: "image/png",
        width: 1, height: 1, blobHash: hash, byteCount: 3)
      let older = [
        Event(stamp: stamp(5), change: .attachmentAdded(oldAttachment)),
        Event(stamp: stamp(6), change: .attachmentsSet(note, attachments: [oldAttachment.id])),
      ]
      // Meanwhile, this version adds one after the older version's list.
      device.clock.advance(by: 1)
      let added = try device.store.write { $0.addAttachment([5], mimeType: "image/png", to: note) }
      try device.store.ingest(older)
      try other.store.ingest(older)
      try exchange(device.store, other.store)
      for store in [device.store, other.store] {
        #expect(try store.note(note)?.attachments.map(\.id) == [oldAttachment.id, added])
      }
      #expect(try converged([device.store, other.store]))
    }
  }

  @Test("'Paris' and 'paris' created offline on two replicas are one tag")
  func tagsHaveNoDuplicates() async throws {
    try await withReplicas(2) { replicas in
      let (a, b) = (replicas[0], replicas[1])
      let first = try a.store.write { $0.createNote(text: "Louvre", tags: ["Paris"]) }
      b.clock.advance(by: 1)
      let second = try b.store.write { $0.createNote(text: "Eiffel tower", tags: ["paris"]) }
      try exchange(a.store, b.store)

      for store in [a.store, b.store] {
        let tags = try store.tags()
        #expect(tags.count == 1)
        #expect(tags.first?.tag.id == TagID(name: "PARIS"))
        #expect(tags.first?.noteCount == 2)
        // The later naming wins the display case, the same everywhere.
        #expect(tags.first?.tag.name == "paris")
        #expect(Set(try store.notes(taggedWith: "Paris").map(\.id)) == [first, second])
      }
      #expect(try converged([a.store, b.store]))
    }
  }

  @Test(
    "a delete and a concurrent edit: the note stays deleted in either arrival order",
    arguments: [false, true])
  func deleteDominates(editArrivesFirst: Bool) async throws {
    try await withReplicas(3) { replicas in
      let (origin, deleter, editor) = (replicas[0], replicas[1], replicas[2])
      let id = try origin.store.write { $0.createNote(text: "Draft") }
      try exchange(origin.store, deleter.store)
      try exchange(origin.store, editor.store)

      // The edit is made later than the delete: a newer stamp still must not revive the note.
      deleter.clock.advance(by: 10)
      editor.clock.advance(by: 20)
      try deleter.store.write { $0.deleteNote(id) }
      try editor.store.write { changes in
        changes.setText("Draft, edited offline", of: id)
        changes.setTags(["Work"], of: id)
      }
      let deleteEvents = try allEvents(deleter.store)
      let editEvents = try allEvents(editor.store)
      if editArrivesFirst {
        try origin.store.ingest(editEvents)
        #expect(try origin.store.note(id)?.text == "Draft, edited offline")
        try origin.store.ingest(deleteEvents)
      } else {
        try origin.store.ingest(deleteEvents)
        try origin.store.ingest(editEvents)
      }
      try exchange(origin.store, deleter.store)
      try exchange(origin.store, editor.store)

      for store in replicas.map(\.store) {
        #expect(try store.note(id) == nil)
        #expect(try store.noteCount() == 0)
        #expect(try store.tags().isEmpty)
        #expect(try store.deletedObjects().map(\.id) == [id.identifier])
        // And the editor cannot change it any more.
        let error = #expect(throws: VLogError.self) {
          try store.write { $0.setText("again", of: id) }
        }
        #expect(error?.code == .noteDeleted)
      }
      #expect(try converged(replicas.map(\.store)))
    }
  }

  @Test("edits that arrive before their note's creation give the same state as in order")
  func editsBeforeCreation() async throws {
    try await withReplicas(3) { replicas in
      let author = replicas[0]
      let id = try author.store.write { changes in
        changes.createNote(text: "first", tags: ["A"])
      }
      author.clock.advance(by: 5)
      let attachment = try author.store.write { changes in
        changes.setText("second", of: id)
        changes.setSortDate(Date(timeIntervalSince1970: 1_000_000), of: id)
        return changes.addAttachment([1, 2, 3], mimeType: "image/png", width: 2, height: 2, to: id)
      }
      let events = try allEvents(author.store)
      #expect(events.first?.change.kind == .noteCreated)

      try replicas[1].store.ingest(events)
      for event in events.reversed() { try replicas[2].store.ingest([event]) }

      #expect(try converged(replicas.map(\.store)))
      let note = try #require(try replicas[2].store.note(id))
      #expect(note.text == "second")
      #expect(note.attachments.map(\.id) == [attachment])
      #expect(note.thumbnailAttachmentID == attachment)
      #expect(note.sortDate == Date(timeIntervalSince1970: 1_000_000))
    }
  }

  @Test("equal physical times on two replicas: the same winner everywhere")
  func equalTimesHaveOneWinner() async throws {
    try await withReplicas(2) { replicas in
      let (a, b) = (replicas[0], replicas[1])
      let id = try a.store.write { $0.createNote(text: "start") }
      try exchange(a.store, b.store)
      // Both clocks show the same millisecond, and neither has seen the other's edit.
      let now = Date(timeIntervalSince1970: 1_800_000_000)
      a.clock.set(now)
      b.clock.set(now)
      try a.store.write { $0.setText("from A", of: id) }
      try b.store.write { $0.setText("from B", of: id) }
      let stampA = try #require(try a.store.note(id)).stamps.text
      let stampB = try #require(try b.store.note(id)).stamps.text
      #expect(stampA.time == stampB.time)

      try exchange(a.store, b.store)
      let expected = stampA.replica > stampB.replica ? "from A" : "from B"
      #expect(try a.store.note(id)?.text == expected)
      #expect(try b.store.note(id)?.text == expected)
      #expect(try converged([a.store, b.store]))
    }
  }

  @Test("after the wall clock steps back, later local edits still win over earlier ones")
  func clockSteppedBack() async throws {
    try await withReplicas(2) { replicas in
      let (device, other) = (replicas[0], replicas[1])
      let id = try device.store.write { $0.createNote(text: "v1") }
      device.clock.advance(by: 3600)
      try device.store.write { $0.setText("v2", of: id) }
      let before = try #require(try device.store.note(id)).stamps.text
      device.clock.advance(by: -7200)  // corrected by two hours
      try device.store.write { $0.setText("v3", of: id) }
      let after = try #require(try device.store.note(id)).stamps.text
      #expect(after > before)
      #expect(after.time.milliseconds == before.time.milliseconds)
      #expect(try device.store.note(id)?.text == "v3")

      // Another replica, receiving the events in reverse, agrees.
      try other.store.ingest(allEvents(device.store).reversed())
      #expect(try other.store.note(id)?.text == "v3")

      // And the clock survives a restart: the store does not go back in time after reopening.
      try exchange(device.store, other.store)
      #expect(try converged([device.store, other.store]))
    }
  }

  @Test(
    "an edit made after seeing a remote edit wins over it, even from a slower clock (within the skew bound)"
  )
  func causalityBeatsSlowClocks() async throws {
    try await withReplicas(2) { replicas in
      let (fast, slow) = (replicas[0], replicas[1])
      // Nine minutes ahead: within the 10-minute bound up to which the clock follows. Beyond
      // it the clock stops (see "The clock is bounded").
      fast.clock.advance(by: 540)
      let id = try fast.store.write { $0.createNote(text: "from the fast clock") }
      try exchange(fast.store, slow.store)
      try slow.store.write { $0.setText("edited after seeing it", of: id) }
      try exchange(fast.store, slow.store)
      #expect(try fast.store.note(id)?.text == "edited after seeing it")
      #expect(try converged([fast.store, slow.store]))
    }
  }
}
