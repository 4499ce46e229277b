import Testing
import VLogTesting

@testable import VLog

@Suite("Text deltas: a text written as an edit of the one it replaces")
struct TextDeltaTests {
  /// A random text of `count` bytes of UTF-8, with multi-byte characters among them.
  static func text(_ count: Int, using generator: inout SeededGenerator) -> [UInt8] {
    let alphabet = ["a", "b", "c", " ", "d", "e", "\n", "é", "€", "😀"].map { Array($0.utf8) }
    var bytes: [UInt8] = []
    bytes.reserveCapacity(count + 4)
    while bytes.count < count {
      bytes += alphabet[Int.random(in: 0..<alphabet.count, using: &generator)]
    }
    return bytes
  }

  /// `base` edited at random: a few spans replaced, inserted or removed, as a writer's save.
  static func edited(_ base: [UInt8], using generator: inout SeededGenerator) -> [UInt8] {
    var bytes = base
    for _ in 0..<Int.random(in: 1...3, using: &generator) {
      let start = Int.random(in: 0...bytes.count, using: &generator)
      let removed = Int.random(in: 0...min(40, bytes.count - start), using: &generator)
      let inserted = text(Int.random(in: 0...40, using: &generator), using: &generator)
      bytes.replaceSubrange(start..<start + removed, with: inserted)
    }
    return bytes
  }

  @Test("Any edit round-trips: encoded, decoded and applied to its base, it makes the text")
  func roundTrip() throws {
    var generator = SeededGenerator(seed: 62)
    for round in 0..<500 {
      let base = Self.text(Int.random(in: 0...2_000, using: &generator), using: &generator)
      let result = round % 10 == 0 ? [] : Self.edited(base, using: &generator)
      let delta = TextDelta(from: base, to: result)
      let decoded = try TextDelta(decoding: delta.encoded)
      #expect(decoded == delta)
      #expect(try decoded.applied(to: base) == result)
    }
  }

  @Test("A save of a few characters costs them and a fixed overhead, whatever the note's size")
  func sizeGrowsWithTheEdit() throws {
    var generator = SeededGenerator(seed: 1)
    for size in [1_000, 100_000, 1 << 20 - 64] {
      let base = Self.text(size, using: &generator)
      var result = base
      let at = size / 3
      result.insert(contentsOf: Array("typed".utf8), at: at)
      let delta = TextDelta(from: base, to: result)
      #expect(delta.insertedCount == 5)
      #expect(delta.encoded.count <= delta.insertedCount + TextDelta.fixedBytes)
      #expect(try delta.applied(to: base) == result)
    }
  }

  @Test("Applied to another text than its base, a delta fails, never yields a wrong text")
  func wrongBase() throws {
    var generator = SeededGenerator(seed: 2)
    let base = Self.text(500, using: &generator)
    let result = Self.edited(base, using: &generator)
    let delta = TextDelta(from: base, to: result)
    var other = base
    other[250] = other[250] == UInt8(ascii: "a") ? UInt8(ascii: "b") : UInt8(ascii: "a")
    #expect(throws: VLogError.self) { try delta.applied(to: other) }
    #expect(throws: VLogError.self) { try delta.applied(to: Array(base.dropLast())) }
  }

  @Test(
    "Every truncation and every byte flipped of an encoding is an error or another delta, never a trap"
  )
  func malformed() throws {
    var generator = SeededGenerator(seed: 3)
    let base = Self.text(300, using: &generator)
    let encoded = TextDelta(from: base, to: Self.edited(base, using: &generator)).encoded
    for length in 0..<encoded.count {
      #expect(throws: VLogError.self) { try TextDelta(decoding: Array(encoded.prefix(length))) }
    }
    for index in encoded.indices {
      for bit in 0..<8 {
        var flipped = encoded
        flipped[index] ^= 1 << bit
        // A flip may decode (an inserted byte changed), but never applies to a wrong text.
        if let delta = try? TextDelta(decoding: flipped), let text = try? delta.applied(to: base) {
          #expect(text == (try TextDelta(decoding: encoded).applied(to: base)))
        }
      }
    }
    for _ in 0..<2_000 {
      let noise = (0..<Int.random(in: 0...64, using: &generator)).map { _ in
        UInt8.random(in: 0...255, using: &generator)
      }
      _ = try? TextDelta(decoding: noise).applied(to: base)
    }
  }

  @Test(
    "A copy past its base's end, lengths past the largest text and operations that make another length are refused"
  )
  func lengthsChecked() {
    let base = Array("hello".utf8)
    var bytes: [UInt8] = [TextDelta.format] + [UInt8](repeating: 0, count: 8) + [5]
    bytes += [UInt8](repeating: 0, count: 8) + [5]
    // A copy of 5 bytes from offset 1 of a 5-byte base.
    #expect(throws: VLogError.self) { try TextDelta(decoding: bytes + [10, 1]) }
    // An insertion of 6 bytes into a 5-byte result.
    #expect(throws: VLogError.self) { try TextDelta(decoding: bytes + [13] + Array("hello!".utf8)) }
    // Operations that make 4 bytes of a 5-byte result.
    #expect(throws: VLogError.self) { try TextDelta(decoding: bytes + [8, 0]) }
    // A length past the largest text.
    #expect(throws: VLogError.self) {
      try TextDelta(
        decoding: [TextDelta.format] + [UInt8](repeating: 0, count: 8) + [0x81, 0x80, 0x80, 0x01])
    }
    #expect(throws: VLogError.self) { try TextDelta(decoding: []) }
    #expect(throws: VLogError.self) { try TextDelta(decoding: [2]) }
    #expect(base.count == 5)
  }
}

@Suite("The long-notes workload: a writer's document and an app's autosaves")
struct WritingTraceTests {
  @Test("The trace has the statistics of the real one: its size, and its saves by each policy")
  func statistics() {
    // A tenth of the paper's keystrokes: a tenth of its saves, and of its growth.
    let keystrokes = 25_978
    let eager = Array(WritingTrace(keystrokes: keystrokes, policy: .eager))
    let lazy = Array(WritingTrace(keystrokes: keystrokes, policy: .lazy))
    #expect((1_150...1_550).contains(eager.count), "\(eager.count)")
    #expect((60...110).contains(lazy.count), "\(lazy.count)")
    #expect(eager.last?.text == lazy.last?.text)
    #expect((9_000...12_000).contains(eager.last?.text.count ?? 0))
    #expect(eager.map(\.time) == eager.map(\.time).sorted())
    // A save differs from the one before by about what was typed since.
    var inserted = 0
    for (earlier, later) in zip(eager, eager.dropFirst()) {
      inserted += TextDelta(from: earlier.text, to: later.text).insertedCount
    }
    #expect(inserted < keystrokes, "\(inserted)")
  }
}
