import Foundation
import Testing
import VLogTesting

@testable import VLog

@Suite("Undo")
struct UndoTests {
  @Test("undo puts a field's previous value back as a new change, and redo puts the new one back")
  func fieldUndo() async throws {
    try await withReplicas(2) { replicas in
      let store = replicas[0].store
      #expect(try !store.undo())
      let id = try store.write { $0.createNote(text: "first", tags: ["a"]) }
      try store.write {
        $0.setText("second", of: id)
        $0.setArchived(true, of: id)
      }
      let events = try store.eventCount()
      #expect(store.canUndo && !store.canRedo)
      #expect(try store.undo())
      let note = try #require(try store.note(id))
      #expect(note.text == "first" && !note.isArchived)
      #expect(try store.eventCount() == events + 2)
      #expect(try store.outboxCount() == events + 2)
      #expect(store.canRedo)
      #expect(try store.redo())
      #expect(try store.note(id)?.text == "second")
      #expect(try store.note(id)?.isArchived == true)
      // A new change clears what could be redone.
      #expect(try store.undo())
      try store.write { $0.setTags(["b"], of: id) }
      #expect(!store.canRedo)
      // Undo syncs like any change: another replica converges.
      try replicas[1].store.ingest(allEvents(store))
      #expect(try converged([store, replicas[1].store]))
    }
  }

  @Test(
    "undoing a delete makes a new note with a new id and the same data, attachments included; the bytes are kept until then"
  )
  func deleteUndo() async throws {
    try await withReplicas(1) { replicas in
      let store = replicas[0].store
      let bytes = Array("picture".utf8)
      let id = try store.write { changes in
        let id = changes.createNote(
          text: "keep me", isArchived: true, sortDate: Date(milliseconds: 5_000), tags: ["Trip"])
        changes.addAttachment(bytes, mimeType: "image/png", width: 2, height: 3, to: id)
        return id
      }
      let original = try #require(try store.note(id))
      try store.write { $0.deleteNote(id) }
      // Undo may need the bytes: they stay.
      #expect(try store.removeUnusedBlobs() == 0)
      #expect(try store.undo())
      #expect(try store.note(id) == nil)
      let restored = try #require(
        try store.archivedNotes(limit: 10).first.flatMap { try store.note($0.id) })
      #expect(restored.id != id)
      #expect(restored.text == original.text && restored.isArchived)
      #expect(restored.sortDate == original.sortDate)
      #expect(restored.creationDate == original.creationDate)
      #expect(restored.tags.map(\.name) == ["Trip"])
      #expect(restored.attachments.count == 1)
      let attachment = try #require(restored.attachments.first)
      #expect(attachment.id != original.attachments[0].id)
      #expect(attachment.mimeType == "image/png" && attachment.width == 2)
      #expect(try store.attachmentData(attachment.id) == bytes)
      #expect(try store.verify().isEmpty)
      // Redo deletes the new note again; undo brings another one back.
      #expect(try store.redo())
      #expect(try store.note(restored.id) == nil)
      #expect(try store.archivedNotes(limit: 10).isEmpty)
      #expect(try store.undo())
      let again = try #require(try store.archivedNotes(limit: 10).first)
      #expect(again.id != restored.id && again.id != id)
    }
  }

  @Test("undoing a creation deletes the note; an added attachment is deleted by undo")
  func creationUndo() async throws {
    try await withReplicas(1) { replicas in
      let store = replicas[0].store
      let id = try store.write { $0.createNote(text: "oops") }
      let attachment = try store.write {
        $0.addAttachment(Array("x".utf8), mimeType: "text/plain", to: id)
      }
      #expect(try store.undo())
      #expect(try store.attachment(attachment) == nil)
      #expect(try store.note(id)?.attachments.isEmpty == true)
      #expect(try store.undo())
      #expect(try store.note(id) == nil)
      // Once the history is cleared, the bytes go.
      store.clearUndoHistory()
      #expect(try store.removeUnusedBlobs() == 1)
    }
  }

  @Test("undoing a tag's deletion puts it back on its notes; undoing a rename restores the name")
  func tagUndo() async throws {
    try await withReplicas(1) { replicas in
      let store = replicas[0].store
      let (a, b) = try store.write { changes in
        (
          changes.createNote(text: "a", tags: ["paris", "x"]),
          changes.createNote(text: "b", tags: ["paris"])
        )
      }
      try store.write { $0.renameTag(to: "Paris") }
      #expect(try store.tags().first { $0.tag.id == TagID(name: "paris") }?.tag.name == "Paris")
      try store.write { $0.deleteTag(named: "paris") }
      #expect(try store.undo())
      #expect(try store.note(a)?.tags.map(\.name) == ["paris", "x"])
      #expect(try store.note(b)?.tags.map(\.name) == ["paris"])
      try store.write { $0.renameTag(to: "PARIS") }
      #expect(try store.undo())
      #expect(try store.tags().first { $0.tag.id == TagID(name: "paris") }?.tag.name == "paris")
    }
  }

  @Test("undo puts back only the fields its group set: a text edited elsewhere since stays")
  func onlyChangedFields() async throws {
    try await withReplicas(2) { replicas in
      let (store, other) = (replicas[0].store, replicas[1].store)
      let id = try store.write { $0.createNote(text: "mine", tags: ["a"]) }
      try exchange(store, other)
      try store.write { $0.setArchived(true, of: id) }
      replicas[1].clock.advance(by: 1)
      try other.write { $0.setText("theirs", of: id) }
      try exchange(store, other)
      #expect(try store.undo())
      let note = try #require(try store.note(id))
      #expect(!note.isArchived)
      #expect(note.text == "theirs")
      #expect(note.tags.map(\.name) == ["a"])
    }
  }

  @Test(
    "a text held by reference comes back after its note was deleted and brought back, in that one note"
  )
  func textAfterDeletion() async throws {
    for retention in [NoteStore.Retention.standard, .forever, .period(.zero)] {
      try await withReplicas(retentions: [retention]) { replicas in
        let store = replicas[0].store
        let id = try store.write { $0.createNote(text: "first") }
        try store.write { $0.setText("second", of: id) }
        try store.write { $0.deleteNote(id) }
        #expect(try store.undo())
        #expect(try store.undo())
        // One note: the one the first undo made, with the text before the edit.
        let notes = try store.timeline(limit: 10)
        #expect(notes.count == 1)
        let note = try #require(try notes.first.flatMap { try store.note($0.id) })
        #expect(note.id != id)
        #expect(note.text == "first")
        #expect(try store.verify().isEmpty)
        // Redo puts the edit back on that note.
        #expect(try store.redo())
        #expect(try store.note(note.id)?.text == "second")
      }
    }
  }

  @Test("undo of a change to a note deleted elsewhere since has nothing to put back")
  func deletedElsewhere() async throws {
    try await withReplicas(2) { replicas in
      let (store, other) = (replicas[0].store, replicas[1].store)
      let id = try store.write { $0.createNote(text: "first") }
      try store.write { $0.setText("second", of: id) }
      try exchange(store, other)
      try other.write { $0.deleteNote(id) }
      try exchange(store, other)
      let events = try store.eventCount()
      #expect(try store.undo())
      #expect(try store.timeline(limit: 10).isEmpty)
      #expect(try store.eventCount() == events)
    }
  }
}
