import Foundation
import LMDB
import PropertyBased
import Synchronization
import Testing
import VLogTesting

@testable import VLog

/// Whether the bytes of a store's data file contain `text`.
func dataFile(of store: String, contains text: String) throws -> Bool {
  let data = try Data(contentsOf: URL(fileURLWithPath: store + "/data.mdb"))
  return data.range(of: Data(text.utf8)) != nil
}

@Suite("Erasure")
struct ErasureTests {
  static let canary = "canary-7f3a9c-secret"

  /// A note with the canary in its text, tags and an attachment, edited, next to a note that
  /// stays; returns the doomed note's id.
  static func writeCanaryNote(_ store: NoteStore) throws -> NoteID {
    try store.write { changes in
      let id = changes.createNote(text: "first \(canary)", tags: ["Secret-\(canary)", "Shared"])
      changes.addAttachment(Array("bytes \(canary)".utf8), mimeType: "text/plain", to: id)
      return id
    }
  }

  @Test(
    "a deleted note's tag removals are redacted like its other events: their tag's key goes, in place and when they arrive after the deletion"
  )
  func deletedNotesRemovals() async throws {
    try await withReplicas(2) { replicas in
      let (store, late) = (replicas[0].store, replicas[1].store)
      let note = try store.write { $0.createNote(text: "n", tags: ["Quokka", "kept"]) }
      try store.write { $0.setTags(["kept"], of: note) }
      let before = try allEvents(store)
      #expect(before.filter { $0.change.kind == .tagRemoved }.count == 1)
      try store.write { $0.deleteNote(note) }
      // A replica that gets the deletion first, then the events before it, as they were.
      try late.ingest(try allEvents(store).filter { $0.change.kind == .noteDeleted })
      try late.ingest(before)
      for replica in [store, late] {
        for logged in try replica.events() where logged.event.change.kind == .tagRemoved {
          #expect(logged.event.redaction == .deleted, "\(logged.event)")
          #expect(!logged.event.description.contains(TagKey(name: "quokka").description))
        }
      }
    }
  }

  @Test(
    "deleting a note redacts every other event of it in place; a replica that only sees the redacted events holds the same state"
  )
  func deleteErases() async throws {
    try await withReplicas(3) { replicas in
      let store = replicas[0].store
      let doomed = try Self.writeCanaryNote(store)
      let kept = try store.write { $0.createNote(text: "kept", tags: ["shared"]) }
      try store.write {
        $0.setText("second \(Self.canary)", of: doomed)
        $0.setArchived(true, of: doomed)
      }
      let beforeDelete = try allEvents(store)
      #expect(beforeDelete.contains { $0.description.contains(Self.canary) })
      try store.write { $0.deleteNote(doomed) }

      let events = try store.events()
      #expect(!events.contains { $0.event.description.contains(Self.canary) })
      let ofDoomed = events.filter { $0.event.change.noteID == doomed }
      #expect(ofDoomed.count == beforeDelete.filter { $0.change.noteID == doomed }.count + 1)
      for logged in ofDoomed {
        if case .noteDeleted = logged.event.change {
          #expect(!logged.event.isRedacted)
        } else {
          #expect(logged.event.redaction == .deleted, "\(logged.event)")
        }
      }
      #expect(try store.verify().isEmpty)
      // The tag only the deleted note used is gone; the shared one keeps the live spelling.
      #expect(try store.tags().map(\.tag.name) == ["shared"])
      #expect(try store.note(kept) != nil)

      // A replica that receives the redacted log, and one that saw the content first.
      let fresh = replicas[1].store
      try fresh.ingest(allEvents(store))
      let witness = replicas[2].store
      try witness.ingest(beforeDelete)
      try witness.ingest(allEvents(store))
      #expect(try converged([store, fresh, witness]))
      for replica in [fresh, witness] {
        #expect(!(try allEvents(replica)).contains { $0.description.contains(Self.canary) })
        #expect(try replica.verify().isEmpty)
      }
      // The history says why the values are gone.
      let history = try store.history(of: doomed)
      #expect(history.filter { $0.logged.event.redaction == .deleted }.count == history.count - 1)
    }
  }

  @Test(
    "finding an object's events visits the buckets the index holds, however far apart, whatever the log's last sequence",
    .timeLimit(.minutes(1))
  )
  func sparseBuckets() async throws {
    try await withReplicas(1) { replicas in
      let store = replicas[0].store
      let id = try store.write { $0.createNote(text: "a") }
      try store.write { $0.setText("b", of: id) }
      let log = store.schema.eventLog
      let before = try store.environment.read { try log.sequences(of: id.identifier, in: $0) }
      #expect(before.count == 3)
      // A log entry far past the end (as a corrupted page could hold), and an index entry
      // of the note in a bucket far past the others.
      let far: UInt64 = 1 << 52
      try store.environment.write { transaction in
        try transaction.put(
          [0, 1, 2], forKey: BigEndian.bytes(UInt64(1) << 60), in: store.schema.log)
        try transaction.put(
          [UInt8](), forKey: log.objectKey(id.identifier, sequence: far),
          in: store.schema.objects)
      }
      let after = try store.environment.read { try log.sequences(of: id.identifier, in: $0) }
      #expect(after == before + [far])
    }
  }

