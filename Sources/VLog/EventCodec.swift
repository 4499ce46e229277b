internal import Foundation

/// The binary encoding of events: compact, versioned by field numbers, and lossless for fields
/// a version does not know.
///
/// The encoding is the protocol-buffers wire format (varints, fixed 64-bit values and
/// length-delimited bytes under numbered fields), written and read by hand so that decoding
/// needs no schema compiler and allocates only for strings and lists. Field numbers:
///
/// | # | wire type | meaning | used by |
/// |---|---|---|---|
/// | 1 | fixed64 | hybrid time | all |
/// | 2 | bytes (16) | replica id | all |
/// | 3 | varint | kind | all |
/// | 4 | bytes (16) | note or attachment id | all but tagRenamed, tagDeleted, tagErased |
/// | 5 | string | text, tag name, or media type | textSet, tagRenamed, tagDeleted, tagAdded, attachmentAdded |
/// | 6 | varint | archived (0 or 1) | archivedSet |
/// | 7 | zigzag varint | date in ms since 1970 | noteCreated, sortDateSet |
/// | 8 | string, repeated | tag names | tagsSet |
/// | 9 | bytes (16 × n) | attachment ids | attachmentsSet |
/// | 10 | bytes (16) | the attachment's note | attachmentAdded |
/// | 11, 12 | varint | width, height | attachmentAdded |
/// | 13 | bytes (32) | SHA-256 of the bytes | attachmentAdded |
/// | 14 | varint | byte count | attachmentAdded |
/// | 15 | varint | redaction reason (1 deleted, 2 superseded) | redacted events |
/// | 16 | bytes (24 × n) | the stamps of the texts a text change replaced; absent if it recorded none, empty if it replaced none | textSet |
/// | 17 | bytes (16) | a tag's key (``TagKey``) | tagRemoved, tagErased |
/// | 18 | bytes | the event's values, sealed on the device of an end-to-end encrypted account (``Event/sealedValues``); kept and forwarded as a field this version does not interpret | events of encrypted accounts |
/// | 19 | bytes (16) | what the devices of an end-to-end encrypted account vouch for the event with (``Event/authenticator``): kept through redaction | events of encrypted accounts |
///
/// A redacted event (``Event/redaction``) carries the header, the ids (4, and 10 for
/// `attachmentAdded`; 16 for a `textSet`: what it replaced stays replaced), field 15 and, if
/// the event had one, its authenticator (19), and nothing else: a decoder refuses one that
/// carries a value.
///
/// Written by hand rather than with swift-protobuf because it is faster on VLog's own events:
/// suite `Codec` in `Benchmarks/` (the events of a 100,000-operation notes workload, byte-identical
/// encodings, release build, medians) decodes them to checked `Event`s in 53 ms against
/// swift-protobuf's 115 ms through a generated message (97 k against 561 k allocations), and
/// encodes them in 51 ms against 114 ms (198 k against 588 k allocations).
///
/// Known fields are written in this order with default values omitted; fields a kind does not
/// use, and for kinds this version does not know every field after the kind, are kept verbatim
/// in ``Event/unknownFields`` and written after the known ones. Decoders accept fields in any
/// order.
package enum EventCodec {
  enum Field {
    static let time = 1
    static let replica = 2
    static let kind = 3
    static let entity = 4
    static let text = 5
    static let flag = 6
    static let date = 7
    static let names = 8
    static let ids = 9
    static let owner = 10
    static let width = 11
    static let height = 12
    static let hash = 13
    static let byteCount = 14
    static let redaction = 15
    static let base = 16
    static let tagKey = 17
    static let sealedValues = 18
    static let authenticator = 19
  }

  // MARK: Encoding

  package static func encode(_ event: Event) -> [UInt8] {
    var writer = ProtobufWriter()
    writer.buffer.reserveCapacity(estimatedSize(of: event))
    encode(event, into: &writer)
    return writer.buffer
  }

  /// About the size of `event`'s encoding, at least that of most events: what a buffer for it
  /// reserves, so that it grows once at most.
  private static func estimatedSize(of event: Event) -> Int {
    var size = 64 + event.unknownFields.count
    if case .textSet(_, let text, let base) = event.change {
      size += text.utf8.count + 3 + (base?.count ?? 0) * Stamp.byteCount
    }
    return size
  }

  static func encode(_ event: Event, into writer: inout ProtobufWriter) {
    writer.fixed64(Field.time, event.stamp.time.rawValue)
    writer.identifier(Field.replica, event.stamp.replica.identifier)
    writer.varint(Field.kind, event.change.kind.rawValue)
    encodeFields(of: event, into: &writer)
  }

  /// An event's encoded fields after its kind: what a version that does not know the kind
  /// keeps of it, as ``Event/unknownFields``.
  package static func fieldsAfterKind(of event: Event) -> [UInt8] {
    var writer = ProtobufWriter()
    writer.buffer.reserveCapacity(estimatedSize(of: event))
    encodeFields(of: event, into: &writer)
    return writer.buffer
  }

  private static func encodeFields(of event: Event, into writer: inout ProtobufWriter) {
    if let redaction = event.redaction {
      writeRedactedIDs(of: event.change, into: &writer)
      writer.varint(Field.redaction, redaction.rawValue)
      // A redacted event's unknown fields are those redaction keeps: its authenticator.
      writer.buffer.append(contentsOf: event.unknownFields)
      return
    }
    switch event.change {
    case .noteCreated(let id, let date):
      writer.identifier(Field.entity, id.identifier)
      writer.signed(Field.date, date.milliseconds)
    case .textSet(let id, let text, let base):
      writer.identifier(Field.entity, id.identifier)
      if !text.isEmpty { writer.string(Field.text, text) }
      if let base { writeBase(base, into: &writer) }
    case .archivedSet(let id, let archived):
      writer.identifier(Field.entity, id.identifier)
      if archived { writer.varint(Field.flag, 1) }
    case .sortDateSet(let id, let date):
      writer.identifier(Field.entity, id.identifier)
      writer.signed(Field.date, date.milliseconds)
    case .tagsSet(let id, let tags):
      writer.identifier(Field.entity, id.identifier)
      for tag in tags { writer.string(Field.names, tag) }
    case .attachmentsSet(let id, let attachments):
      writer.identifier(Field.entity, id.identifier)
      if !attachments.isEmpty {
        writer.tag(Field.ids, .lengthDelimited)
        writer.rawVarint(UInt64(attachments.count * 16))
        for attachment in attachments { attachment.identifier.append(to: &writer.buffer) }
      }
    case .noteDeleted(let id):
      writer.identifier(Field.entity, id.identifier)
    case .attachmentAdded(let attachment):
      writer.identifier(Field.entity, attachment.id.identifier)
      writer.string(Field.text, attachment.mimeType)
      writer.identifier(Field.owner, attachment.noteID.identifier)
      if attachment.width != 0 { writer.varint(Field.width, UInt64(attachment.width)) }
      if attachment.height != 0 { writer.varint(Field.height, UInt64(attachment.height)) }
      writer.bytes(Field.hash, attachment.blobHash.bytes)
      if attachment.byteCount != 0 { writer.varint(Field.byteCount, UInt64(attachment.byteCount)) }
    case .attachmentDeleted(let id):
      writer.identifier(Field.entity, id.identifier)
    case .tagRenamed(let name), .tagDeleted(let name):
      writer.string(Field.text, name)
    case .tagAdded(let id, let name):
      writer.identifier(Field.entity, id.identifier)
      writer.string(Field.text, name)
    case .tagRemoved(let id, let tag):
      writer.identifier(Field.entity, id.identifier)
      writer.identifier(Field.tagKey, tag.identifier)
    case .tagErased(let tag):
      writer.identifier(Field.tagKey, tag.identifier)
    case .unknown:
      break
    }
    writer.buffer.append(contentsOf: event.unknownFields)
  }

  /// The ids a redacted event of `change` carries: the note's (4), an attachment's and its
  /// note's (4 and 10), a text change's and what it replaced (4 and 16), or none (a rename).
  private static func writeRedactedIDs(of change: Change, into writer: inout ProtobufWriter) {
    switch change {
    case .attachmentAdded(let attachment):
      writer.identifier(Field.entity, attachment.id.identifier)
      writer.identifier(Field.owner, attachment.noteID.identifier)
    case .tagRenamed: break
    case .textSet(let id, _, let base):
      writer.identifier(Field.entity, id.identifier)
      if let base { writeBase(base, into: &writer) }
    default:
      if let note = change.noteID { writer.identifier(Field.entity, note.identifier) }
    }
  }

  /// What an event's authenticator (``Event/authenticator``) vouches for, encoded: the header
  /// (time, replica, kind) and the ids its redacted form keeps — or, for a kind that is never
  /// redacted (a deletion), every known field. Redaction, retention and a log's stripping of
  /// deleted tags from a tags list leave these bytes as they are, so an authenticator made
  /// when the event was written holds for every form a log stores of it.
  package static func authenticatedBytes(of event: Event) -> [UInt8] {
    var writer = ProtobufWriter()
    writer.buffer.reserveCapacity(64)
    writer.fixed64(Field.time, event.stamp.time.rawValue)
    writer.identifier(Field.replica, event.stamp.replica.identifier)
    writer.varint(Field.kind, event.change.kind.rawValue)
    if let stripped = event.change.withoutPayload {
      writeRedactedIDs(of: stripped, into: &writer)
    } else {
      encodeFields(of: Event(stamp: event.stamp, change: event.change), into: &writer)
    }
    return writer.buffer
  }

  /// Field 16 alone, encoded: how a sync server hands what a text change replaced to a client
  /// that does not know the field, as a field it keeps and forwards.
  package static func encodedBase(_ base: ReplacedTexts) -> [UInt8] {
    var writer = ProtobufWriter()
    writeBase(base, into: &writer)
    return writer.buffer
  }

  /// Field 16: the stamps, present even when there are none (a text that replaced none).
  private static func writeBase(_ base: ReplacedTexts, into writer: inout ProtobufWriter) {
    writer.tag(Field.base, .lengthDelimited)
    writer.rawVarint(UInt64(base.count * Stamp.byteCount))
    for stamp in base { stamp.append(to: &writer.buffer) }
  }

  // MARK: Decoding

  /// Decodes an event.
  ///
  /// - Throws: ``VLogError/Code/malformedEvent`` naming the field that is wrong.
  package static func decode(_ bytes: UnsafeRawBufferPointer) throws(VLogError) -> Event {
    try decode(bytes, skippingText: false)
  }

  /// Decodes an event; with `skippingText`, a `textSet` event's text is checked for length
  /// only and decoded as empty — for readers that need where a text is, not what it says.
  package static func decode(_ bytes: UnsafeRawBufferPointer, skippingText: Bool)
    throws(VLogError) -> Event
  {
    var fields = DecodedFields()
    fields.skipsText = skippingText
    return try decode(bytes, into: &fields, fieldsAfter: 0)
  }

  /// Decodes the event of `stamp` and `kind` whose fields after the kind are `bytes`, as
  /// ``fieldsAfterKind(of:)`` wrote them.
  ///
  /// - Throws: ``VLogError/Code/malformedEvent`` naming the field that is wrong; a time, a
  ///   replica or a kind among `bytes` is.
  package static func decode(
    stamp: Stamp, kind: EventKind, fieldsAfterKind bytes: UnsafeRawBufferPointer
  )
    throws(VLogError) -> Event
  {
    var fields = DecodedFields()
    fields.time = stamp.time.rawValue
    fields.replica = stamp.replica.identifier
    fields.kind = kind.rawValue
    return try decode(bytes, into: &fields, fieldsAfter: Field.kind)
  }

  /// Reads `bytes`' fields into `fields`, each numbered above `floor`, and makes the event.
  private static func decode(
    _ bytes: UnsafeRawBufferPointer, into fields: inout DecodedFields, fieldsAfter floor: Int
  ) throws(VLogError) -> Event {
    var reader = ProtobufReader(bytes)
    while !reader.isAtEnd {
      let fieldStart = reader.offset
      let (number, wireType) = try reader.tag()
      guard number > floor else {
        throw VLogError(.malformedEvent, "field \(number) is not after field \(floor)")
      }
      try fields.read(number, wireType, from: &reader, fieldStart: fieldStart)
    }
    return try fields.event(from: bytes)
  }

  /// The text of an encoded `textSet` event with the id `stamp`, read without decoding the
  /// rest of the event; nil if the bytes are another event, another kind, or redacted.
  ///
  /// - Throws: ``VLogError/Code/malformedEvent`` for bytes that are not an event.
  package static func text(of bytes: UnsafeRawBufferPointer, stamp: Stamp) throws(VLogError)
    -> String?
  {
    guard let text = try textBytes(of: bytes, stamp: stamp) else { return nil }
    guard let string = String(validUTF8: text) else {
      throw VLogError(.malformedEvent, "text: not valid UTF-8")
    }
    return string
  }

  /// The UTF-8 bytes of ``text(of:stamp:)``, within `bytes`, not validated.
  package static func textBytes(of bytes: UnsafeRawBufferPointer, stamp: Stamp)
    throws(VLogError) -> UnsafeRawBufferPointer?
  {
    var reader = ProtobufReader(bytes)
    var time: UInt64?
    var replica: Identifier?
    var kind: UInt64?
    var text = UnsafeRawBufferPointer(start: nil, count: 0)
    while !reader.isAtEnd {
      let (number, wireType) = try reader.tag()
      switch (number, wireType) {
      case (Field.time, .fixed64): time = try reader.fixed64()
      case (Field.replica, .lengthDelimited): replica = try reader.identifier("replica")
      case (Field.kind, .varint): kind = try reader.varint()
      case (Field.text, .lengthDelimited): text = try reader.lengthDelimited()
      case (Field.redaction, _): return nil
      default: try reader.skip(wireType)
      }
    }
    guard time == stamp.time.rawValue, replica == stamp.replica.identifier,
      kind == EventKind.textSet.rawValue
    else { return nil }
    return text
  }

  /// Decodes an event from an array of bytes.
  package static func decode(_ bytes: [UInt8]) throws(VLogError) -> Event {
    try withBytes(of: bytes) { buffer throws(VLogError) in try decode(buffer) }
  }

  /// The fields of one encoded event, as read.
  struct DecodedFields {
    var time: UInt64?
    var replica: Identifier?
    var kind: UInt64?
    var entity: Identifier?
    var text: String?
    var flag: UInt64?
    var date: Int64?
    var names: [String] = []
    var ids: [Identifier] = []
    var owner: Identifier?
    var width: UInt64?
    var height: UInt64?
    var hash: [UInt8]?
    var byteCount: UInt64?
    var redaction: UInt64?
    var base: ReplacedTexts?
    var tagKey: Identifier?
    /// Whether a `textSet` event's text is skipped rather than decoded.
    var skipsText = false
    /// Fields with numbers this version does not know, verbatim.
    var unknown: [UInt8] = []
    /// Which known field numbers were present.
    var present: UInt32 = 0

    mutating func read(
      _ number: Int, _ wireType: WireType, from reader: inout ProtobufReader, fieldStart: Int
    ) throws(VLogError) {
      func expect(_ expected: WireType, _ name: String) throws(VLogError) {
        guard wireType == expected else {
          throw VLogError(
            .malformedEvent,
            "field \(number) (\(name)) has wire type \(wireType.rawValue), expected "
              + "\(expected.rawValue)")
        }
      }
      if number > Field.kind && number <= Field.tagKey { present |= 1 << UInt32(number) }
      switch number {
      case Field.time:
        try expect(.fixed64, "time")
        time = try reader.fixed64()
      case Field.replica:
        try expect(.lengthDelimited, "replica")
        replica = try reader.identifier("replica")
      case Field.kind:
        try expect(.varint, "kind")
        kind = try reader.varint()
      case Field.entity:
        try expect(.lengthDelimited, "entity id")
        entity = try reader.identifier("entity id")
      case Field.text:
        try expect(.lengthDelimited, "text")
        if skipsText, kind == EventKind.textSet.rawValue {
          try reader.skip(.lengthDelimited)
          text = ""
        } else {
          text = try reader.string("text")
        }
      case Field.flag:
        try expect(.varint, "archived")
        flag = try reader.varint()
      case Field.date:
        try expect(.varint, "date")
        date = try reader.signed()
      case Field.names:
        try expect(.lengthDelimited, "tag name")
        names.append(try reader.string("tag name"))
      case Field.ids:
        try expect(.lengthDelimited, "attachment ids")
        let bytes = try reader.lengthDelimited()
        guard bytes.count % 16 == 0 else {
          throw VLogError(
            .malformedEvent, "attachment ids: \(bytes.count) bytes is not a multiple of 16")
        }
        for offset in stride(from: 0, to: bytes.count, by: 16) {
          ids.append(Identifier(bytes: bytes, at: offset))
        }
      case Field.owner:
        try expect(.lengthDelimited, "note id")
        owner = try reader.identifier("note id")
      case Field.width:
        try expect(.varint, "width")
        width = try reader.varint()
      case Field.height:
        try expect(.varint, "height")
        height = try reader.varint()
      case Field.hash:
        try expect(.lengthDelimited, "blob hash")
        let bytes = try reader.lengthDelimited()
        guard bytes.count == 32 else {
          throw VLogError(
            .malformedEvent, "blob hash: \(bytes.count) bytes, expected 32 (SHA-256)")
        }
        hash = Array(bytes)
      case Field.byteCount:
        try expect(.varint, "byte count")
        byteCount = try reader.varint()
      case Field.redaction:
        try expect(.varint, "redaction")
        redaction = try reader.varint()
      case Field.base:
        try expect(.lengthDelimited, "replaced texts")
        let bytes = try reader.lengthDelimited()
        guard bytes.count % Stamp.byteCount == 0 else {
          throw VLogError(
            .malformedEvent, "replaced texts: \(bytes.count) bytes is not a multiple of 24")
        }
        let count = bytes.count / Stamp.byteCount
        guard count <= Limits.replacedTexts else {
          throw VLogError(
            .malformedEvent,
            "replaced texts: \(count) stamps, at most \(Limits.replacedTexts)")
        }
        base = ReplacedTexts((0..<count).lazy.map { Stamp(bytes: bytes, at: $0 * Stamp.byteCount) })
      case Field.tagKey:
        try expect(.lengthDelimited, "tag key")
        tagKey = try reader.identifier("tag key")
      default:
        try reader.skip(wireType)
        unknown.append(contentsOf: reader.bytes(from: fieldStart))
      }
    }

    /// The event, given the bytes the fields were read from (to copy unknown fields from).
    func event(from bytes: UnsafeRawBufferPointer) throws(VLogError) -> Event {
      guard let time else { throw missing("time (field 1)") }
      guard let replica else { throw missing("replica id (field 2)") }
      guard let kind else { throw missing("kind (field 3)") }
      // Every 64-bit value is a time: 48 bits of milliseconds and a 16-bit counter.
      let stamp = Stamp(time: HybridTime(rawValue: time), replica: ReplicaID(replica))
      let eventKind = EventKind(rawValue: kind)
      guard eventKind.isKnown else {
        // Every field after the header is kept, in order, known numbers included.
        let all = try Self.fields(in: bytes) { $0 > Field.kind }
        return Event(stamp: stamp, change: .unknown(kind: eventKind), unknownFields: all)
      }
      if let redaction { return try redacted(eventKind, stamp: stamp, reason: redaction) }
      let change = try self.change(eventKind)
      // Known field numbers that this kind does not use are kept as unknown fields too.
      let unused = present & ~Self.usedFields(eventKind)
      var unknownFields = unknown
      if unused != 0 {
        unknownFields =
          try Self.fields(in: bytes) { $0 < 32 && unused & (1 << UInt32($0)) != 0 } + unknown
      }
      return Event(stamp: stamp, change: change, unknownFields: unknownFields)
    }

    private func change(_ kind: EventKind) throws(VLogError) -> Change {
      func entityID() throws(VLogError) -> Identifier {
        guard let entity else { throw missing("\(kind): id (field 4)") }
        return entity
      }
      switch kind {
      case .noteCreated:
        guard let date else { throw missing("noteCreated: creation date (field 7)") }
        return .noteCreated(NoteID(try entityID()), creationDate: Date(milliseconds: date))
      case .textSet:
        return .textSet(NoteID(try entityID()), text: text ?? "", replacing: base)
      case .archivedSet:
        guard (flag ?? 0) <= 1 else {
          throw VLogError(.malformedEvent, "archivedSet: archived is \(flag ?? 0), expected 0 or 1")
        }
        return .archivedSet(NoteID(try entityID()), archived: flag == 1)
      case .sortDateSet:
        guard let date else { throw missing("sortDateSet: sort date (field 7)") }
        return .sortDateSet(NoteID(try entityID()), sortDate: Date(milliseconds: date))
      case .tagsSet:
        return .tagsSet(NoteID(try entityID()), tags: names)
      case .attachmentsSet:
        return .attachmentsSet(NoteID(try entityID()), attachments: ids.map(AttachmentID.init))
      case .noteDeleted:
        return .noteDeleted(NoteID(try entityID()))
      case .attachmentAdded:
        guard let owner else { throw missing("attachmentAdded: note id (field 10)") }
        guard let text else { throw missing("attachmentAdded: media type (field 5)") }
        guard let hash, let blobHash = BlobHash(bytes: hash) else {
          throw missing("attachmentAdded: blob hash (field 13)")
        }
        let limit = UInt64(Int32.max)
        guard (width ?? 0) <= limit, (height ?? 0) <= limit, (byteCount ?? 0) <= UInt64(Int.max)
        else { throw VLogError(.malformedEvent, "attachmentAdded: size out of range") }
        return .attachmentAdded(
          Attachment(
            id: AttachmentID(try entityID()), noteID: NoteID(owner), mimeType: text,
            width: Int(width ?? 0), height: Int(height ?? 0), blobHash: blobHash,
            byteCount: Int(byteCount ?? 0)))
      case .attachmentDeleted:
        return .attachmentDeleted(AttachmentID(try entityID()))
      case .tagRenamed:
        guard let text else { throw missing("tagRenamed: name (field 5)") }
        return .tagRenamed(name: text)
      case .tagDeleted:
        guard let text else { throw missing("tagDeleted: name (field 5)") }
        return .tagDeleted(name: text)
      case .tagAdded:
        guard let text else { throw missing("tagAdded: name (field 5)") }
        return .tagAdded(NoteID(try entityID()), name: text)
      case .tagRemoved:
        guard let tagKey else { throw missing("tagRemoved: tag key (field 17)") }
        return .tagRemoved(NoteID(try entityID()), tag: TagKey(tagKey))
      case .tagErased:
        guard let tagKey else { throw missing("tagErased: tag key (field 17)") }
        return .tagErased(TagKey(tagKey))
      default:
        return .unknown(kind: kind)
      }
    }

    /// A redacted event: the header, the ids, the reason, and no other field.
    private func redacted(_ kind: EventKind, stamp: Stamp, reason: UInt64) throws(VLogError)
      -> Event
    {
      guard reason > 0 else {
        throw VLogError(.malformedEvent, "redaction: reason 0 is not a reason")
      }
      let ids: [Int] =
        switch kind {
        case .attachmentAdded: [Field.entity, Field.owner]
        case .tagRenamed: []
        case .textSet: [Field.entity, Field.base]
        default: [Field.entity]
        }
      var allowed = UInt32(1) << UInt32(Field.redaction)
      for id in ids { allowed |= 1 << UInt32(id) }
      let extra = present & ~allowed
      guard extra == 0, Event.isKeptThroughRedaction(unknown) else {
        let number = (0..<32).first { extra & (UInt32(1) << UInt32($0)) != 0 }
        throw VLogError(
          .malformedEvent,
          "a redacted \(kind) carries field \(number.map(String.init) ?? "of unknown number"); "
            + "a redacted event keeps its ids only")
      }
      guard ![.noteDeleted, .attachmentDeleted, .tagDeleted, .tagErased].contains(kind) else {
        throw VLogError(.malformedEvent, "a \(kind) event is never redacted")
      }
      if kind == .attachmentAdded, owner == nil {
        throw missing("attachmentAdded: note id (field 10)")
      }
      if kind != .tagRenamed, entity == nil { throw missing("\(kind): id (field 4)") }
      let note = kind == .attachmentAdded ? owner : entity
      let attachment = kind == .attachmentAdded ? entity : nil
      guard
        let event = Event.redacted(
          stamp: stamp, kind: kind, note: note.map(NoteID.init),
          attachment: attachment.map(AttachmentID.init), replacing: base,
          reason: Event.Redaction(rawValue: reason), kept: unknown)
      else { throw VLogError(.malformedEvent, "a \(kind) event cannot be redacted") }
      return event
    }

    private func missing(_ what: String) -> VLogError {
      VLogError(.malformedEvent, "missing \(what)")
    }

    /// The bit set of field numbers each kind uses.
    static func usedFields(_ kind: EventKind) -> UInt32 {
      func bits(_ numbers: Int...) -> UInt32 { numbers.reduce(0) { $0 | 1 << UInt32($1) } }
      switch kind {
      case .noteCreated, .sortDateSet: return bits(Field.entity, Field.date)
      case .textSet: return bits(Field.entity, Field.text, Field.base)
      case .archivedSet: return bits(Field.entity, Field.flag)
      case .tagsSet: return bits(Field.entity, Field.names)
      case .attachmentsSet: return bits(Field.entity, Field.ids)
      case .noteDeleted, .attachmentDeleted: return bits(Field.entity)
      case .attachmentAdded:
        return bits(
          Field.entity, Field.text, Field.owner, Field.width, Field.height, Field.hash,
          Field.byteCount)
      case .tagRenamed, .tagDeleted: return bits(Field.text)
      case .tagAdded: return bits(Field.entity, Field.text)
      case .tagRemoved: return bits(Field.entity, Field.tagKey)
      case .tagErased: return bits(Field.tagKey)
      default: return 0
      }
    }

    /// The fields whose numbers satisfy `keep`, verbatim and in order, from encoded bytes.
    static func fields(
      in bytes: UnsafeRawBufferPointer, where keep: (Int) -> Bool
    ) throws(VLogError) -> [UInt8] {
      var result: [UInt8] = []
      var reader = ProtobufReader(bytes)
      while !reader.isAtEnd {
        let start = reader.offset
        let (number, wireType) = try reader.tag()
        try reader.skip(wireType)
        if keep(number) { result.append(contentsOf: reader.bytes(from: start)) }
      }
      return result
    }
  }
}

