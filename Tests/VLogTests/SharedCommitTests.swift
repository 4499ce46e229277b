import Foundation
import LMDB
import Testing
import VLogTesting

@testable import VLog

/// Writers that share commits: a store's async writes and ingests that arrive while a commit
/// is in flight go into the next one together.
@Suite("Writes share commits")
struct SharedCommitTests {
  @Test(
    "16 writes and an ingest made while the writer is busy commit together, once; one that is invalid fails alone; observers hear each in the order of the log"
  )
  func writesShareOneCommit() async throws {
    try await withTemporaryDirectory { path in
      let store = try NoteStore.open(at: path, options: .init(durability: .noSync))
      defer { store.close() }
      let existing = try await store.write { $0.createNote(text: "first") }
      let other = try NoteStore.open(at: path + "-other", options: .init(durability: .noSync))
      try await other.write { $0.createNote(text: "from elsewhere") }
      let remote = try other.events().map(\.event)
      other.close()
      let changes = store.changes()
      let before = try store.environment.info().lastTransactionID

      let gate = await WriterGate(store.environment)
      var writes: [Task<NoteID, any Error>] = []
      for index in 0..<16 {
        writes.append(
          Task {
            try await store.write { edits in
              if index == 7 {
                // Invalid: the note does not exist. Fails alone.
                edits.setText("nowhere", of: NoteID(Identifier(high: 7, low: 7)))
              }
              return edits.createNote(text: "note \(index)")
            }
          })
        while store.commits.pendingWrites < index + 1 { await Task.yield() }
      }
      let ingest = Task { try await store.ingest(remote) }
      while store.commits.pendingWrites < 17 { await Task.yield() }
      try await gate.release()

      var created: [NoteID] = []
      for (index, write) in writes.enumerated() {
        if index == 7 {
          await #expect(throws: VLogError.self) { try await write.value }
        } else {
          created.append(try await write.value)
        }
      }
      #expect(try await ingest.value.appended == remote.count)
      // One commit for all of them.
      #expect(try store.environment.info().lastTransactionID == before + 1)
      for (note, index) in zip(created, (0..<16).filter { $0 != 7 }) {
        #expect(try store.note(note)?.text == "note \(index)")
      }
      #expect(try store.note(existing)?.text == "first")
      // Told in the log's order: each write's notes, then the ingest's.
      var heard: [Set<NoteID>] = []
      for await change in changes {
        heard.append(change.insertedNotes)
        if heard.count == 16 { break }
      }
      #expect(heard.prefix(15).map { $0 } == created.map { [$0] })
      #expect(heard.last == Set(remote.compactMap(\.change.noteID)))
      // Undo takes back the last write that committed, as with writes one at a time.
      #expect(try store.undo())
      #expect(try store.note(created.last!) == nil)
    }
  }
}