  @Test("an event of a deleted note that arrives later is stored redacted and changes nothing")
  func lateEventStoredRedacted() async throws {
    try await withReplicas(2) { replicas in
      let (store, other) = (replicas[0].store, replicas[1].store)
      let id = try store.write { $0.createNote(text: "x") }
      try other.ingest(allEvents(store))
      try store.write { $0.deleteNote(id) }
      // The other device edits before it hears of the delete; the edit arrives afterwards.
      try other.write { $0.setText("late \(Self.canary)", of: id) }
      let before = try store.stateDigest()
      let late = try allEvents(other).filter { !(try store.eventLog(contains: $0.stamp)) }
      #expect(late.count == 1)
      let result = try store.ingest(late)
      #expect(result.appended == 1)
      #expect(try store.stateDigest() == before)
      let stored = try store.events().last?.event
      #expect(stored?.stamp == late[0].stamp)
      #expect(stored?.redaction == .deleted)
      try other.ingest(allEvents(store))
      #expect(try converged([store, other]))
      #expect(!(try allEvents(other)).contains { $0.description.contains(Self.canary) })
    }
  }

  @Test("deleting an attachment erases its metadata, and its bytes go once nothing uses them")
  func attachmentErasure() async throws {
    try await withReplicas(2) { replicas in
      let store = replicas[0].store
      let bytes = Array("picture \(Self.canary)".utf8)
      let (note, first, second) = try store.write { changes in
        let note = changes.createNote(text: "with pictures")
        let first = changes.addAttachment(bytes, mimeType: "image/png", to: note)
        let second = changes.addAttachment(bytes, mimeType: "image/png", to: note)
        return (note, first, second)
      }
      try store.write { $0.deleteAttachment(first) }
      let added = try store.events().filter {
        if case .attachmentAdded(let attachment) = $0.event.change {
          return attachment.id == first
        }
        return false
      }
      #expect(added.count == 1 && added[0].event.redaction == .deleted)
      // The same bytes are still used by the second attachment.
      #expect(try store.removeUnusedBlobs() == 0)
      #expect(try store.attachmentData(second) == bytes)
      let hash = try #require(try store.attachment(second)).blobHash
      try store.write { $0.deleteNote(note) }
      // Undo could bring the note back and needs the bytes; once it cannot, they go.
      #expect(try store.removeUnusedBlobs() == 0)
      store.clearUndoHistory()
      #expect(try store.removeUnusedBlobs() == 1)
      #expect(try store.blob(hash) == nil)
      #expect(try store.verify().isEmpty)
      try replicas[1].store.ingest(allEvents(store))
      #expect(try converged([store, replicas[1].store]))
    }
  }

  @Test("reopening a store removes the bytes its deletions released, and keeps the others")
  func reopenRemovesReleasedBlobs() throws {
    try withTemporaryDirectory { path in
      var store = try NoteStore.open(at: path, options: .init(durability: .noSync))
      let (note, attachment, kept) = try store.write { changes in
        let note = changes.createNote(text: "with a picture")
        let other = changes.createNote(text: "another")
        return (
          note,
          changes.addAttachment(Array("gone \(Self.canary)".utf8), mimeType: "image/png", to: note),
          changes.addAttachment(Array("kept".utf8), mimeType: "image/png", to: other)
        )
      }
      let hash = try #require(try store.attachment(attachment)).blobHash
      let keptHash = try #require(try store.attachment(kept)).blobHash
      try store.write { $0.deleteNote(note) }
      // Undo could bring the note back while this store is open.
      #expect(try store.blob(hash) != nil)
      store.close()
      store = try NoteStore.open(at: path, options: .init(durability: .noSync))
      #expect(try store.blob(hash) == nil)
      #expect(try store.blob(keptHash) != nil)
      #expect(try store.verify().isEmpty)
      store.close()
    }
  }

  @Test("verify reports an event of a deleted note that kept its content")
  func verifyCatchesUnerasedContent() async throws {
    try await withReplicas(1) { replicas in
      let store = replicas[0].store
      let id = try store.write { $0.createNote(text: "plain \(Self.canary)") }
      let original = try store.events().first {
        if case .textSet = $0.event.change { true } else { false }
      }!
      try store.write { $0.deleteNote(id) }
      #expect(try store.verify().isEmpty)
      // Put the unredacted event back, with a valid checksum: what a store that failed to
      // erase would hold.
      try store.environment.write { transaction in
        let bytes = original.event.encoded()
        try transaction.put(
          forKey: BigEndian.bytes(original.sequence),
          reservingCount: LogRecord.headerSize + bytes.count, in: store.schema.log
        ) { LogRecord.write(bytes, into: $0) }
      }
      let faults = try store.verify()
      #expect(faults.contains { $0.kind == .erasure && $0.message.contains("was deleted") })
    }
  }

