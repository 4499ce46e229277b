import Foundation
import LMDB
import PropertyBased
import Testing
import VLogTesting

@testable import VLog

@Suite("Sync state: which notes have changes the server has not stored")
struct PendingNotesTests {
  /// What the log says: a note is pending while the outbox holds a change of it (an
  /// attachment's deletion counts for the attachment's note).
  private func oracle(_ store: NoteStore, attachments: [AttachmentID: NoteID]) throws
    -> Set<NoteID>
  {
    Set(
      try store.outbox().compactMap { logged in
        if let note = logged.event.change.noteID { return note }
        if case .attachmentDeleted(let attachment) = logged.event.change {
          return attachments[attachment]
        }
        return nil
      })
  }

  private func check(
    _ store: NoteStore, notes: [NoteID], attachments: [AttachmentID: NoteID]
  ) throws {
    let expected = try oracle(store, attachments: attachments)
    #expect(Set(try store.pendingNotes()) == expected)
    for note in notes {
      // Notes this store holds and shows: not deleted, not only on the other device.
      guard let shown = try store.note(note) else { continue }
      #expect(shown.isPending == expected.contains(note), "\(note)")
    }
    let page = try store.timeline(limit: 100) + store.archivedNotes(limit: 100)
    for summary in page {
      #expect(summary.isPending == expected.contains(summary.id))
    }
  }

  @Test(
    "edits, attachments, syncs and acknowledgements in any order: a note is pending exactly while the outbox holds a change of it, in every query, after a rebuild too"
  )
  func pendingFollowsTheOutbox() async {
    await propertyCheck(count: 80, input: Gen.int(in: 0...99).array(of: 1...40)) { steps in
      do {
        try await withReplicas(2, seed: UInt64(steps.count)) { replicas in
          let (phone, laptop) = (replicas[0].store, replicas[1].store)
          var notes: [NoteID] = []
          var generator = Xoshiro(seed: (UInt64(steps.count), 7, 8, 9))
          var attachments: [AttachmentID: NoteID] = [:]
          for step in steps {
            let store = step % 2 == 0 ? phone : laptop
            let visible = try notes.filter { try store.note($0) != nil }.shuffled(using: &generator)
            switch step / 2 % 7 {
            case 0:
              notes.append(try store.write { $0.createNote(text: "note \(step)") })
            case 1, 2:
              guard let note = visible.first else { continue }
              try store.write { $0.setText("edit \(step)", of: note) }
            case 3:
              guard let note = visible.first else { continue }
              let attachment = try store.write { edits in
                edits.addAttachment(Array("bytes \(step)".utf8), mimeType: "text/plain", to: note)
              }
              attachments[attachment] = note
            case 4:
              guard
                let (attachment, _) = try attachments.first(where: { key, _ in
                  try store.attachment(key) != nil
                })
              else { continue }
              try store.write { $0.deleteAttachment(attachment) }
            case 5:
              // A push of part of the outbox, acknowledged: as a sync acknowledges it.
              let outbox = try store.outbox()
              guard !outbox.isEmpty else { continue }
              let sent = outbox.prefix(1 + step % outbox.count)
              try (step % 4 == 1 ? phone : laptop).ingest(sent.map(\.event))
              try store.ingest([], acknowledgingThrough: sent.last!.sequence)
            default:
              if step % 3 == 0, let note = visible.last {
                try store.write { $0.deleteNote(note) }
              } else {
                try exchange(phone, laptop)
              }
            }
            try check(store, notes: notes, attachments: attachments)
          }
          // As a store of format 8 opens: no record of pending notes, built from the outbox.
          let schema = phone.schema
          try phone.environment.write { try $0.removeAll(in: schema.pendingNotes) }
          _ = try phone.rebuildProjections()
          try check(phone, notes: notes, attachments: attachments)
        }
      } catch {
        Issue.record("\(error)")
      }
    }
  }

  @Test("an acknowledgement that confirms only a deleted note is announced, without the note")
  func deletedNoteConfirmed() async throws {
    try await withReplicas(1) { replicas in
      let store = replicas[0].store
      let note = try await store.write { $0.createNote(text: "gone soon") }
      try await store.write { $0.deleteNote(note) }
      #expect(try store.pendingNotes() == [note])
      var changes = store.changes().makeAsyncIterator()
      try store.acknowledge(through: try #require(try store.outbox().last).sequence)
      _ = try await store.write { $0.createNote(text: "sentinel") }
      let announced = await changes.next()
      #expect(announced?.eventCount == 0 && announced?.updatedNotes.isEmpty == true)
      #expect(try store.pendingNotes().count == 1, "only the sentinel")
    }
  }

  @Test(
    "an acknowledgement announces the notes it confirms, whose state a query then shows changed"
  )
  func acknowledgementIsAnnounced() async throws {
    try await withReplicas(1) { replicas in
      let store = replicas[0].store
      let note = try await store.write { $0.createNote(text: "draft") }
      for acknowledge in [false, true] {
        let before = try #require(try store.note(note))
        #expect(before.isPending)
        var changes = store.changes().makeAsyncIterator()
        let last = try #require(try store.outbox().last).sequence
        if acknowledge {
          try store.acknowledge(through: last)
        } else {
          try await store.ingest([], acknowledgingThrough: last)
        }
        // A write after it, so that a missing announcement fails rather than waits.
        _ = try await store.write { $0.createNote(text: "sentinel") }
        let announced = await changes.next()
        #expect(announced?.updatedNotes.contains(note) == true && announced?.eventCount == 0)
        // What a live query of the note re-reads on that announcement differs from before.
        let after = try #require(try store.note(note))
        #expect(!after.isPending && after != before)
        try await store.write { $0.setText("edited \(acknowledge)", of: note) }
      }
    }
  }
}
