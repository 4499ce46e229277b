import Foundation
import Testing
import VLog
import VLogSync

@Suite("Binary sync messages")
struct SyncBinaryTests {
  static let digest: EventSetDigest = {
    var digest = EventSetDigest.empty
    for event in GoldenEvents.events { digest.add(event.stamp) }
    return digest
  }()

  static let page = SyncPage(
    events: GoldenEvents.events, cursor: 11, more: true,
    serverTime: Date(milliseconds: 1_795_412_027_600), stored: 2, eventSetDigest: digest)

  static func hex(_ bytes: [UInt8]) -> String { Hex.string(bytes) }

  static func bytes(hex: String) throws -> [UInt8] {
    try #require(Hex.bytes(hex.filter { !$0.isWhitespace }))
  }

  static func fixture() throws -> String {
    let url = try #require(
      Bundle.module.url(forResource: "sync-page", withExtension: "hex", subdirectory: "Fixtures"))
    return try String(contentsOf: url, encoding: .utf8).filter { !$0.isWhitespace }
  }

  @Test("a page of every kind encodes to its golden bytes and decodes back to the same page")
  func goldenPage() throws {
    let encoded = Self.page.binaryEncoded()
    #expect(Self.hex(encoded) == (try Self.fixture()))
    #expect(try SyncPage(binary: try Self.bytes(hex: try Self.fixture())) == Self.page)
  }

  @Test("a push round-trips, unknown kinds and fields included")
  func pushRoundTrip() throws {
    let push = SyncPush(cursor: 42, events: GoldenEvents.events, limit: 500)
    let decoded = try SyncPush(binary: push.binaryEncoded(), maximumEvents: 100)
    #expect(decoded == push)
    let unlimited = SyncPush(cursor: 0, events: [])
    #expect(try SyncPush(binary: unlimited.binaryEncoded(), maximumEvents: 1) == unlimited)
    #expect(try SyncPush(binary: [], maximumEvents: 1) == unlimited)
  }

  @Test("the binary page is a fraction of the JSON one")
  func size() throws {
    let json = try JSONEncoder().encode(SyncResponse(Self.page))
    #expect(Self.page.binaryEncoded().count * 2 < json.count)
  }

  @Test("fields this version does not know are skipped")
  func unknownFields() throws {
    // Field 15 (varint 7) and field 16 (bytes "hi") before a push's cursor.
    let extra: [UInt8] = [0x78, 0x07, 0x82, 0x01, 0x02, 0x68, 0x69]
    let push = SyncPush(cursor: 3, events: Array(GoldenEvents.events.prefix(2)))
    #expect(try SyncPush(binary: extra + push.binaryEncoded(), maximumEvents: 10) == push)
    #expect(try SyncPage(binary: extra + Self.page.binaryEncoded()) == Self.page)
  }

  @Test(
    "malformed pushes are refused naming the field",
    arguments: [
      // Field 1 (cursor) sent as bytes.
      ([0x0A, 0x01, 0x00], "cursor: wire type 2, expected 0"),
      // A cursor beyond Int64.
      ([0x08, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01], "cursor: "),
      // A varint cut short.
      ([0x08, 0x80], "cursor: truncated"),
      // An event whose length runs past the end.
      ([0x12, 0x10, 0x09], "events[0]: truncated"),
      // An event of one unknown-type byte.
      ([0x12, 0x01, 0x07], "events[0]: unsupported wire type"),
      // An event with no stamp.
      ([0x12, 0x02, 0x18, 0x02], "events[0]: "),
      // Wire type 3 (groups) is not used.
      ([0x0B], "not a binary sync message"),
    ] as [([UInt8], String)])
  func malformedPush(bytes: [UInt8], expected: String) throws {
    let error = #expect(throws: WireError.self) {
      try SyncPush(binary: bytes, maximumEvents: 10)
    }
    #expect(error?.description.hasPrefix(expected) == true, "\(String(describing: error))")
  }

  @Test("a bad event after good ones is named by its index")
  func badEventIndex() throws {
    var bytes = SyncPush(cursor: 0, events: Array(GoldenEvents.events.prefix(2))).binaryEncoded()
    bytes += [0x12, 0x03, 0x09, 0x01, 0x02]
    let error = #expect(throws: WireError.self) { try SyncPush(binary: bytes, maximumEvents: 10) }
    #expect(error?.path == "events[2]")
  }

  @Test("too many events are refused before the rest is read")
  func tooMany() throws {
    let bytes = SyncPush(cursor: 0, events: GoldenEvents.events).binaryEncoded()
    let error = #expect(throws: WireError.self) { try SyncPush(binary: bytes, maximumEvents: 4) }
    #expect(error?.path == "events")
  }

  @Test("an event over the engine's limits is refused in either encoding, naming it")
  func valuesChecked() throws {
    let huge = Event(
      stamp: GoldenEvents.stamp(0),
      change: .textSet(GoldenEvents.note, text: String(repeating: "x", count: 2 << 20)))
    let push = SyncPush(cursor: 0, events: [GoldenEvents.events[0], huge])
    let binary = #expect(throws: WireError.self) {
      try SyncPush(binary: push.binaryEncoded(), maximumEvents: 10)
    }
    #expect(binary?.path == "events[1]")
    let json = #expect(throws: WireError.self) {
      try SyncRequest(push).validated(maximumEvents: 10)
    }
    #expect(json?.path == "events[1]")
  }

  @Test("a page without its server time or digest is refused")
  func pageRequiredFields() throws {
    var noDigest = Self.page.binaryEncoded()
    noDigest.removeLast(18)  // the digest field: tag, length, 16 bytes
    #expect(throws: WireError("eventSetDigest", "required")) { try SyncPage(binary: noDigest) }
    let onlyCursor: [UInt8] = [0x10, 0x05]
    #expect(throws: WireError("serverTime", "required")) { try SyncPage(binary: onlyCursor) }
  }

  @Test("media types and Accept headers choose the encoding")
  func negotiation() {
    #expect(SyncEncoding(contentType: "application/json; charset=utf-8") == .json)
    #expect(SyncEncoding(contentType: "Application/VND.vlog.sync") == .binary)
    #expect(SyncEncoding(contentType: "text/plain") == nil)
    #expect(SyncEncoding(accept: nil) == .json)
    #expect(SyncEncoding(accept: "*/*") == .json)
    #expect(SyncEncoding(accept: "application/vnd.vlog.sync, application/json") == .binary)
    // Spaces and tabs around a type and before its parameters, as HTTP allows.
    #expect(SyncEncoding(contentType: " \tapplication/vnd.vlog.sync \t; q=1") == .binary)
    #expect(SyncEncoding(contentType: "") == nil)
    #expect(SyncEncoding(contentType: " ; ") == nil)
    #expect(SyncEncoding(accept: "application/json,\tapplication/vnd.vlog.sync ;q=0.9") == .binary)
    #expect(SyncEncoding(accept: "application/vnd.vlog.syncx, text/vnd.vlog.sync") == .json)
  }
}
