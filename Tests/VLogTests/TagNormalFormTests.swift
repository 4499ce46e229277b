import Crypto
import Foundation
import LMDB
import Testing
import VLogTesting

@testable import VLog

/// A tag typed in two Unicode forms of one text — composed, decomposed, marks in another
/// order, another case — is one tag everywhere: its id, its key, every replica's state, a
/// rebuild and a replay in any order.
@Suite("Tags in every Unicode normal form")
struct TagNormalFormTests {
  /// Pieces of names, each in forms that are canonically equivalent: precomposed, decomposed,
  /// combining marks in either order, a singleton (the ångström sign) and another case.
  static let pieces: [[String]] = [
    ["caf\u{E9}", "cafe\u{301}", "CAF\u{C9}", "CAFE\u{301}"],
    ["\u{C5}ngstr\u{F6}m", "A\u{30A}ngstro\u{308}m", "\u{212B}ngstr\u{F6}m"],
    ["\u{1EC7}", "e\u{323}\u{302}", "e\u{302}\u{323}", "\u{1EB9}\u{302}", "\u{EA}\u{323}"],
    ["\u{D55C}\u{AE00}", "\u{1112}\u{1161}\u{11AB}\u{1100}\u{1173}\u{11AF}"],
    ["ni\u{F1}o", "nin\u{303}o", "NI\u{D1}O"],
    ["plain"],
  ]

  /// A name from one to three pieces, each in a form `generator` picks, with spaces between.
  static func name(
    of parts: [Int], using generator: inout some RandomNumberGenerator
  ) -> String {
    parts.map { pieces[$0].randomElement(using: &generator)! }.joined(separator: " ")
  }

  @Test(
    "Two replicas tag notes with a name in random canonically equivalent forms: one tag with every note, on both, the same after a rebuild, a replay in reverse and a verify",
    arguments: 0..<8)
  func property(seed: UInt64) async throws {
    var generator = SeededGenerator(seed: seed)
    let names = (0..<4).map { _ in
      (0..<Int.random(in: 1...3, using: &generator)).map { _ in
        Int.random(in: 0..<Self.pieces.count, using: &generator)
      }
    }
    let distinct = Set(names).count
    try await withReplicas(3, seed: seed) { replicas in
      let (a, b, fresh) = (replicas[0].store, replicas[1].store, replicas[2].store)
      var notes: [NoteID] = []
      for parts in names {
        let exchanged = notes
        for store in [a, b] {
          let spelled = Self.name(of: parts, using: &generator)
          notes.append(try store.write { $0.createNote(text: "n", tags: [spelled]) })
          // Added to a note both stores hold too, in a third form.
          if let other = exchanged.randomElement(using: &generator) {
            let again = Self.name(of: parts, using: &generator)
            try store.write { changes in
              changes.setTags((try store.note(other)?.tags.map(\.name) ?? []) + [again], of: other)
            }
          }
        }
        try exchange(a, b)
      }
      for store in [a, b] {
        let tags = try store.tags()
        #expect(tags.count == distinct, "\(tags.map(\.tag.name))")
        #expect(try store.verify().isEmpty)
      }
      #expect(try converged([a, b]))
      let digest = try a.stateDigest()
      _ = try a.rebuildProjections()
      #expect(try a.stateDigest() == digest)
      try fresh.ingest(try allEvents(a).reversed())
      #expect(try fresh.stateDigest() == digest)
      #expect(try fresh.verify().isEmpty)
      // Whichever form a query is typed in finds the tag.
      for parts in names {
        let typed = Self.name(of: parts, using: &generator)
        #expect(try !fresh.notes(taggedWith: typed).isEmpty, "\(typed.unicodeScalars.map(\.value))")
      }
    }
  }

