import Foundation
import PropertyBased
import Testing
import VLogTesting

@testable import VLog

@Suite("Model pieces")
struct ModelTests {
  @Test(
    "the detector finds links, addresses, phone numbers and dates, and not lookalikes",
    arguments: [
      ("see www.example.org.", [DetectedData.Kind.link], ["https://www.example.org"]),
      ("(https://swift.org/blog)", [.link], ["https://swift.org/blog"]),
      ("mail Ann.Lee+notes@Example.co.uk now", [.emailAddress], ["ann.lee+notes@example.co.uk"]),
      (
        "call 555-123-4567 or +44 20 7946 0958", [.phoneNumber, .phoneNumber],
        ["5551234567", "+442079460958"]
      ),
      ("on 2026-02-29 or 2028-02-29", [.date], ["2028-02-29"]),
      ("due 3/4/2026, paid 13/4/2026", [.date, .date], ["2026-03-04", "2026-04-13"]),
      ("March 3rd, 2026 and 14 Sept 2026", [.date, .date], ["2026-03-03", "2026-09-14"]),
      ("version 1.2.3, 42 apples, v12345", [], []),
      ("plain words only", [], []),
    ])
  func detector(text: String, kinds: [DetectedData.Kind], values: [String]) {
    let found = DataDetector.detect(in: text)
    #expect(found.map(\.kind) == kinds)
    #expect(found.map(\.value) == values)
    for data in found {
      let start = text.index(text.startIndex, offsetBy: data.range.lowerBound)
      let end = text.index(start, offsetBy: data.range.count)
      #expect(String(text[start..<end]) == data.text)
    }
  }

  @Test("ISO 8601 with milliseconds formats and parses, and refuses impossible dates")
  func iso8601() {
    #expect(ISO8601.format(milliseconds: 0) == "1970-01-01T00:00:00.000Z")
    #expect(ISO8601.format(milliseconds: 1_767_225_600_123) == "2026-01-01T00:00:00.123Z")
    #expect(ISO8601.format(milliseconds: -1) == "1969-12-31T23:59:59.999Z")
    for milliseconds: Int64 in [0, -1, 951_782_400_000, 253_402_300_799_999, -62_135_596_800_000] {
      #expect(ISO8601.parse(ISO8601.format(milliseconds: milliseconds)) == milliseconds)
    }
    #expect(ISO8601.parse("2026-01-01T00:00:00Z") == 1_767_225_600_000)
    #expect(ISO8601.parse("2026-01-01T00:00:00.5+00:00") == 1_767_225_600_500)
    // Every RFC 3339 form of a whole millisecond: offsets, either case, trailing zeros.
    let instant: Int64 = 1_795_460_215_477  // 2026-11-23T18:56:55.477Z
    for good in [
      "2026-11-23T18:56:55.477Z", "2026-11-23t18:56:55.477z", "2026-11-23T18:56:55.477000+00:00",
      "2026-11-23T18:56:55.4770-00:00", "2026-11-23T19:56:55.477+01:00",
      "2026-11-23T13:26:55.477000000-05:30", "2026-11-24T18:55:55.477+23:59",
    ] {
      #expect(ISO8601.parse(good) == instant, "\(good)")
    }
    #expect(ISO8601.format(milliseconds: instant) == "2026-11-23T18:56:55.477Z")
    // Finer than a millisecond: refused, and said so.
    for finer in ["2026-11-23T18:56:55.4771Z", "2026-11-23T18:56:55.477000001+00:00"] {
      #expect(ISO8601.parseChecked(finer) == .failure(.finerThanMillisecond), "\(finer)")
      #expect(ISO8601.problem(with: finer).contains("finer than a millisecond"))
    }
    for bad in [
      "2026-02-30T00:00:00Z", "2026-13-01T00:00:00Z", "2026-01-01 00:00:00Z",
      "2026-01-01T24:00:00Z", "2026-01-01T00:00:00.Z", "2026-01-01T00:00:00",
      "2026-01-01T00:00:00+24:00", "2026-01-01T00:00:00+01:60", "2026-01-01T00:00:00+0100",
      "2026-01-01T00:00:00+01:00Z", "2026-01-01T00:00:00Zz", "2026-02-30T00:00:00.0001Z",
      "yesterday",
    ] {
      #expect(ISO8601.parseChecked(bad) == .failure(.malformed), "accepted \(bad)")
      #expect(ISO8601.problem(with: bad).contains("is not a time like"))
    }
  }

