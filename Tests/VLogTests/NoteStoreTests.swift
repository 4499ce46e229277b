import Foundation
import LMDB
import PropertyBased
import Testing
import VLogTesting

@testable import VLog

@Suite("The store")
struct NoteStoreTests {
  @Test("a created note reads back with its fields, stamps and computed values")
  func createAndRead() async throws {
    try await withReplicas(1) { replicas in
      let (store, clock) = (replicas[0].store, replicas[0].clock)
      let text = "Call Ann on +1 (555) 123-4567 about https://example.com/trip before 2026-03-14."
      let id = try store.write { $0.createNote(text: text, tags: ["Travel", "travel ", "Work"]) }
      let note = try #require(try store.note(id))
      #expect(note.text == text)
      #expect(note.creationDate == clock.now)
      #expect(note.sortDate == clock.now)
      #expect(!note.isArchived)
      #expect(note.tags.map(\.name) == ["Travel", "Work"])
      #expect(note.stamps.text.replica == store.replicaID)
      #expect(note.stamps.archived == .zero)
      #expect(note.detectedData.map(\.kind) == [.phoneNumber, .link, .date])
      #expect(
        note.detectedData.map(\.value) == [
          "+15551234567", "https://example.com/trip", "2026-03-14",
        ])
      #expect(note.truncatedText == text)
      #expect(try store.note(NoteID(Identifier(high: 9, low: 9))) == nil)
    }
  }

  @Test(
    "a summary's first lines, cut from the text's bytes in the log, are the note's truncated text"
  )
  func summaryText() async throws {
    try await withReplicas(1) { replicas in
      let store = replicas[0].store
      // An ASCII start of any length (runs of spaces and newlines included), then any text:
      // the cut falls before, on and after the first byte that is not ASCII.
      let ascii = Array("ab c\n  d\t".utf8)
      await propertyCheck(count: 60, input: Gen.int(in: 0...Int(Int32.max)).array(of: 3...3)) {
        seeds in
        var start: [UInt8] = []
        var value = UInt64(seeds[0]) | 1
        for _ in 0..<(seeds[1] % 420) {
          value = value &* 6_364_136_223_846_793_005 &+ 1
          start.append(ascii[Int(value >> 33) % ascii.count])
        }
        let text = String(decoding: start, as: UTF8.self) + RandomTexts.text(seeds[2], length: 30)
        let id = try store.write { $0.createNote(text: text) }
        let summary = try #require(try store.timeline(limit: 1).first)
        #expect(summary.id == id)
        #expect(summary.truncatedText == Note.truncate(text), "\(String(reflecting: text))")
        try store.write { $0.deleteNote(id) }
      }
    }
  }

  @Test("the timeline is newest first, excludes the archive, and pages without gaps")
  func timelinePaging() async throws {
    try await withReplicas(1) { replicas in
      let store = replicas[0].store
      let base = Date(timeIntervalSince1970: 1_700_000_000)
      let ids = try store.write { changes in
        (0..<25).map { index in
          changes.createNote(
            text: "note \(index)", isArchived: index % 5 == 0,
            sortDate: base.addingTimeInterval(Double(index) * 60))
        }
      }
      let expected = ids.enumerated().filter { $0.offset % 5 != 0 }.map(\.element).reversed()
      var pages: [[NoteID]] = []
      var after: NoteID?
      repeat {
        let page = try store.timeline(limit: 7, after: after).map(\.id)
        pages.append(page)
        after = page.last
      } while pages.last?.count == 7
      #expect(pages.map(\.count) == [7, 7, 6])
      #expect(pages.flatMap { $0 } == Array(expected))
      #expect(try store.archivedNotes().map(\.id) == [ids[20], ids[15], ids[10], ids[5], ids[0]])
      #expect(try store.noteCount() == 25)

      let error = #expect(throws: VLogError.self) { try store.timeline(after: ids[0]) }
      #expect(error?.code == .noteNotFound)
    }
  }

  @Test("tags count their notes, rename keeps one tag, delete removes it from every note")
  func tags() async throws {
    try await withReplicas(1) { replicas in
      let store = replicas[0].store
      let (a, b) = try store.write { changes in
        (
          changes.createNote(text: "a", tags: ["paris", "Food"]),
          changes.createNote(text: "b", tags: ["Paris"])
        )
      }
      #expect(try store.tags().map { "\($0.tag.name):\($0.noteCount)" } == ["Food:1", "Paris:2"])
      try store.write { $0.renameTag(to: "PARIS") }
      #expect(try store.note(a)?.tags.map(\.name) == ["PARIS", "Food"])
      try store.write { $0.deleteTag(named: "paris") }
      #expect(try store.tags().map(\.tag.name) == ["Food"])
      #expect(try store.note(a)?.tags.map(\.name) == ["Food"])
      #expect(try store.note(b)?.tags.isEmpty == true)
      #expect(try store.notes(taggedWith: "Paris").isEmpty)
      let missing = #expect(throws: VLogError.self) { try store.write { $0.renameTag(to: "Nope") } }
      #expect(missing?.code == .tagNotFound)
    }
  }

  @Test(
    "notes with a tag page newest first, archive included, and follow sort date and tag changes"
  )
  func taggedPages() async throws {
    try await withReplicas(1) { replicas in
      let store = replicas[0].store
      let tags = ["Work", "home", "Paris"]
      var ids: [NoteID] = []
      try store.write { changes in
        for index in 0..<40 {
          ids.append(
            changes.createNote(
              text: "note \(index)", isArchived: index % 5 == 0,
              sortDate: Date(milliseconds: Int64(index % 13) * 1000),
              tags: [tags[index % 3], tags[(index / 3) % 3]]))
        }
      }
      try store.write { changes in
        for index in stride(from: 0, to: 40, by: 4) {
          changes.setSortDate(Date(milliseconds: Int64(50 - index) * 1000), of: ids[index])
          changes.setTags(index % 8 == 0 ? [] : ["PARIS"], of: ids[index + 1])
        }
        changes.deleteNote(ids[7])
      }
      for tag in tags {
        // What the notes say, in the index's order: newest first, then by id.
        var expected: [(Date, NoteID)] = []
        for id in ids {
          guard let note = try store.note(id),
            note.tags.contains(where: { $0.id == TagID(name: tag) })
          else { continue }
          expected.append((note.sortDate, id))
        }
        expected.sort { $0.0 != $1.0 ? $0.0 > $1.0 : $0.1 < $1.1 }
        var paged: [NoteID] = []
        var after: NoteID?
        while true {
          let page = try store.notes(taggedWith: tag.uppercased(), limit: 4, after: after)
          paged += page.map(\.id)
          guard page.count == 4 else { break }
          after = page.last?.id
        }
        #expect(paged == expected.map(\.1), "tag \(tag)")
        #expect(!expected.isEmpty)
      }
      let error = #expect(throws: VLogError.self) {
        try store.notes(taggedWith: "work", after: ids[7])
      }
      #expect(error?.code == .noteNotFound)
    }
  }

  @Test("search ignores case and diacritics and covers the archive")
  func search() async throws {
    try await withReplicas(1) { replicas in
      let store = replicas[0].store
      let ids = try store.write { changes in
        [
          changes.createNote(text: "Café au lait"),
          changes.createNote(text: "CAFE receipts", isArchived: true),
          changes.createNote(text: "tea"),
        ]
      }
      #expect(Set(try store.search("cafe").map(\.id)) == [ids[0], ids[1]])
      #expect(try store.search("TEA").map(\.id) == [ids[2]])
      #expect(try store.search("  ").isEmpty)
    }
  }

  @Test("the fast ASCII search agrees with Foundation's comparison on thousands of texts")
  func searchMatcherAgrees() {
    var generator = SeededGenerator(seed: 3)
    let alphabet = Array("aAbBcC zZ-@[`{é")
    func random(_ length: Int) -> String {
      String((0..<length).map { _ in alphabet[Int(generator.next() % UInt64(alphabet.count))] })
    }
    var hits = 0
    for _ in 0..<5000 {
      let text = random(Int(generator.next() % 30))
      let needle = random(1 + Int(generator.next() % 3))
      let expected =
        text.range(of: needle, options: [.caseInsensitive, .diacriticInsensitive]) != nil
      #expect(TextMatcher(needle).matches(text) == expected, "\(needle) in \(text)")
      if expected { hits += 1 }
    }
    #expect(hits > 500)
  }

  @Test("attachments: bytes stored once by hash, thumbnail, delete removes them from the note")
  func attachments() async throws {
    try await withReplicas(1) { replicas in
      let store = replicas[0].store
      let picture = [UInt8](repeating: 0xAB, count: 5000)
      let (note, first, second, document) = try store.write { changes in
        let note = changes.createNote(text: "photos")
        let document = changes.addAttachment(
          Array("pdf".utf8), mimeType: "application/pdf", to: note)
        let first = changes.addAttachment(
          picture, mimeType: "image/jpeg", width: 10, height: 10, to: note)
        let second = changes.addAttachment(
          picture, mimeType: "image/jpeg", width: 10, height: 10, to: note)
        return (note, first, second, document)
      }
      var read = try #require(try store.note(note))
      #expect(read.attachments.map(\.id) == [document, first, second])
      #expect(read.thumbnailAttachmentID == first)
      #expect(try store.attachmentData(first) == picture)
      #expect(try store.read { try $0.count(in: store.schema.blobs) } == 2)
      #expect(try store.timeline().first?.thumbnailAttachmentID == first)

      try store.write { $0.deleteAttachment(first) }
      read = try #require(try store.note(note))
      #expect(read.attachments.map(\.id) == [document, second])
      #expect(read.thumbnailAttachmentID == second)
      #expect(try store.attachment(first) == nil)
      let deleted = #expect(throws: VLogError.self) {
        try store.write { $0.deleteAttachment(first) }
      }
      #expect(deleted?.code == .attachmentDeleted)

      try store.write { $0.setAttachments([second, document], of: note) }
      #expect(try store.note(note)?.attachments.map(\.id) == [second, document])
    }
  }

  @Test("observers see user changes and sync changes, with their source")
  func observation() async throws {
    try await withReplicas(2) { replicas in
      let (store, other) = (replicas[0].store, replicas[1].store)
      let stream = store.changes()
      var iterator = stream.makeAsyncIterator()
      let id = try await store.write { $0.createNote(text: "observed") }
      let first = try #require(await iterator.next())
      #expect(first.source == .user)
      #expect(first.insertedNotes == [id])
      #expect(first.eventCount == 2)

      try await store.write { $0.setText("changed", of: id) }
      let second = try #require(await iterator.next())
      #expect(second.updatedNotes == [id])
      #expect(second.insertedNotes.isEmpty)

      let remote = try await other.write { $0.createNote(text: "from elsewhere", tags: ["x"]) }
      try await store.ingest(allEvents(other))
      let third = try #require(await iterator.next())
      #expect(third.source == .sync)
      #expect(third.insertedNotes == [remote])
      #expect(third.tagsChanged)

      try await store.write { $0.deleteNote(id) }
      let fourth = try #require(await iterator.next())
      #expect(fourth.deletedNotes == [id])
    }
  }

  @Test("the outbox holds local events until acknowledged, and never remote ones")
  func outbox() async throws {
    try await withReplicas(2) { replicas in
      let (store, other) = (replicas[0].store, replicas[1].store)
      let id = try store.write { $0.createNote(text: "to push") }
      try store.write { $0.setArchived(true, of: id) }
      try other.write { $0.createNote(text: "remote") }
      try store.ingest(allEvents(other))

      let pending = try store.outbox()
      #expect(pending.count == 3)
      #expect(pending.allSatisfy { $0.event.stamp.replica == store.replicaID })
      #expect(pending.map(\.sequence) == [1, 2, 3])
      #expect(try store.outbox(limit: 2).count == 2)

      #expect(try store.acknowledge(through: pending[1].sequence) == 2)
      #expect(try store.outbox().map(\.sequence) == [3])
      #expect(try store.outboxCount() == 1)
      #expect(try store.acknowledge(through: pending[1].sequence) == 0)
      #expect(try store.acknowledge(through: 5) == 1)
      #expect(try store.outboxCount() == 0)
      #expect(try store.outbox().isEmpty)
      #expect(try store.eventCount() == 5)
      let beyond = #expect(throws: VLogError.self) { try store.acknowledge(through: 6) }
      #expect(beyond?.code == .invalidValue)

      // Later local changes come after the remote events that arrived meanwhile.
      try store.ingest(allEvents(other))
      let id2 = try store.write { $0.createNote(text: "next") }
      #expect(try store.outbox().map(\.event.change.noteID) == [id2, id2])
    }
  }

  @Test("a page ingested with an acknowledgement commits both, or neither when the page is bad")
  func ingestAcknowledging() async throws {
    try await withReplicas(2) { replicas in
      let (store, other) = (replicas[0].store, replicas[1].store)
      let id = try store.write { $0.createNote(text: "to push") }
      try other.write { $0.createNote(text: "remote") }
      let pushed = try store.outbox()
      let remote = try allEvents(other)

      // A bad event in the page: nothing ingested, nothing acknowledged.
      let bad = Event(
        stamp: Stamp(time: HybridTime(milliseconds: 1, counter: 0), replica: other.replicaID),
        change: .tagRenamed(name: "  "))
      #expect(throws: VLogError.self) {
        try store.ingest(remote + [bad], acknowledgingThrough: pushed.last!.sequence)
      }
      #expect(try store.outboxCount() == pushed.count)
      #expect(try store.eventCount() == pushed.count)

      let result = try store.ingest(remote, acknowledgingThrough: pushed.last!.sequence)
      #expect(result.appended == remote.count)
      #expect(try store.outboxCount() == 0)
      #expect(try store.note(id)?.text == "to push")
      // Nothing to ingest or acknowledge writes nothing and reports nothing.
      #expect(try store.ingest([]).appended == 0)
      #expect(throws: VLogError.self) { try store.ingest([], acknowledgingThrough: 99) }
    }
  }

  @Test("a reopened store has its notes, its replica id, and a clock that never goes back")
  func reopen() async throws {
    try withTemporaryDirectory { path in
      let clock = ManualClock()
      let options = NoteStore.Options(
        durability: .durable, dependencies: .testing(clock: clock, seed: 5))
      var store = try NoteStore.open(at: path, options: options)
      let replica = store.replicaID
      let id = try store.write { $0.createNote(text: "kept") }
      let stamp = try #require(try store.note(id)).stamps.text
      let digest = try store.stateDigest()
      store.close()

      clock.advance(by: -3600)
      store = try NoteStore.open(at: path, options: options)
      defer { store.close() }
      #expect(store.replicaID == replica)
      #expect(try store.stateDigest() == digest)
      try store.write { $0.setText("later", of: id) }
      #expect(try #require(try store.note(id)).stamps.text > stamp)
    }
  }

  @Test("rebuilding the projections from the log gives byte-identical state")
  func rebuildIsIdentical() async throws {
    try await withReplicas(2) { replicas in
      let store = replicas[0].store
      let ids = try store.write { changes in
        (0..<30).map { changes.createNote(text: "note \($0)", tags: ["t\($0 % 4)"]) }
      }
      try store.write { changes in
        for id in ids.prefix(10) { changes.setArchived(true, of: id) }
        changes.deleteNote(ids[12])
        changes.addAttachment([1, 2, 3], mimeType: "image/gif", to: ids[13])
      }
      try store.ingest(allEvents(replicas[1].store))
      let before = try store.stateDigest()
      var reports: [RebuildProgress] = []
      let replayed = try store.rebuildProjections { reports.append($0) }
      #expect(try replayed == store.eventCount())
      #expect(reports.last == RebuildProgress(replayed: replayed, total: replayed))
      #expect(try store.stateDigest() == before)
    }
  }

  @Test("events of an unknown kind are stored, forwarded, counted and not projected")
  func unknownKinds() async throws {
    try await withReplicas(2) { replicas in
      let (store, other) = (replicas[0].store, replicas[1].store)
      let future = Event(
        stamp: Stamp(time: HybridTime(milliseconds: 5000, counter: 0), replica: other.replicaID),
        change: .unknown(kind: EventKind(rawValue: 99)), unknownFields: [0xA2, 0x06, 0x03, 1, 2, 3])
      let result = try store.ingest([future])
      #expect(result.appended == 1)
      #expect(result.unknownKinds == 1)
      #expect(try store.unknownEventCount() == 1)
      #expect(try store.noteCount() == 0)
      // Forwarded unchanged to a third party.
      let forwarded = try #require(try store.event(withID: future.id)).event
      #expect(forwarded == future)
      try other.ingest([forwarded])
      #expect(try other.event(withID: future.id)?.event == future)
      try store.rebuildProjections()
      #expect(try store.unknownEventCount() == 1)
    }
  }
}

