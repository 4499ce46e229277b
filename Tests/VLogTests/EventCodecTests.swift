import Foundation
import Testing

@testable import VLog

@Suite("Event encoding")
struct EventCodecTests {
  static let stamp = Stamp(
    time: HybridTime(milliseconds: 1_767_225_600_123, counter: 7),
    replica: ReplicaID(Identifier(high: 0xAB, low: 0xCD)))
  static let note = NoteID(Identifier(high: 1, low: 2))
  static let attachment = AttachmentID(Identifier(high: 3, low: 4))
  static let hash = BlobHash(bytes: Array(0..<32))!

  static let changes: [Change] = [
    .noteCreated(note, creationDate: Date(milliseconds: 1_767_225_600_000)),
    .textSet(note, text: "Héllo, 世界 👋"),
    .textSet(note, text: ""),
    .textSet(note, text: "first", replacing: []),
    .textSet(
      note, text: "merged",
      replacing: [
        stamp,
        Stamp(
          time: HybridTime(milliseconds: 5, counter: 1),
          replica: ReplicaID(Identifier(high: 7, low: 7))),
      ]),
    .archivedSet(note, archived: true),
    .archivedSet(note, archived: false),
    .sortDateSet(note, sortDate: Date(milliseconds: -86_400_000)),
    .tagsSet(note, tags: ["Paris", "Travel plans"]),
    .tagsSet(note, tags: []),
    .attachmentsSet(note, attachments: [attachment, AttachmentID(Identifier(high: 9, low: 9))]),
    .attachmentsSet(note, attachments: []),
    .noteDeleted(note),
    .attachmentAdded(
      Attachment(
        id: attachment, noteID: note, mimeType: "image/jpeg", width: 4032, height: 3024,
        blobHash: hash, byteCount: 2_500_000)),
    .attachmentDeleted(attachment),
    .tagRenamed(name: "Paris"),
    .tagDeleted(name: "paris"),
  ]

