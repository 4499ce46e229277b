internal import Foundation

extension EventCodec {
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
  static func decode(
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