@Suite("Bad input")
struct BadInputTests {
  /// Runs `change` and checks that it fails with `code` and commits nothing.
  func expectRefused(
    _ store: NoteStore, _ code: VLogError.Code, containing text: String,
    _ change: (inout Edits) -> Void
  ) throws {
    let events = try store.eventCount()
    let digest = try store.stateDigest()
    let error = #expect(throws: VLogError.self) { try store.write(change) }
    #expect(error?.code == code)
    #expect(error?.message.contains(text) == true, "message: \(error?.message ?? "none")")
    #expect(try store.eventCount() == events)
    #expect(try store.stateDigest() == digest)
    #expect(try store.outboxCount() == events)
  }

  @Test("changes to a deleted or unknown note are refused, and the batch commits nothing")
  func deletedOrUnknownNote() async throws {
    try await withReplicas(1) { replicas in
      let store = replicas[0].store
      let id = try store.write { $0.createNote(text: "x") }
      try store.write { $0.deleteNote(id) }
      try expectRefused(store, .noteDeleted, containing: "deletes are final") { changes in
        changes.createNote(text: "valid, but in a failing batch")
        changes.setText("no", of: id)
      }
      try expectRefused(store, .noteNotFound, containing: "there is no note") {
        $0.setArchived(true, of: NoteID(Identifier(high: 1, low: 1)))
      }
      #expect(try store.noteCount() == 0)
    }
  }

