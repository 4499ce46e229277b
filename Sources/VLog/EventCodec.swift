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
}
