import Foundation
import LMDB
import Testing
import VLogTesting

@testable import VLog

@Suite("Deleting tags")
struct TagDeletionTests {
  static let secret = "Secret-4b2e"

  @Test(
    "a deleted tag leaves every note and its name leaves history: renames and replaced tags changes are redacted"
  )
  func deleteTag() async throws {
    try await withReplicas(3) { replicas in
      let store = replicas[0].store
      let (a, b) = try store.write { changes in
        (
          changes.createNote(text: "a", tags: [Self.secret, "work"]),
          changes.createNote(text: "b", tags: [Self.secret.lowercased()])
        )
      }
      try store.write { $0.renameTag(to: Self.secret.uppercased()) }
      let before = try allEvents(store)
      try store.write { $0.deleteTag(named: Self.secret) }

      #expect(try store.tags().map(\.tag.name) == ["work"])
      #expect(try store.note(a)?.tags.map(\.name) == ["work"])
      #expect(try store.note(b)?.tags.isEmpty == true)
      let events = try allEvents(store)
      // No event names the tag now; the deletion names its key.
      let naming = events.filter { $0.description.lowercased().contains(Self.secret.lowercased()) }
      #expect(naming.isEmpty)
      #expect(events.contains { $0.change == .tagErased(TagKey(name: Self.secret)) })
      #expect(events.contains { $0.redaction == .deleted && $0.change.kind == .tagRenamed })
      #expect(try store.verify().isEmpty)

      // A replica that hears of the deletion before the rename stores the rename redacted.
      let late = replicas[1].store
      let rename = before.filter { $0.change.kind == .tagRenamed }
      try late.ingest(events.filter { $0.change.kind != .tagRenamed })
      let result = try late.ingest(rename)
      #expect(result.appended == 1)
      #expect(try allEvents(late).first { $0.stamp == rename[0].stamp }?.redaction == .deleted)
      // And one that saw everything first.
      let witness = replicas[2].store
      try witness.ingest(before)
      try witness.ingest(events)
      #expect(try converged([store, late, witness]))

      // Naming the tag again creates it again, with the new spelling.
      try store.write { $0.setTags(["SECRET-4b2e"], of: b) }
      #expect(try store.tags().map(\.tag.name).sorted() == ["SECRET-4b2e", "work"])
    }
  }

  @Test("a device that tagged a note without knowing of the deletion keeps the tag on that note")
  func concurrentTagging() async throws {
    try await withReplicas(2) { replicas in
      let (deleter, tagger) = (replicas[0].store, replicas[1].store)
      let (a, b) = try deleter.write { changes in
        (changes.createNote(text: "a", tags: ["paris"]), changes.createNote(text: "b"))
      }
      try tagger.ingest(allEvents(deleter))
      replicas[1].clock.advance(by: 1)
      try tagger.write { $0.setTags(["Paris"], of: b) }
      try deleter.write { $0.deleteTag(named: "paris") }
      try exchange(deleter, tagger)
      #expect(try converged([deleter, tagger]))
      #expect(try deleter.note(a)?.tags.isEmpty == true)
      #expect(try deleter.note(b)?.tags.map(\.name) == ["Paris"])
      #expect(try deleter.tags().map(\.tag.name) == ["Paris"])
    }
  }

  @Test("deleting a tag no note uses is an error naming it, and changes nothing")
  func deleteUnknownTag() async throws {
    try await withReplicas(1) { replicas in
      let store = replicas[0].store
      try store.write { _ = $0.createNote(text: "x", tags: ["a"]) }
      let digest = try store.stateDigest()
      #expect(throws: VLogError.self) { try store.write { $0.deleteTag(named: "nope") } }
      #expect(try store.stateDigest() == digest)
    }
  }

  @Test(
    "a rename made after a deletion keeps the tag's name, whatever order the two arrive in, also with an older deletion arriving last"
  )
  func renameAfterDeletion() async throws {
    // Found by the convergence property: an older deletion arriving in the same batch as a
    // newer rename forgot the rename.
    let events = RandomEvents.events([1_924_694, 1_687_116, 1_945_141, 0, 0, 0])
    #expect(events.filter { $0.change.kind == .tagDeleted }.count == 2)
    #expect(events.filter { $0.change.kind == .tagRenamed }.count == 1)
    try await withReplicas(3) { replicas in
      try replicas[0].store.ingest(events)
      for event in events.reversed() { try replicas[1].store.ingest([event]) }
      try replicas[2].store.ingest(Array(events[2...]))
      try replicas[2].store.ingest(Array(events[..<2]))
      let stores = replicas.map(\.store)
      #expect(try converged(stores))
      for store in stores {
        let record = try store.read { transaction in
          try transaction.withValue(forKey: Array("paris".utf8), in: store.schema.tags) {
            try $0.map { try TagRecord(decoding: $0) }
          }
        }
        #expect(record?.renameName == "pARIS")
      }
    }
  }
}