  @Test(
    "A store of format 7, which filed a tag typed decomposed under the key of that form, is migrated on open: its events are filed again under the composed form's, and its state is a fresh replay's"
  )
  func storeFormat7() async throws {
    try withTemporaryDirectory { path in
      var store = try NoteStore.open(at: path, options: .init(durability: .noSync))
      _ = try store.write { $0.createNote(text: "n", tags: ["Cafe\u{301}"]) }
      let state = try store.stateDigest()
      let log = store.eventLog
      let composed = EventLog.tagObject(TagID(name: "caf\u{E9}"))
      // Format 7's key of the decomposed id: SHA-256 of "tag", a zero byte and its bytes.
      let decomposed = SHA256.hash(data: Array("tag\u{0}cafe\u{301}".utf8))
        .withUnsafeBytes { Identifier(bytes: $0) }
      #expect(decomposed != composed)
      let filed = try store.environment.read { try log.sequences(of: composed, in: $0) }
      #expect(filed.count == 1)
      try store.environment.write { transaction in
        for sequence in filed {
          _ = try transaction.delete(
            forKey: log.objectKey(composed, sequence: sequence), in: store.schema.objects)
          try transaction.put(
            [], forKey: log.objectKey(decomposed, sequence: sequence), in: store.schema.objects)
        }
        try transaction.put(
          BigEndian.bytes(UInt32(7)), forKey: Keys.Meta.format, in: store.schema.meta)
      }
      #expect(try store.environment.read { try log.sequences(of: composed, in: $0) }.isEmpty)
      store.close()

      store = try NoteStore.open(at: path, options: .init(durability: .noSync))
      defer { store.close() }
      let reopened = store.eventLog
      #expect(try store.environment.read { try reopened.sequences(of: composed, in: $0) } == filed)
      #expect(
        try store.environment.read { try reopened.sequences(of: decomposed, in: $0) }.isEmpty)
      #expect(try store.verify().isEmpty)
      #expect(try store.stateDigest() == state)
      #expect(try store.tags().map(\.tag.name) == ["Caf\u{E9}"])
    }
  }

  @Test(
    "A tag's removal by the key a version before format 8 gave a name typed decomposed removes the tag, from a list or an addition, and an addition after it wins, in any order of arrival, every replica alike"
  )
  func removalByDecomposedKey() async throws {
    let note = NoteID(Identifier(high: 0xA, low: 1))
    func stamp(_ time: UInt64, _ replica: UInt64) -> Stamp {
      Stamp(
        time: HybridTime(milliseconds: 1_790_000_000_000 + time, counter: 0),
        replica: ReplicaID(Identifier(high: 0xB, low: replica)))
    }
    // The key of an old device's removal: SHA-256 of "tag", a zero byte, the decomposed id.
    let legacy = TagKey(
      SHA256.hash(data: Array("tag\u{0}cafe\u{301}".utf8)).withUnsafeBytes {
        Identifier(bytes: $0)
      })
    #expect(TagKey(decomposedFormOf: TagID(name: "Caf\u{E9}")) == legacy)
    #expect(TagKey(decomposedFormOf: TagID(name: "plain")) == nil)
    let created = Event(stamp: stamp(1, 1), change: .noteCreated(note, creationDate: Date()))
    let cases: [(events: [Event], tags: [String])] = [
      // From a list.
      (
        [
          Event(stamp: stamp(2, 1), change: .tagsSet(note, tags: ["Caf\u{E9}", "work"])),
          Event(stamp: stamp(3, 2), change: .tagRemoved(note, tag: legacy)),
        ], ["work"]
      ),
      // From an addition.
      (
        [
          Event(stamp: stamp(2, 1), change: .tagAdded(note, name: "Caf\u{E9}")),
          Event(stamp: stamp(3, 2), change: .tagRemoved(note, tag: legacy)),
        ], []
      ),
      // Added again after it.
      (
        [
          Event(stamp: stamp(2, 1), change: .tagAdded(note, name: "Caf\u{E9}")),
          Event(stamp: stamp(3, 2), change: .tagRemoved(note, tag: legacy)),
          Event(stamp: stamp(4, 1), change: .tagAdded(note, name: "cafe\u{301}")),
        ], ["caf\u{E9}"]
      ),
    ]
    for (events, tags) in cases {
      var states: Set<StateDigest> = []
      for order in [events, events.reversed(), [events.last!] + events.dropLast()] {
        try await withTemporaryStore { store in
          _ = try await store.ingest([created])
          for event in order { _ = try await store.ingest([event]) }
          #expect(try store.note(note)?.tags.map(\.name) == tags, "\(order)")
          states.insert(try store.stateDigest())
          #expect(try store.verify().isEmpty)
        }
      }
      #expect(states.count == 1, "\(events)")
    }
  }

  @Test("A tag's id and key are those of its composed, lowercased form; its name is composed")
  func idsAndKeys() {
    for forms in Self.pieces {
      let ids = Set(forms.map { TagID(name: $0).rawValue.utf8.map { $0 } })
      #expect(ids.count == 1, "\(forms)")
      #expect(Set(forms.map { TagKey(name: $0) }).count == 1)
      for form in forms {
        let clean = TagName.clean(form)
        #expect(Array(clean.utf8) == Array(clean.precomposedStringWithCanonicalMapping.utf8))
      }
    }
    // A compatibility form is another tag: "ﬁ" is not "fi".
    #expect(TagID(name: "\u{FB01}le") != TagID(name: "file"))
  }
}
