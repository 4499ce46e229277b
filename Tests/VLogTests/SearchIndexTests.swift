import Foundation
import PropertyBased
import Synchronization
import Testing
import VLogTesting

@testable import VLog

/// Texts and needles built from integers, over an alphabet with the characters that make
/// ignoring case and diacritics hard: precomposed and combining accents, ß, ligatures, dotted
/// and dotless i, final sigma, fullwidth letters.
enum RandomTexts {
  static let alphabet = [
    "a", "b", "c", "e", "f", "i", "s", "o", "A", "E", "S", " ", "\n", "é", "É", "e\u{301}", "ß",
    "ﬁ", "İ", "ı", "Σ", "ς", "Å", "ø", "æ", "œ", "Ａ", "ö", "Ö", "ñ", "ss", "fi", "caf",
  ]
  static let needleAlphabet = ["a", "b", "c", "e", "f", "i", "s", "o", "A", "E", "S", "ss", " "]

  static func text(_ seed: Int, length: Int) -> String {
    pick(length, from: alphabet, seed: UInt64(truncatingIfNeeded: seed) &* 0x9E37_79B9_7F4A_7C15)
  }

  static func needle(_ seed: Int) -> String {
    let value = UInt64(truncatingIfNeeded: seed) &* 0xD6E8_FEB8_6659_FD93
    return pick(2 + Int((value | 1) % 4), from: needleAlphabet, seed: value)
  }

  /// `count` pieces of `pieces` chosen by a xorshift generator started from `seed`.
  private static func pick(_ count: Int, from pieces: [String], seed: UInt64) -> String {
    var value = seed | 1
    var text = ""
    for _ in 0..<count {
      value ^= value << 13
      value ^= value >> 7
      value ^= value << 17
      text += pieces[Int(value % UInt64(pieces.count))]
    }
    return text
  }
}

@Suite("Text search index")
struct SearchIndexTests {
  @Test("every text a needle matches has every trigram of the needle")
  func trigramsAreASuperset() async {
    let checked = Atomic<Int>(0)
    await propertyCheck(count: 500, input: Gen.int(in: 0...Int(Int32.max)).array(of: 2...2)) {
      seeds in
      let text = RandomTexts.text(seeds[0], length: 30)
      let needle = RandomTexts.needle(seeds[1])
      guard let trigrams = SearchTrigrams.of(needle: needle) else { return }
      guard TextMatcher(needle).matches(text) else { return }
      checked.add(1, ordering: .relaxed)
      let indexed = Set(SearchTrigrams.of(text: text))
      #expect(
        trigrams.allSatisfy(indexed.contains),
        "\(String(reflecting: needle)) matches \(String(reflecting: text))")
    }
    #expect(checked.load(ordering: .relaxed) > 0)
  }

  @Test(
    "the index gives exactly the scan's results, with notes edited, archived and deleted between searches"
  )
  func indexEqualsScan() async throws {
    let compared = Atomic<Int>(0)
    await propertyCheck(count: 60, input: Gen.int(in: 0...Int(Int32.max)).array(of: 5...40)) {
      specs in
      try await withReplicas(1) { replicas in
        let store = replicas[0].store
        var notes: [NoteID] = []
        for (step, spec) in specs.enumerated() {
          try store.write { changes in
            let kind = notes.count > 2 ? spec % 6 : 5
            switch kind {
            case 0, 1:
              changes.setText(
                RandomTexts.text(spec, length: spec % 40), of: notes[spec % notes.count])
            case 2: changes.setArchived(spec % 4 == 0, of: notes[spec % notes.count])
            case 3: changes.deleteNote(notes.remove(at: spec % notes.count))
            default:
              notes.append(changes.createNote(text: RandomTexts.text(spec, length: 5 + spec % 60)))
            }
          }
          guard step % 3 == 0 else { continue }
          for query in 0..<4 {
            let needle = RandomTexts.needle(spec &+ query)
            let limit = 1 + (spec + query) % 6
            let trimmed = needle.trimmingCharacters(in: .whitespacesAndNewlines)
            let scanned =
              trimmed.isEmpty ? [] : try store.scan(for: TextMatcher(trimmed), limit: limit)
            #expect(try store.search(needle, limit: limit) == scanned, "needle \(needle)")
            compared.add(1, ordering: .relaxed)
          }
        }
        // A rebuild drops the index; the next search builds it again from the log.
        try store.rebuildProjections()
        for query in 0..<4 {
          let needle = RandomTexts.needle(query)
          let trimmed = needle.trimmingCharacters(in: .whitespacesAndNewlines)
          #expect(
            try store.search(needle, limit: 5)
              == store.scan(for: TextMatcher(trimmed), limit: trimmed.isEmpty ? 0 : 5))
        }
      }
    }
    #expect(compared.load(ordering: .relaxed) > 100)
  }

  @Test("the index is brought up to date once per batch of changes, each note reindexed once")
  func lazyUpdate() async throws {
    try await withReplicas(1) { replicas in
      let store = replicas[0].store
      let (a, b) = try store.write { changes in
        (changes.createNote(text: "alpha zephyr"), changes.createNote(text: "beta"))
      }
      #expect(try store.updateSearchIndex() == 2)
      #expect(try store.updateSearchIndex() == 0)
      for version in 0..<100 { try store.write { $0.setText("beta zephyr \(version)", of: b) } }
      try store.write { $0.setArchived(true, of: a) }
      #expect(try store.search("ZEPHYR").map(\.id).sorted() == [a, b].sorted())
      // The search brought the index up to date: note b once, for 100 edits.
      #expect(try store.updateSearchIndex() == 0)
      try store.write { $0.deleteNote(a) }
      #expect(try store.updateSearchIndex() == 1)
      #expect(try store.search("zephyr").map(\.id) == [b])
      #expect(try store.search("alpha").isEmpty)
    }
  }

  @Test("damaged search postings are errors, never traps")
  func damagedPostings() throws {
    for bytes: [UInt8] in [[], [0, 1], [1, 0, 0], [2], [1] + Array(repeating: 0, count: 1023)] {
      #expect(throws: VLogError.self) {
        try bytes.withUnsafeBytes { try PostingChunk.decode($0) }
      }
    }
    let offsets: [UInt16] = [0, 5, 8191]
    let many = (0..<600).map { UInt16($0 * 13) }
    for list in [offsets, many] {
      #expect(try PostingChunk.encode(list).withUnsafeBytes { try PostingChunk.decode($0) } == list)
    }
  }

  @Test("merging a posting chunk is set arithmetic")
  func mergeIsSetArithmetic() async {
    await propertyCheck(count: 300, input: Gen.int(in: 0...8191).array(of: 0...60).array(of: 3)) {
      lists in
      let stored = Array(Set(lists[0].map(UInt16.init))).sorted()
      let adding = Array(Set(lists[1].map(UInt16.init))).sorted()
      let removing = Array(Set(lists[2].map(UInt16.init)).subtracting(adding)).sorted()
      let expected = Set(stored).subtracting(removing).union(adding).sorted()
      #expect(PostingChunk.merge(stored, adding: adding, removing: removing) == expected)
    }
  }
}