  @Test("empty and oversize values are refused with what and how big")
  func emptyAndOversize() async throws {
    try await withReplicas(1) { replicas in
      let store = replicas[0].store
      let id = try store.write { $0.createNote(text: "x") }
      try expectRefused(store, .invalidValue, containing: "a tag name is empty") {
        $0.setTags(["ok", "  "], of: id)
      }
      try expectRefused(store, .valueTooLarge, containing: "the limit is 1048576 bytes") {
        $0.setText(String(repeating: "a", count: Limits.textBytes + 1), of: id)
      }
      try expectRefused(store, .valueTooLarge, containing: "the limit is 200") {
        $0.setTags([String(repeating: "t", count: 201)], of: id)
      }
      try expectRefused(store, .invalidValue, containing: "it has no bytes") {
        $0.addAttachment([], mimeType: "image/png", to: id)
      }
      try expectRefused(store, .invalidValue, containing: "type/subtype") {
        $0.addAttachment([1], mimeType: "png", to: id)
      }
      try expectRefused(store, .invalidValue, containing: "outside years 1 to 9999") {
        $0.setSortDate(Date(timeIntervalSince1970: 1e15), of: id)
      }
      try expectRefused(store, .invalidValue, containing: "control characters") {
        $0.setTags(["bad\u{0}tag"], of: id)
      }
      // The limit counts tags, not names: a note's 60 tags named again, in another case, with
      // one more, are 61 tags.
      let sixty = (1...60).map { "tag \($0)" }
      try store.write { $0.setTags(sixty, of: id) }
      try store.write { $0.setTags(sixty + sixty.map { $0.uppercased() } + ["one more"], of: id) }
      #expect(try store.note(id)?.tags.count == 61)
      try expectRefused(store, .valueTooLarge, containing: "101 tags; the limit is 100") {
        $0.setTags(sixty + (61...101).map { "tag \($0)" }, of: id)
      }
    }
  }