/// The wire types of the protocol-buffers encoding that events use.
package enum WireType: UInt8 {
  case varint = 0
  case fixed64 = 1
  case lengthDelimited = 2
  case fixed32 = 5
}

/// Appends protocol-buffers fields to a byte buffer.
package struct ProtobufWriter {
  package var buffer: [UInt8] = []

  package init() {}

  package mutating func tag(_ number: Int, _ type: WireType) {
    rawVarint(UInt64(number) << 3 | UInt64(type.rawValue))
  }

  package mutating func rawVarint(_ value: UInt64) {
    var value = value
    while value >= 0x80 {
      buffer.append(UInt8(truncatingIfNeeded: value) | 0x80)
      value >>= 7
    }
    buffer.append(UInt8(value))
  }

  package mutating func varint(_ number: Int, _ value: UInt64) {
    tag(number, .varint)
    rawVarint(value)
  }

  package mutating func signed(_ number: Int, _ value: Int64) {
    varint(number, UInt64(bitPattern: (value << 1) ^ (value >> 63)))
  }

  package mutating func fixed64(_ number: Int, _ value: UInt64) {
    tag(number, .fixed64)
    withUnsafeBytes(of: value.littleEndian) { buffer.append(contentsOf: $0) }
  }

  package mutating func bytes(_ number: Int, _ bytes: [UInt8]) {
    tag(number, .lengthDelimited)
    rawVarint(UInt64(bytes.count))
    buffer.append(contentsOf: bytes)
  }

  package mutating func string(_ number: Int, _ string: String) {
    tag(number, .lengthDelimited)
    var string = string
    string.withUTF8 { utf8 in
      rawVarint(UInt64(utf8.count))
      buffer.append(contentsOf: utf8)
    }
  }

  package mutating func identifier(_ number: Int, _ identifier: Identifier) {
    tag(number, .lengthDelimited)
    buffer.append(16)
    identifier.append(to: &buffer)
  }
}

