import Foundation
import LMDB
import PropertyBased
import Synchronization
import Testing
import VLogTesting

@testable import VLog

/// Opens a store with retention 0 (every replaced value redacted as it is replaced: the most
/// the deferred projections leave the retention queue to do) in `root`.
private func openStore(at path: String, seed: UInt64) throws -> NoteStore {
  let clock = ManualClock()
  var options = NoteStore.Options(
    durability: .noSync, dependencies: .testing(clock: clock, seed: seed))
  options.retention = .period(.zero)
  return try NoteStore.open(at: path, options: options)
}

/// `events` cut into batches of 1 to 5, as a pull's pages.
private func pages(of events: [Event], seed: UInt64) -> [[Event]] {
  let identifiers = SeededIdentifiers(seed: seed)
  var pages: [[Event]] = []
  var index = 0
  while index < events.count {
    let size = Int(identifiers.next().low % 5) + 1
    pages.append(Array(events[index..<min(index + size, events.count)]))
    index += size
  }
  return pages
}

@Suite("Projections deferred: the log durable, the rest after it")
struct DeferredProjectionTests {
  @Test(
    "pages ingested with their projections deferred, then projected once, give the state of pages projected one by one; meanwhile readers see the state before them and verify finds nothing"
  )
  func deferredEqualsImmediate() async throws {
    let checked = Atomic<Int>(0)
    let deferredPages = Atomic<Int>(0)
    await propertyCheck(count: 100, input: RandomEvents.generator) { specs in
      checked.add(1, ordering: .relaxed)
      let events = RandomEvents.events(specs)
      try withTemporaryDirectory { root in
        let immediate = try openStore(at: root + "/immediate", seed: 1)
        let deferred = try openStore(at: root + "/deferred", seed: 2)
        defer {
          immediate.close()
          deferred.close()
        }
        let pages = pages(of: events, seed: UInt64(specs.count))
        // The first page projected, so that the lag starts from a state with notes.
        try immediate.ingest(pages[0])
        try deferred.ingest(pages[0])
        // Readers see the state of the last commit that projected: a page that deletes does.
        var shown = try deferred.stateDigest()
        for page in pages.dropFirst() {
          try immediate.ingest(page)
          let result = try deferred.ingest(page, deferringProjections: true)
          if try deferred.unprojectedEventCount() == 0 {
            shown = try deferred.stateDigest()
          } else {
            deferredPages.add(1, ordering: .relaxed)
            #expect(result.changes.isEmpty)
            #expect(try deferred.stateDigest() == shown, "a reader saw a deferred page")
          }
        }
        // Every read works meanwhile: none names content the log erased at a deferred commit.
        _ = try deferred.timeline(limit: 1000)
        _ = try deferred.archivedNotes(limit: 1000)
        _ = try deferred.search("text")
        for note in RandomEvents.notes { _ = try deferred.note(note) }
        let lagging = try deferred.verify()
        #expect(lagging.isEmpty, "\(lagging)")
        try deferred.bringProjectionsUpToDate()
        #expect(try deferred.eventSetDigest() == immediate.eventSetDigest())
        #expect(
          try deferred.stateDigest() == immediate.stateDigest(),
          "diverged on \(events.map(\.description))")
        #expect(try deferred.verify().isEmpty)
        // What each event keeps, not why it was redacted: that depends on which of a
        // deletion and a replacement was applied first, as it does between replicas.
        func erasure(_ store: NoteStore) throws -> [Event?] {
          try allEvents(store).map { $0.isRedacted ? nil : $0 }
        }
        #expect(try erasure(deferred) == erasure(immediate), "erasure differs")
      }
    }
    #expect(checked.load(ordering: .relaxed) >= 100)
    #expect(deferredPages.load(ordering: .relaxed) > 100, "few pages were deferred")
  }

  @Test("a user write while the projections lag builds on every event of the log")
  func writeCatchesUp() async throws {
    try await withReplicas(2) { replicas in
      let (phone, laptop) = (replicas[0].store, replicas[1].store)
      let id = try phone.write { $0.createNote(text: "from the phone", tags: ["Trip"]) }
      try laptop.ingest(allEvents(phone), deferringProjections: true)
      #expect(try laptop.note(id) == nil)
      // The edit resolves against the note's record, which only the deferred page made.
      try laptop.write { edits in edits.setText("edited on the laptop", of: id) }
      let note = try #require(try laptop.note(id))
      #expect(note.text == "edited on the laptop" && note.tags.map(\.name) == ["Trip"])
      #expect(try laptop.verify().isEmpty)
    }
  }

  @Test(
    "a page that deletes a note projects with it: the log erases the note's content at that commit, and every read works"
  )
  func deletionProjects() async throws {
    try await withReplicas(2) { replicas in
      let (phone, laptop) = (replicas[0].store, replicas[1].store)
      let kept = try phone.write { $0.createNote(text: "kept") }
      let gone = try phone.write { $0.createNote(text: "zephyr, soon deleted") }
      try laptop.ingest(allEvents(phone))
      _ = try laptop.search("zephyr")
      try phone.write { $0.setText("kept, edited", of: kept) }
      try phone.write { $0.deleteNote(gone) }
      let events = try allEvents(phone).suffix(2)
      // The edit alone is deferred; the page with the deletion projects both.
      try laptop.ingest([events.first!], deferringProjections: true)
      #expect(try laptop.note(kept)?.text == "kept")
      let result = try laptop.ingest([events.last!], deferringProjections: true)
      #expect(result.changes.deletedNotes == [gone] && result.changes.updatedNotes == [kept])
      #expect(try laptop.unprojectedEventCount() == 0)
      #expect(try laptop.note(gone) == nil && laptop.note(kept)?.text == "kept, edited")
      #expect(try laptop.timeline().map(\.id) == [kept])
      #expect(try laptop.search("zephyr").isEmpty)
    }
  }

  @Test(
    "a user write that brings the projections up to date tells observers of the events from elsewhere first, as from sync"
  )
  func writeTellsCaughtUpAsSync() async throws {
    try await withReplicas(2) { replicas in
      let (phone, laptop) = (replicas[0].store, replicas[1].store)
      let remote = try await phone.write { $0.createNote(text: "from the phone") }
      try await laptop.ingest(allEvents(phone), deferringProjections: true)
      var changes = laptop.changes().makeAsyncIterator()
      let local = try await laptop.write { $0.createNote(text: "on the laptop") }
      let first = try await #require(changes.next())
      let second = try await #require(changes.next())
      #expect(first.source == .sync && first.insertedNotes == [remote] && first.eventCount == 2)
      #expect(second.source == .user && second.insertedNotes == [local])
    }
  }

  @Test("a change set tells of the deferred pages once they are projected")
  func observersToldOnce() async throws {
    try await withReplicas(2) { replicas in
      let (phone, laptop) = (replicas[0].store, replicas[1].store)
      let ids = try phone.write { edits in
        (0..<3).map { edits.createNote(text: "note \($0)") }
      }
      let events = try allEvents(phone)
      let first = try laptop.ingest(Array(events.prefix(2)), deferringProjections: true)
      #expect(first.changes.isEmpty && first.appended == 2)
      let last = try laptop.ingest(Array(events.dropFirst(2)))
      #expect(last.changes.insertedNotes == Set(ids))
      #expect(last.changes.eventCount == events.count)
    }
  }

  @Test("a store reopened after a deferred page brings its projections up to date")
  func reopenCatchesUp() throws {
    try withTemporaryDirectory { root in
      let source = try openStore(at: root + "/source", seed: 1)
      defer { source.close() }
      let id = try source.write { $0.createNote(text: "zephyr", tags: ["Paris"]) }
      try source.write { $0.setText("zephyr again", of: id) }
      var store = try openStore(at: root + "/store", seed: 2)
      try store.ingest(allEvents(source), deferringProjections: true)
      #expect(try store.search("zephyr").isEmpty, "search ran ahead of the projections")
      #expect(try store.statistics().unprojectedEvents == store.eventCount())
      store.close()
      store = try openStore(at: root + "/store", seed: 2)
      defer { store.close() }
      #expect(try store.note(id)?.text == "zephyr again")
      #expect(try store.search("zephyr").map(\.id) == [id])
      #expect(try store.bringProjectionsUpToDate() == 0)
      let digest = try store.stateDigest()
      try store.rebuildProjections()
      #expect(try store.stateDigest() == digest)
      #expect(try store.stateDigest() == source.stateDigest())
      // Retention 0: the replaced text was redacted when its replacement was projected.
      #expect(try store.versions(of: id).filter { $0.text != nil }.count == 1)
    }
  }

  @Test("past the lag limit, a deferred ingest projects: a long pull shows its progress")
  func lagLimit() throws {
    try withTemporaryDirectory { root in
      var options = NoteStore.Options(durability: .noSync)
      options.projectionLagLimit = 10
      let store = try NoteStore.open(at: root + "/store", options: options)
      defer { store.close() }
      let replica = ReplicaID(Identifier(high: 7, low: 7))
      var shown: [Int] = []
      for page in 0..<6 {
        let events = (0..<4).map { index in
          Event(
            stamp: Stamp(
              time: HybridTime(milliseconds: UInt64(1_000 + page * 10 + index), counter: 0),
              replica: replica),
            change: .noteCreated(
              NoteID(Identifier(high: 8, low: UInt64(page * 10 + index))),
              creationDate: Date(milliseconds: 1_000)))
        }
        try store.ingest(events, deferringProjections: true)
        shown.append(try store.timeline(limit: 100).count)
      }
      // Pages of 4: the session that finds 12 events unprojected projects them with its own.
      #expect(shown == [0, 0, 0, 16, 16, 16])
      #expect(try store.unprojectedEventCount() == 8)
    }
  }

  @Test(
    "a damaged record that stops the catch-up: verify names it, and opening rebuilds the projections from the log"
  )
  func damagedRecordDuringLag() throws {
    try withTemporaryDirectory { root in
      let source = try openStore(at: root + "/source", seed: 1)
      defer { source.close() }
      let id = try source.write { $0.createNote(text: "first") }
      let created = try allEvents(source)
      try source.write { $0.setText("second", of: id) }
      let edit = try allEvents(source).suffix(1)
      var options = NoteStore.Options(durability: .noSync)
      options.bringsProjectionsUpToDateOnOpen = false
      var store = try NoteStore.open(at: root + "/store", options: options)
      try store.ingest(created)
      try store.ingest(Array(edit), deferringProjections: true)
      try store.environment.write { transaction in
        try transaction.put([0xFF, 0x00], forKey: id.identifier.bytes, in: store.schema.notes)
      }
      let faults = try store.verify()
      #expect(faults.map(\.kind) == [.projection], "\(faults)")
      #expect(faults.first?.message.contains("cannot be brought up to date") == true)
      store.close()
      store = try NoteStore.open(
        at: root + "/store", options: NoteStore.Options(durability: .noSync))
      defer { store.close() }
      #expect(try store.unprojectedEventCount() == 0)
      #expect(try store.note(id)?.text == "second")
      let after = try store.verify()
      #expect(after.isEmpty, "\(after)")
    }
  }
}