  @Test("an attachment of another note cannot be listed on this one")
  func foreignAttachment() async throws {
    try await withReplicas(1) { replicas in
      let store = replicas[0].store
      let (a, b, attachment) = try store.write { changes in
        let a = changes.createNote()
        let b = changes.createNote()
        return (a, b, changes.addAttachment([1], mimeType: "image/png", to: a))
      }
      _ = a
      try expectRefused(store, .invalidValue, containing: "belongs to note") {
        $0.setAttachments([attachment], of: b)
      }
    }
  }

  @Test("bytes that do not match their hash are refused and not stored")
  func blobMismatch() async throws {
    try await withReplicas(1) { replicas in
      let store = replicas[0].store
      let wrong = BlobHash(bytes: [UInt8](repeating: 1, count: 32))!
      let error = #expect(throws: VLogError.self) { try store.storeBlob([1, 2, 3], hash: wrong) }
      #expect(error?.code == .blobMismatch)
      #expect(try store.blob(wrong) == nil)
      let right = BlobHash(hex: "039058c6f2c0cb492c533b0a4d14ef77cc0f78abccced5287d84a1a2011cfb81")!
      try store.storeBlob([1, 2, 3], hash: right)
      #expect(try store.blob(right) == [1, 2, 3])
    }
  }

