import Foundation
import PropertyBased
import Testing
import VLogTesting

@testable import VLog

@Suite("Versions: every text a note has had, restorable on every device")
struct VersionTests {
  /// What each replica's versions must say, from its log and its note alone: every text
  /// change of the note once, in stamp order, with its text; one shown (the note's text), the
  /// note's conflicts as conflicts, the rest replaced.
  private func checkVersions(of note: NoteID, in store: NoteStore) throws {
    let versions = try store.versions(of: note)
    let shown = try #require(try store.note(note))
    let changes = try store.history(of: note).filter { $0.logged.event.change.kind == .textSet }
    #expect(versions.map(\.stamp) == changes.map(\.logged.event.stamp).sorted())
    for version in versions {
      let event = try #require(changes.first { $0.logged.event.stamp == version.stamp })
      guard case .textSet(_, let text, let replacing) = event.logged.event.change else {
        Issue.record("not a text change")
        continue
      }
      #expect(version.text == text)
      #expect(version.replaced == Array(replacing ?? []))
    }
    #expect(versions.filter { $0.state == .shown }.map(\.stamp) == [shown.stamps.text])
    #expect(versions.first { $0.state == .shown }?.text == shown.text)
    #expect(
      Set(versions.filter { $0.state == .conflict }.map(\.stamp))
        == Set(shown.conflicts.map(\.stamp)))
  }

  @Test(
    "three devices edit, restore and sync in any order: each lists what its log holds, a restore shows the version and resolves every conflict, and after sync every device lists the same versions"
  )
  func restoreAndSync() async {
    await propertyCheck(count: 60, input: Gen.int(in: 0...59).array(of: 1...30)) { steps in
      do {
        try await withReplicas(3, seed: UInt64(steps.count)) { replicas in
          let stores = replicas.map(\.store)
          let note = try stores[0].write { $0.createNote(text: "first") }
          try exchange(stores[0], stores[1])
          try exchange(stores[0], stores[2])
          for (index, step) in steps.enumerated() {
            let replica = replicas[step % 3]
            replica.clock.advance(by: 1 + Double(step % 5))
            switch step / 3 % 4 {
            case 0, 1:
              try replica.store.write { $0.setText("text \(index)", of: note) }
            case 2:
              let versions = try replica.store.versions(of: note)
              let version = versions[step % versions.count]
              try replica.store.write { $0.restoreVersion(version.stamp, of: note) }
              let restored = try #require(try replica.store.note(note))
              #expect(restored.text == version.text)
              #expect(restored.conflicts.isEmpty, "a restore resolves every conflict")
            default:
              try exchange(replica.store, stores[(step + 1) % 3])
            }
            try checkVersions(of: note, in: replica.store)
          }
          for _ in 0..<2 {
            try exchange(stores[0], stores[1])
            try exchange(stores[1], stores[2])
          }
          let lists = try stores.map { try $0.versions(of: note) }
          #expect(lists[1] == lists[0] && lists[2] == lists[0])
          for store in stores { try checkVersions(of: note, in: store) }
        }
      } catch {
        Issue.record("\(error)")
      }
    }
  }

  @Test(
    "a restore is an edit: it undoes, and a version of another note, one the log lacks or one retention erased is refused, changing nothing"
  )
  func restoreRefusals() async throws {
    try await withReplicas(retentions: [.period(.zero)]) { replicas in
      let store = replicas[0].store
      let note = try store.write { $0.createNote(text: "one") }
      let other = try store.write { $0.createNote(text: "elsewhere") }
      try store.write { $0.setText("two", of: note) }
      let versions = try store.versions(of: note)
      // With retention 0, the replaced text is erased: listed without its words.
      #expect(versions.map(\.state) == [.erased, .shown])
      #expect(versions.map(\.text) == [nil, "two"])
      let before = try store.eventSetDigest()
      for stamp in [
        versions[0].stamp, try #require(try store.note(other)).stamps.text,
        Stamp(
          time: HybridTime(milliseconds: 1, counter: 0),
          replica: ReplicaID(Identifier(high: 1, low: 2))),
      ] {
        let error = #expect(throws: VLogError.self) {
          try store.write { $0.restoreVersion(stamp, of: note) }
        }
        #expect(error?.code == .versionNotFound)
      }
      #expect(try store.eventSetDigest() == before, "a refused restore writes nothing")
    }
    try await withReplicas(1) { replicas in
      let store = replicas[0].store
      let note = try store.write { $0.createNote(text: "one") }
      try store.write { $0.setText("two", of: note) }
      let first = try store.versions(of: note)[0]
      try store.write { $0.restoreVersion(first.stamp, of: note) }
      #expect(try store.note(note)?.text == "one")
      #expect(try store.versions(of: note).map(\.state) == [.replaced, .replaced, .shown])
      #expect(try store.undo())
      #expect(try store.note(note)?.text == "two")
    }
  }

  @Test("a deleted note has no versions, on the device that deleted it and on every other")
  func deletedNoteHasNone() async throws {
    try await withReplicas(2) { replicas in
      let (phone, laptop) = (replicas[0].store, replicas[1].store)
      let note = try phone.write { $0.createNote(text: "secret") }
      try phone.write { $0.setText("secret, edited", of: note) }
      try exchange(phone, laptop)
      #expect(try laptop.versions(of: note).count == 2, "the phone's edits, on the laptop")
      try laptop.write { $0.deleteNote(note) }
      try exchange(phone, laptop)
      for store in [phone, laptop] {
        let error = #expect(throws: VLogError.self) { try store.versions(of: note) }
        #expect(error?.code == .noteDeleted)
      }
    }
  }

  @Test("a live query of a note's versions yields again when an edit or a sync adds one")
  func liveVersions() async throws {
    try await withReplicas(2) { replicas in
      let (phone, laptop) = (replicas[0].store, replicas[1].store)
      let note = try await phone.write { $0.createNote(text: "one") }
      try exchange(phone, laptop)
      var iterator = phone.observe { try $0.versions(of: note) }.makeAsyncIterator()
      #expect(try await iterator.next()?.count == 1)
      try await phone.write { $0.setText("two", of: note) }
      #expect(try await iterator.next()?.count == 2)
      try await laptop.write { $0.setText("three", of: note) }
      try exchange(phone, laptop)
      let synced = try await iterator.next()
      #expect(synced?.count == 3)
      #expect(synced?.filter { $0.state == .conflict }.count == 1)
    }
  }
}