  @Test(
    "every kind's fields after the kind read back as the event of the stamp and kind given; fields that carry a time, a replica or a kind of their own are malformed"
  )
  func fieldsAfterKind() throws {
    for change in Self.changes {
      let event = Event(stamp: Self.stamp, change: change)
      let fields = event.fieldsToSeal
      let back = try fields.withUnsafeBytes {
        try Event(stamp: Self.stamp, kind: change.kind, sealedFields: $0)
      }
      #expect(back == event, "\(change.kind)")
      // Each well formed, and the kind the same: only where it is makes it wrong.
      var time = ProtobufWriter()
      time.fixed64(EventCodec.Field.time, Self.stamp.time.rawValue)
      var replica = ProtobufWriter()
      replica.identifier(EventCodec.Field.replica, Self.stamp.replica.identifier)
      var kind = ProtobufWriter()
      kind.varint(EventCodec.Field.kind, change.kind.rawValue)
      for header in [time, replica, kind] {
        let forged = header.buffer + fields
        #expect(throws: VLogError.self, "\(header.buffer) in \(change.kind)") {
          try forged.withUnsafeBytes {
            try Event(stamp: Self.stamp, kind: change.kind, sealedFields: $0)
          }
        }
      }
    }
  }

  @Test(
    "a redacted event keeps its stamp, kind and ids, round-trips, and is refused with a value",
    arguments: changes)
  func redacted(change: Change) throws {
    let event = Event(stamp: Self.stamp, change: change)
    let redacted = event.redacted(.superseded)
    switch change {
    case .noteDeleted, .attachmentDeleted, .tagDeleted:
      #expect(!redacted.isRedacted)
      return
    default: break
    }
    #expect(redacted.redaction == .superseded)
    #expect(redacted.stamp == event.stamp && redacted.change.kind == change.kind)
    #expect(redacted.change.noteID == change.noteID)
    let bytes = redacted.encoded()
    // The header, one or two ids, the reason, and what a text change replaced.
    var replaced = 0
    if case .textSet(_, _, let base?) = change { replaced = 2 + base.count * Stamp.byteCount }
    #expect(bytes.count <= 70 + replaced)
    #expect(try Event(encoded: bytes) == redacted)
    #expect(redacted.redacted(.deleted) == redacted)
    // A redacted event that carries a value is refused, naming the field.
    var carrying = bytes
    carrying += [0x2A, 0x01, 0x78]  // field 5 (text), "x"
    #expect(throws: VLogError.self) { try Event(encoded: carrying) }
    // So is a reason of 0.
    var zero = ProtobufWriter()
    zero.buffer = Array(bytes.dropLast(2))
    zero.varint(15, 0)
    #expect(throws: VLogError.self) { try Event(encoded: zero.buffer) }
  }

  @Test(
    "the largest event every replica accepts fits the bound a store reads records with; one more byte of unknown fields is refused"
  )
  func largestEvent() throws {
    let replaced = ReplacedTexts(
      (0..<UInt64(Limits.replacedTexts)).map {
        Stamp(time: HybridTime(milliseconds: $0, counter: UInt16($0)), replica: Self.stamp.replica)
      })
    let text = String(repeating: "ü", count: Limits.textBytes / 2)
    // Field 99, length-delimited: what a newer version's field would look like.
    var unknown: [UInt8] = [0x9A, 0x06, 0x80, 0x80, 0x40]
    unknown += [UInt8](repeating: 0x61, count: Limits.unknownFieldBytes - unknown.count)
    let largest = Event(
      stamp: Self.stamp, change: .textSet(Self.note, text: text, replacing: replaced),
      unknownFields: unknown)
    try largest.validate()
    #expect(largest.encoded().count <= Limits.eventBytes)
    let tooMuch = Event(
      stamp: Self.stamp, change: .archivedSet(Self.note, archived: true),
      unknownFields: unknown + [0])
    #expect(throws: VLogError.self) { try tooMuch.validate() }

    // A record longer than the largest event is damage, refused before it is hashed.
    let entry = [UInt8](repeating: 0, count: LogRecord.maximumSize + 1)
    let refusal = #expect(throws: VLogError.self) {
      _ = try entry.withUnsafeBytes { try LogRecord.event(in: $0, sequence: 7) }
    }
    #expect(refusal?.code == .corruptStore)
    #expect(refusal?.message.contains("longer than the largest") == true)
  }

  @Test("a deletion marked redacted is refused")
  func redactedDeletion() {
    var writer = ProtobufWriter()
    EventCodec.encode(Event(stamp: Self.stamp, change: .noteDeleted(Self.note)), into: &writer)
    writer.varint(15, 1)
    #expect(throws: VLogError.self) { try Event(encoded: writer.buffer) }
  }

  @Test("every kind of change round-trips", arguments: changes)
  func roundTrip(change: Change) throws {
    let event = Event(stamp: Self.stamp, change: change)
    let bytes = EventCodec.encode(event)
    #expect(try EventCodec.decode(bytes) == event)
    #expect(EventCodec.encode(try EventCodec.decode(bytes)) == bytes)
  }

  @Test(
    "reading only the text gives a text change's text, and nothing for another kind, id or a redacted event",
    arguments: changes)
  func textOnly(change: Change) throws {
    func text(_ event: Event, _ stamp: Stamp) throws -> String? {
      try EventCodec.encode(event).withUnsafeBytes { bytes throws -> String? in
        try EventCodec.text(of: bytes, stamp: stamp)
      }
    }
    let event = Event(stamp: Self.stamp, change: change)
    let other = Stamp(time: Self.stamp.time, replica: ReplicaID(Identifier(high: 9, low: 9)))
    if case .textSet(_, let expected, _) = change {
      #expect(try text(event, Self.stamp) == expected)
    } else {
      #expect(try text(event, Self.stamp) == nil)
    }
    #expect(try text(event, other) == nil)
    if change.field != nil {
      #expect(try text(event.redacted(.superseded), Self.stamp) == nil)
    }
  }

  @Test("the encoding of a text change is compact and stable")
  func goldenBytes() throws {
    let bytes = EventCodec.encode(Event(stamp: Self.stamp, change: .textSet(Self.note, text: "hi")))
    let hex = Hex.string(bytes)
    // time (fixed64), replica (16 bytes), kind 2, note id (16 bytes), text "hi".
    #expect(
      hex == "09" + "07007ba8da769b01" + "1210" + "00000000000000ab00000000000000cd" + "1802"
        + "2210" + "00000000000000010000000000000002" + "2a02" + "6869")
    #expect(bytes.count == 51)
  }

  @Test("fields this version does not know are kept and written back verbatim")
  func unknownFieldsSurvive() throws {
    let known = EventCodec.encode(
      Event(stamp: Self.stamp, change: .archivedSet(Self.note, archived: true)))
    var writer = ProtobufWriter()
    writer.string(20, "a field from the future")
    writer.varint(21, 300)
    writer.fixed64(22, 0xDEAD_BEEF)
    let extra = writer.buffer
    let decoded = try EventCodec.decode(known + extra)
    #expect(decoded.change == .archivedSet(Self.note, archived: true))
    #expect(decoded.unknownFields == extra)
    #expect(EventCodec.encode(decoded) == known + extra)
  }

  @Test("an event of an unknown kind keeps every field and is written back unchanged")
  func unknownKindSurvives() throws {
    var writer = ProtobufWriter()
    writer.fixed64(1, Self.stamp.time.rawValue)
    writer.identifier(2, Self.stamp.replica.identifier)
    writer.varint(3, 77)
    writer.identifier(4, Self.note.identifier)
    writer.string(5, "meaning known only to a newer version")
    writer.varint(30, 1)
    let decoded = try EventCodec.decode(writer.buffer)
    #expect(decoded.change == .unknown(kind: EventKind(rawValue: 77)))
    #expect(!decoded.change.kind.isKnown)
    #expect(EventCodec.encode(decoded) == writer.buffer)
  }

  @Test("a known field that this kind does not use is kept as an unknown field")
  func unusedKnownFieldSurvives() throws {
    var writer = ProtobufWriter()
    writer.fixed64(1, Self.stamp.time.rawValue)
    writer.identifier(2, Self.stamp.replica.identifier)
    writer.varint(3, EventKind.noteDeleted.rawValue)
    writer.identifier(4, Self.note.identifier)
    writer.string(5, "a reason, in a newer version")
    let decoded = try EventCodec.decode(writer.buffer)
    #expect(decoded.change == .noteDeleted(Self.note))
    #expect(EventCodec.encode(decoded) == writer.buffer)
  }

  @Test(
    "malformed bytes are refused with an error naming what is wrong",
    arguments: [
      ([UInt8](), "missing time"),
      ([0x09, 1, 2, 3], "truncated"),
      ([0x0A, 0x05, 1], "field 1 (time) has wire type 2, expected 1"),
      ([0x09, 0, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x10, 1], "truncated: a 16-byte field"),
      ([0x0B], "unsupported wire type 3"),
      ([0x00], "invalid field number 0"),
      ([0x09, 0, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x03, 1, 2, 3], "replica: 3 bytes, expected 16"),
      ([0x08, 0x01], "field 1 (time) has wire type 0, expected 1"),
      (
        [0x18, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01],
        "longer than 64 bits"
      ),
    ])
  func malformed(bytes: [UInt8], expected: String) {
    let error = #expect(throws: VLogError.self) { try EventCodec.decode(bytes) }
    #expect(error?.code == .malformedEvent)
    #expect(error?.message.contains(expected) == true, "message: \(error?.message ?? "none")")
  }

  @Test("a known kind missing a required field is refused")
  func missingRequiredField() {
    var writer = ProtobufWriter()
    writer.fixed64(1, Self.stamp.time.rawValue)
    writer.identifier(2, Self.stamp.replica.identifier)
    writer.varint(3, EventKind.sortDateSet.rawValue)
    writer.identifier(4, Self.note.identifier)
    let error = #expect(throws: VLogError.self) { try EventCodec.decode(writer.buffer) }
    #expect(error?.message == "missing sortDateSet: sort date (field 7)")
  }

  @Test("text that is not UTF-8 is refused")
  func invalidUTF8() {
    var writer = ProtobufWriter()
    writer.fixed64(1, Self.stamp.time.rawValue)
    writer.identifier(2, Self.stamp.replica.identifier)
    writer.varint(3, EventKind.textSet.rawValue)
    writer.identifier(4, Self.note.identifier)
    writer.bytes(5, [0xC3, 0x28])
    let error = #expect(throws: VLogError.self) { try EventCodec.decode(writer.buffer) }
    #expect(error?.message == "text: not valid UTF-8")
  }

  @Test(
    "UTF-8 is validated as the standard library does, including invalid sequences whose repair is as long as they are"
  )
  func utf8Validation() {
    var cases: [[UInt8]] = [
      [], Array("Héllo, 世界 👋".utf8), Array("\u{FFFD}".utf8), [0xC3, 0x28], [0xFF],
      // A four-byte sequence cut after three bytes: repaired to one U+FFFD, three bytes too.
      [0xF0, 0x90, 0x80, 0x41], [0xF0, 0x90, 0x80], [0xE0, 0x80, 0x80], [0xED, 0xA0, 0x80],
      [0xEF, 0xBF, 0xBD], [0xEF, 0xBF], [0x41, 0xEF, 0xBF, 0xBD, 0xF4, 0x90, 0x80, 0x80],
    ]
    var generator = SystemRandomNumberGenerator()
    for _ in 0..<2_000 {
      let count = Int.random(in: 0...6, using: &generator)
      let pool: [UInt8] = [0x41, 0x80, 0xBF, 0xC2, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xFF, 0xBD, 0x90]
      cases.append((0..<count).map { _ in pool.randomElement(using: &generator)! })
    }
    for bytes in cases {
      let expected = String(validating: bytes, as: UTF8.self)
      let found = bytes.withUnsafeBytes { String(validUTF8: $0) }
      #expect(found == expected, "\(bytes.map { String($0, radix: 16) })")
    }
  }

  @Test("the log's hashes match XXH3's reference vectors, so stored checksums stay readable")
  func xxh3Vectors() {
    func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }
    #expect(Hash.xxh3([UInt8]()) == 0x2D06_8005_38D3_94C2)
    #expect(Hash.xxh3(bytes("abc")) == 0x78AF_5F94_892F_3950)
    #expect(
      Hash.xxh3(bytes("Nobody inspects the spammish repetition")) == 0x6CB0_0603_B5CC_47E9)
    let wide = bytes("Nobody inspects the spammish repetition").withUnsafeBytes {
      Hash.xxh3x128($0)
    }
    #expect(wide.high == 0xA32C_6F55_B80B_5F44 && wide.low == 0x9F1A_9575_2243_1B91)
    let legacy = bytes("abc").withUnsafeBytes { Hash.legacyXXH64($0) }
    #expect(legacy == 0x44BC_2CF5_AD77_0999)
  }

  @Test("the event-set digest does not depend on order and changes with every event")
  func eventSetDigest() {
    let stamps = (0..<50).map { index in
      Stamp(
        time: HybridTime(milliseconds: 1000, counter: UInt16(index)), replica: Self.stamp.replica)
    }
    var forward = EventSetDigest.empty
    var backward = EventSetDigest.empty
    var seen = Set<EventSetDigest>([.empty])
    for stamp in stamps {
      forward.add(stamp)
      #expect(seen.insert(forward).inserted)
    }
    for stamp in stamps.reversed() { backward.add(stamp) }
    #expect(forward == backward)
    #expect(EventSetDigest(hex: forward.description) == forward)
  }
}