  @Test("compaction leaves no erased byte in the file, refuses an open store, and keeps the state")
  func compaction() throws {
    try withTemporaryDirectory { root in
      let path = root + "/store"
      let store = try NoteStore.open(at: path)
      let doomed = try Self.writeCanaryNote(store)
      for round in 0..<50 {
        try store.write { $0.setText("edit \(round) \(Self.canary)", of: doomed) }
      }
      try store.write { $0.deleteNote(doomed) }
      let digests = (try store.stateDigest(), try store.eventSetDigest())
      #expect(try store.statistics().reclaimableBytes > 0)
      #expect(throws: VLogError.self) { try NoteStore.compact(at: path) }
      store.close()
      // The erased bytes are still in free pages until compaction.
      #expect(try dataFile(of: path, contains: Self.canary))
      let report = try NoteStore.compact(at: path)
      #expect(report.bytesAfter < report.bytesBefore)
      #expect(try !dataFile(of: path, contains: Self.canary))
      let reopened = try NoteStore.open(at: path)
      defer { reopened.close() }
      #expect(try (reopened.stateDigest(), reopened.eventSetDigest()) == digests)
      #expect(try reopened.verify().isEmpty)
    }
  }

  @Test("a store of format 2 is erased when opened: its deleted notes lose their content")
  func migrationErases() throws {
    try withTemporaryDirectory { root in
      let path = root + "/store"
      var store = try NoteStore.open(at: path)
      let doomed = try Self.writeCanaryNote(store)
      let full = try store.events()
      try store.write { $0.deleteNote(doomed) }
      let digest = try store.stateDigest()
      // Make it what format 2 wrote: the unredacted events, no object or blob index.
      try store.environment.write { transaction in
        for logged in full {
          let bytes = logged.event.encoded()
          try transaction.put(
            forKey: BigEndian.bytes(logged.sequence),
            reservingCount: LogRecord.headerSize + bytes.count, in: store.schema.log
          ) { LogRecord.write(bytes, into: $0) }
        }
        try transaction.removeAll(in: store.schema.objects)
        try transaction.removeAll(in: store.schema.blobReferences)
        try transaction.put(
          BigEndian.bytes(UInt32(2)), forKey: Keys.Meta.format, in: store.schema.meta)
      }
      #expect(try store.events().contains { $0.event.description.contains(Self.canary) })
      store.close()
      store = try NoteStore.open(at: path)
      defer { store.close() }
      #expect(!(try store.events()).contains { $0.event.description.contains(Self.canary) })
      #expect(try store.stateDigest() == digest)
      #expect(try store.verify().isEmpty)
      #expect(try store.statistics().blobs == 0)
    }
  }

  @Test(
    "a store of format 3 (object index keyed by object first) is migrated: later deletions still erase"
  )
  func migrationFromFormat3() throws {
    try withTemporaryDirectory { root in
      let path = root + "/store"
      var store = try NoteStore.open(at: path)
      let kept = try Self.writeCanaryNote(store)
      let gone = try store.write { $0.createNote(text: "gone", tags: ["x"]) }
      try store.write { $0.deleteTag(named: "x") }
      try store.write { $0.deleteNote(gone) }
      // Make it what format 3 wrote: object id, then sequence (0 for a deletion marker).
      try store.environment.write { transaction in
        var entries: [([UInt8], [UInt8])] = []
        try transaction.forEach(in: store.schema.objects) { key, value in
          entries.append((Array(key), Array(value)))
        }
        #expect(entries.allSatisfy { $0.0.count == 32 })
        try transaction.removeAll(in: store.schema.objects)
        for (key, value) in entries {
          let marker = key.prefix(8).allSatisfy { $0 == 0xFF }
          let sequence: [UInt8] = marker ? Array(repeating: 0, count: 8) : Array(key[24...])
          let old = Array(key[8..<24]) + sequence
          try transaction.put(value, forKey: old, in: store.schema.objects)
        }
        try transaction.put(
          BigEndian.bytes(UInt32(3)), forKey: Keys.Meta.format, in: store.schema.meta)
      }
      let digest = try store.stateDigest()
      store.close()
      store = try NoteStore.open(at: path)
      defer { store.close() }
      #expect(try store.stateDigest() == digest)
      #expect(try store.verify().isEmpty)
      #expect(try store.isDeleted(gone))
      // The note made before the migration is found through the rebuilt index when deleted.
      try store.write { $0.deleteNote(kept) }
      #expect(!(try store.events()).contains { $0.event.description.contains(Self.canary) })
      #expect(try store.verify().isEmpty)
    }
  }