  @Test("a remote batch with one invalid event commits none of it")
  func invalidRemoteBatch() async throws {
    try await withReplicas(2) { replicas in
      let (store, other) = (replicas[0].store, replicas[1].store)
      try other.write { $0.createNote(text: "fine") }
      var events = try allEvents(other)
      let bad = Event(
        stamp: Stamp(time: HybridTime(milliseconds: 9, counter: 0), replica: other.replicaID),
        change: .tagsSet(NoteID(Identifier(high: 1, low: 1)), tags: [""]))
      events.append(bad)
      let error = #expect(throws: VLogError.self) { try store.ingest(events) }
      #expect(error?.message.hasPrefix("event 3 (") == true)
      #expect(try store.eventCount() == 0)
    }
  }
}

@Suite("A store opened read-only")
struct ReadOnlyStoreTests {
  @Test(
    "A store opened read-only reads as it is, refuses every write, and leaves its file byte for byte as it was; one of an older format is refused with what to do"
  )
  func readOnly() throws {
    try withTemporaryDirectory { path in
      let written = try NoteStore.open(at: path, options: .init(durability: .noSync))
      let note = try written.write { $0.createNote(text: "kept", tags: ["Paris"]) }
      written.close()
      let before = try Data(contentsOf: URL(fileURLWithPath: path + "/data.mdb"))

      var options = NoteStore.Options()
      options.isReadOnly = true
      options.retention = .period(.zero)
      let store = try NoteStore.open(at: path, options: options)
      #expect(try store.note(note)?.text == "kept")
      #expect(try store.tags().map(\.tag.name) == ["Paris"])
      #expect(throws: VLogError.self) { try store.verify() }
      #expect(throws: (any Error).self) { try store.write { _ = $0.createNote(text: "no") } }
      store.close()
      #expect(try Data(contentsOf: URL(fileURLWithPath: path + "/data.mdb")) == before)

      // A store of an older format needs a writable open first, to migrate.
      let old = try NoteStore.open(at: path, options: .init(durability: .noSync))
      try old.environment.write { transaction in
        try transaction.put(
          BigEndian.bytes(UInt32(7)), forKey: Keys.Meta.format, in: old.schema.meta)
      }
      old.close()
      #expect(throws: VLogError.self) { try NoteStore.open(at: path, options: options) }
    }
  }
}