  @Test("identifiers print as UUIDs and parse back, in either case")
  func identifiers() {
    let id = Identifier(high: 0x1B4E_28BA_2FA1_11D2, low: 0x883F_0016_D3CC_A427)
    #expect(id.description == "1b4e28ba-2fa1-11d2-883f-0016d3cca427")
    #expect(Identifier("1B4E28BA-2FA1-11D2-883F-0016D3CCA427") == id)
    #expect(Identifier("1b4e28ba2fa111d2883f0016d3cca427") == id)
    #expect(NoteID("1b4e28ba-2fa1-11d2-883f-0016d3cca427")?.identifier == id)
    for bad in [
      "", "1b4e28ba-2fa1-11d2-883f-0016d3cca42", "1b4e28ba-2fa1-11d2-883f-0016d3cca4270",
      "1b4e28ba-2fa1-11d2-883f_0016d3cca427", "zb4e28ba-2fa1-11d2-883f-0016d3cca427",
      "1b4e28ba2-fa1-11d2-883f-0016d3cca427",
    ] {
      #expect(Identifier(bad) == nil, "accepted \(bad)")
    }
    #expect(TagID(name: "  Travel   Plans ") == TagID(name: "travel plans"))
  }

  @Test("every identifier prints as its bytes' digits, hyphenated as a UUID, and parses back")
  func identifierRoundTrips() async {
    await propertyCheck(count: 1000, input: Gen.uint64(), Gen.uint64()) { high, low in
      let id = Identifier(high: high, low: low)
      let digits = Hex.string(id.bytes)
      let text = id.description
      #expect(text.replacingOccurrences(of: "-", with: "") == digits)
      #expect(text.utf8.count == 36)
      #expect(
        Array(text.utf8).indices.filter { Array(text.utf8)[$0] == UInt8(ascii: "-") } == [
          8, 13, 18, 23,
        ])
      #expect(Identifier(text) == id)
      #expect(Identifier(text.uppercased()) == id)
      #expect(Identifier(digits) == id)
    }
  }

  @Test("a tag name's ASCII fast path cleans and lowercases exactly as the character path does")
  func tagNameFastPath() async {
    // Bytes drawn from letters of both cases, digits, every ASCII whitespace byte and a few
    // others, so that runs, ends and mixtures of whitespace all occur.
    let alphabet = Array("aZq Q\t\n\r\u{0B}\u{0C}  -7".unicodeScalars)
    await propertyCheck(count: 1000, input: Gen.int(in: 0...(alphabet.count - 1)).array(of: 0...12))
    { picks in
      var name = ""
      name.unicodeScalars.append(contentsOf: picks.map { alphabet[$0] })
      #expect(
        TagName.clean(name) == TagName.cleanCharacters(name), "\(String(reflecting: name))")
      #expect(
        TagID.normalize(name) == TagName.cleanCharacters(name).lowercased(),
        "\(String(reflecting: name))")
    }
    // Not ASCII: the character path.
    #expect(TagName.cleanASCII(" Café ", lowercasing: true) == nil)
    #expect(TagID(name: " Café\u{2003}Noir ") == TagID(name: "café noir"))
  }

  @Test("the hybrid clock never goes back and counts within a millisecond")
  func hybridClock() throws {
    var clock = HybridClock()
    let ticks = [1000, 1000, 900].compactMap { clock.tick(wallMilliseconds: $0) }
    try #require(ticks.count == 3)
    let (first, second, third) = (ticks[0], ticks[1], ticks[2])
    #expect(first < second && second < third)
    #expect(third.milliseconds == 1000 && third.counter == 2)
    clock.observe(HybridTime(milliseconds: 5000, counter: 3))
    let afterRemote = clock.tick(wallMilliseconds: 1001)
    #expect(afterRemote == HybridTime(milliseconds: 5000, counter: 4))
    #expect(clock.tick(wallMilliseconds: 6000) == HybridTime(milliseconds: 6000, counter: 0))
    var saturated = HybridClock(latest: HybridTime(milliseconds: 7000, counter: .max))
    #expect(saturated.tick(wallMilliseconds: 7000) == HybridTime(milliseconds: 7001, counter: 0))
  }

  @Test("truncated text collapses whitespace and cuts at a word")
  func truncation() {
    #expect(Note.truncate("  Title\n\n  body   text ") == "Title body text")
    let long = String(repeating: "word ", count: 100)
    let cut = Note.truncate(long)
    #expect(cut.count <= Note.truncatedLength)
    #expect(cut.hasSuffix("word"))
  }

  @Test("the byte-wise truncation of ASCII text equals the character-wise one")
  func asciiTruncation() {
    var generator = SeededGenerator(seed: 9)
    let alphabet = Array("ab cd\n\t\r\u{0B}\u{0C}-.x")
    for _ in 0..<3000 {
      let length = Int(generator.next() % 400)
      let text = String(
        (0..<length).map { _ in alphabet[Int(generator.next() % UInt64(alphabet.count))] })
      #expect(Note.truncateASCII(text) == Note.truncateCharacters(text), "\(text.debugDescription)")
    }
    #expect(Note.truncateASCII("café") == nil)
    #expect(Note.truncate("  café \n au lait") == "café au lait")
  }
}