  @Test(
    "a store of format 4 (a note's text stamp in its record) is migrated: records split, digest and queries unchanged"
  )
  func migrationFromFormat4() throws {
    try withTemporaryDirectory { root in
      let path = root + "/store"
      var store = try NoteStore.open(at: path)
      let kept = try Self.writeCanaryNote(store)
      let other = try store.write { $0.createNote(text: "other", tags: ["y"]) }
      try store.write { $0.setArchived(true, of: other) }
      let digest = try store.stateDigest()
      // Make it what format 4 wrote: each record whole, its text stamp and sequence inline.
      try store.environment.write { transaction in
        var records: [(key: [UInt8], record: NoteRecord)] = []
        try transaction.forEach(in: store.schema.notes) { key, _ in
          let id = NoteID(Identifier(bytes: key))
          if let record = try store.schema.noteRecord(id, in: transaction) {
            records.append((Array(key), record))
          }
        }
        #expect(records.count == 2)
        try transaction.removeAll(in: store.schema.noteTexts)
        for (key, record) in records {
          try transaction.put(Self.format4Record(record), forKey: key, in: store.schema.notes)
        }
        try transaction.put(
          BigEndian.bytes(UInt32(4)), forKey: Keys.Meta.format, in: store.schema.meta)
      }
      #expect(throws: VLogError.self) { try store.note(kept) }
      store.close()
      store = try NoteStore.open(at: path)
      defer { store.close() }
      #expect(try store.stateDigest() == digest)
      #expect(try store.verify().isEmpty)
      #expect(try store.note(kept)?.text.contains(Self.canary) == true)
      #expect(try store.note(other)?.isArchived == true)
      try store.write { $0.deleteNote(kept) }
      #expect(!(try store.events()).contains { $0.event.description.contains(Self.canary) })
      #expect(try store.verify().isEmpty)
    }
  }

  /// A note record as format 4 stored it.
  static func format4Record(_ record: NoteRecord) -> [UInt8] {
    var writer = ProtobufWriter()
    writer.buffer.append(3)
    writer.buffer.append(record.isCreated ? 1 : 0)
    record.creationStamp.append(to: &writer.buffer)
    writer.rawSigned(record.creationDate)
    record.textStamp.append(to: &writer.buffer)
    writer.rawVarint(record.textSequence)
    record.archivedStamp.append(to: &writer.buffer)
    writer.rawVarint(record.archivedSequence)
    writer.buffer.append(record.archived ? 1 : 0)
    record.sortDateStamp.append(to: &writer.buffer)
    writer.rawVarint(record.sortDateSequence)
    writer.rawSigned(record.sortDate)
    record.tagsStamp.append(to: &writer.buffer)
    writer.rawVarint(record.tagsSequence)
    writer.rawVarint(UInt64(record.tags.count))
    for tag in record.tags { writer.rawString(tag) }
    record.attachmentsStamp.append(to: &writer.buffer)
    writer.rawVarint(record.attachmentsSequence)
    writer.rawVarint(UInt64(record.attachments.count))
    for attachment in record.attachments { attachment.identifier.append(to: &writer.buffer) }
    return writer.buffer
  }

  @Test("erasure commutes with merge: erased, never seen, or seen then erased give one state")
  func erasureCommutes() async {
    let checked = Atomic<Int>(0)
    await propertyCheck(count: 150, input: RandomEvents.generator) { specs in
      checked.add(1, ordering: .relaxed)
      let events = RandomEvents.events(specs)
      let holds = try await withReplicas(3, seed: UInt64(specs.count)) { replicas in
        let (erasing, fresh, partial) = (replicas[0].store, replicas[1].store, replicas[2].store)
        try erasing.ingest(events)
        let erased = try allEvents(erasing)
        // A replica that only ever sees the erased log, in reverse order.
        for event in erased.reversed() { try fresh.ingest([event]) }
        // One that saw half of the original content first.
        try partial.ingest(Array(events.prefix(events.count / 2)))
        try partial.ingest(erased)
        guard try converged([erasing, fresh, partial]) else { return false }
        for store in [erasing, fresh, partial] {
          guard try store.verify().isEmpty else { return false }
        }
        return true
      }
      #expect(holds, "diverged on \(events.map(\.description))")
    }
    #expect(checked.load(ordering: .relaxed) >= 150)
  }
}

extension NoteStore {
  /// Whether the log holds an event with this id.
  func eventLog(contains id: Stamp) throws -> Bool {
    try read { transaction in try eventLog.contains(id, in: transaction) }
  }
}