/// Reads protocol-buffers fields from bytes, checking every length against the end.
package struct ProtobufReader {
  package let base: UnsafeRawBufferPointer
  package var offset = 0

  package init(_ base: UnsafeRawBufferPointer) { self.base = base }

  package var isAtEnd: Bool { offset >= base.count }

  package mutating func varint() throws(VLogError) -> UInt64 {
    var result: UInt64 = 0
    var shift: UInt64 = 0
    while true {
      guard offset < base.count else { throw truncated("a varint") }
      let byte = base[offset]
      offset += 1
      guard shift < 64, shift < 63 || byte <= 1 else {
        throw VLogError(.malformedEvent, "a varint at byte \(offset - 1) is longer than 64 bits")
      }
      result |= UInt64(byte & 0x7F) << shift
      if byte < 0x80 { return result }
      shift += 7
    }
  }

  package mutating func signed() throws(VLogError) -> Int64 {
    let raw = try varint()
    return Int64(bitPattern: raw >> 1) ^ -Int64(bitPattern: raw & 1)
  }

  package mutating func tag() throws(VLogError) -> (Int, WireType) {
    let at = offset
    let raw = try varint()
    guard let type = WireType(rawValue: UInt8(raw & 7)) else {
      throw VLogError(.malformedEvent, "unsupported wire type \(raw & 7) at byte \(at)")
    }
    let number = raw >> 3
    guard number >= 1, number <= 1 << 29 else {
      throw VLogError(.malformedEvent, "invalid field number \(number) at byte \(at)")
    }
    return (Int(number), type)
  }

  package mutating func fixed64() throws(VLogError) -> UInt64 {
    guard base.count - offset >= 8 else { throw truncated("a 64-bit value") }
    defer { offset += 8 }
    return UInt64(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
  }

  package mutating func lengthDelimited() throws(VLogError) -> UnsafeRawBufferPointer {
    let length = try varint()
    guard length <= UInt64(base.count - offset) else { throw truncated("a \(length)-byte field") }
    defer { offset += Int(length) }
    return UnsafeRawBufferPointer(rebasing: base[offset..<offset + Int(length)])
  }

  package mutating func identifier(_ name: String) throws(VLogError) -> Identifier {
    let bytes = try lengthDelimited()
    guard bytes.count == 16 else {
      throw VLogError(.malformedEvent, "\(name): \(bytes.count) bytes, expected 16")
    }
    return Identifier(bytes: bytes)
  }

  package mutating func string(_ name: String) throws(VLogError) -> String {
    let bytes = try lengthDelimited()
    guard let string = String(validUTF8: bytes) else {
      throw VLogError(.malformedEvent, "\(name): not valid UTF-8")
    }
    return string
  }

  package mutating func skip(_ type: WireType) throws(VLogError) {
    switch type {
    case .varint: _ = try varint()
    case .fixed64: _ = try fixed64()
    case .lengthDelimited: _ = try lengthDelimited()
    case .fixed32:
      guard base.count - offset >= 4 else { throw truncated("a 32-bit value") }
      offset += 4
    }
  }

  func bytes(from start: Int) -> UnsafeRawBufferPointer {
    UnsafeRawBufferPointer(rebasing: base[start..<offset])
  }

  private func truncated(_ what: String) -> VLogError {
    VLogError(.malformedEvent, "truncated: \(what) at byte \(offset) runs past the end")
  }
}

/// Lends an array's bytes to a closure that throws ``VLogError``, keeping the error's type
/// (`Array.withUnsafeBytes` erases it).
package func withBytes<R>(
  of array: [UInt8], _ body: (UnsafeRawBufferPointer) throws(VLogError) -> R
) throws(VLogError) -> R {
  let result: Result<R, VLogError> = array.withUnsafeBytes { buffer in
    do throws(VLogError) {
      return .success(try body(buffer))
    } catch {
      return .failure(error)
    }
  }
  return try result.get()
}
