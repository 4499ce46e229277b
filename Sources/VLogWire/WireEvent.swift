internal import Foundation
public import VLog

/// An event as JSON carries it: the intermediate sync object between the wire and the engine.
///
/// JSON is first decoded into this type, which checks the JSON types (null becomes nil, keys it
/// does not know are refused); ``event()`` then checks the values (dates, ids, required and
/// forbidden fields per kind) and converts them. Merge code only ever sees the resulting
/// `Event`. Every error names the path of the field at fault.
///
/// ```json
/// {"time":"2026-11-22T05:33:47.507Z","counter":1,"replica":"d7a73666-0946-1e71-5ffe-d556129c8a84",
///  "kind":"textSet","note":"24bd364a-c001-66ab-8fd2-03bee860ff22","text":"Buy bread"}
/// ```
///
/// Kinds and fields from newer versions travel as `"kind":"unknown"` with `kindNumber`, and as
/// `extra` (the base64 of the encoded fields this version does not know).
///
/// A `textSet` names the texts it replaced in `replaces` (event ids, `[]` if the note had
/// none), or leaves `replaces` out if it did not record them (it then replaces every older
/// text): texts written without seeing each other stay as the note's conflicts.
///
/// A redacted event (see `Event/redaction`) carries `"redacted":"deleted"` or
/// `"redacted":"superseded"` and its ids only: `note`, for `attachmentAdded` an
/// `attachment` with its `id` alone, and for `textSet` its `replaces`.
public struct WireEvent: Codable, Sendable, Hashable {
  /// The stamp's wall-clock time, ISO 8601 with milliseconds.
  public var time: String
  /// The stamp's logical counter, 0 to 65535.
  public var counter: Int
  /// The replica that made the event, as a UUID.
  public var replica: String
  /// The kind's name (`textSet`, …), or `unknown`.
  public var kind: String
  /// The kind's number, for a kind this version does not know.
  public var kindNumber: UInt64?
  /// The note the event is about.
  public var note: String?
  /// The text of `textSet`.
  public var text: String?
  /// The texts a `textSet` replaced, by event id (`Stamp.hex`); nil if it recorded none.
  public var replaces: [String]?
  /// The value of `archivedSet`.
  public var archived: Bool?
  /// The date of `noteCreated` or `sortDateSet`, ISO 8601.
  public var date: String?
  /// The tag names of `tagsSet`.
  public var tags: [String]?
  /// The attachment ids of `attachmentsSet`.
  public var attachments: [String]?
  /// The attachment of `attachmentAdded`, or the id of `attachmentDeleted`.
  public var attachment: WireAttachment?
  /// The name of `tagRenamed` and `tagAdded` (and of an older version's `tagDeleted`).
  public var name: String?
  /// The tag of `tagRemoved` and `tagErased`, by key: 32 hexadecimal digits (`TagKey`).
  public var tag: String?
  /// Encoded fields this version does not know, base64.
  public var extra: String?
  /// Why the event's values were erased (`deleted` or `superseded`), for a redacted event.
  public var redacted: String?

  static let keys: Set<String> = [
    "time", "counter", "replica", "kind", "kindNumber", "note", "text", "replaces", "archived",
    "date", "tags", "attachments", "attachment", "name", "tag", "extra", "redacted",
  ]

  enum CodingKeys: String, CodingKey {
    case time, counter, replica, kind, kindNumber, note, text, replaces, archived, date, tags
    case attachments
    case attachment, name, tag, extra, redacted
  }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: Self.keys)
    let container = try decoder.container(keyedBy: CodingKeys.self)
    time = try container.decode(String.self, forKey: .time)
    counter = try container.decode(Int.self, forKey: .counter)
    replica = try container.decode(String.self, forKey: .replica)
    kind = try container.decode(String.self, forKey: .kind)
    kindNumber = try container.decodeIfPresent(UInt64.self, forKey: .kindNumber)
    note = try container.decodeIfPresent(String.self, forKey: .note)
    text = try container.decodeIfPresent(String.self, forKey: .text)
    replaces = try container.decodeIfPresent([String].self, forKey: .replaces)
    archived = try container.decodeIfPresent(Bool.self, forKey: .archived)
    date = try container.decodeIfPresent(String.self, forKey: .date)
    tags = try container.decodeIfPresent([String].self, forKey: .tags)
    attachments = try container.decodeIfPresent([String].self, forKey: .attachments)
    attachment = try container.decodeIfPresent(WireAttachment.self, forKey: .attachment)
    name = try container.decodeIfPresent(String.self, forKey: .name)
    tag = try container.decodeIfPresent(String.self, forKey: .tag)
    extra = try container.decodeIfPresent(String.self, forKey: .extra)
    redacted = try container.decodeIfPresent(String.self, forKey: .redacted)
  }

  /// The wire form of an event.
  public init(_ event: Event) {
    time = ISO8601.format(milliseconds: Int64(event.stamp.time.milliseconds))
    counter = Int(event.stamp.time.counter)
    replica = event.stamp.replica.description
    if case .unknown = event.change {
      kind = "unknown"
    } else {
      kind = event.change.kind.description
    }
    extra = event.unknownFields.isEmpty ? nil : Data(event.unknownFields).base64EncodedString()
    if let redaction = event.redaction {
      redacted = redaction.description
      switch event.change {
      case .attachmentAdded(let attachment):
        note = attachment.noteID.description
        self.attachment = WireAttachment(id: attachment.id.description)
      case .textSet(let id, _, let base):
        note = id.description
        replaces = base?.map(\.hex)
      default:
        note = event.change.noteID?.description
      }
      return
    }
    switch event.change {
    case .noteCreated(let id, let date), .sortDateSet(let id, let date):
      note = id.description
      self.date = ISO8601.format(milliseconds: date.milliseconds)
    case .textSet(let id, let text, let base):
      note = id.description
      self.text = text
      replaces = base?.map(\.hex)
    case .archivedSet(let id, let archived):
      note = id.description
      self.archived = archived
    case .tagsSet(let id, let tags):
      note = id.description
      self.tags = tags
    case .attachmentsSet(let id, let attachments):
      note = id.description
      self.attachments = attachments.map(\.description)
    case .noteDeleted(let id):
      note = id.description
    case .attachmentAdded(let attachment):
      note = attachment.noteID.description
      self.attachment = WireAttachment(attachment)
    case .attachmentDeleted(let id):
      attachment = WireAttachment(id: id.description)
    case .tagRenamed(let name), .tagDeleted(let name):
      self.name = name
    case .tagAdded(let id, let name):
      note = id.description
      self.name = name
    case .tagRemoved(let id, let tag):
      note = id.description
      self.tag = tag.description
    case .tagErased(let tag):
      self.tag = tag.description
    case .unknown(let kind):
      kindNumber = kind.rawValue
    }
  }

  /// Checks the values and converts them into an `Event`.
  ///
  /// - Throws: ``WireError`` naming the field at fault.
  public func event() throws(WireError) -> Event {
    guard let milliseconds = ISO8601.parse(time), milliseconds >= 0,
      UInt64(milliseconds) <= HybridTime.maximumMilliseconds
    else { throw WireError("time", ISO8601.problem(with: time)) }
    guard (0...Int(UInt16.max)).contains(counter) else {
      throw WireError("counter", "\(counter) is not between 0 and 65535")
    }
    guard let replicaID = ReplicaID(replica) else {
      throw WireError("replica", "'\(replica)' is not a UUID")
    }
    let stamp = Stamp(
      time: HybridTime(milliseconds: UInt64(milliseconds), counter: UInt16(counter)),
      replica: replicaID)
    var unknownFields: [UInt8] = []
    if let extra {
      guard let bytes = Data(base64Encoded: extra) else {
        throw WireError("extra", "not base64")
      }
      unknownFields = Array(bytes)
    }
    if let redacted { return try redactedEvent(stamp: stamp, reason: redacted) }
    let event = Event(stamp: stamp, change: try change(), unknownFields: unknownFields)
    let isKnownKind = kindNumber.map { EventKind(rawValue: $0).isKnown } ?? false
    guard !unknownFields.isEmpty || isKnownKind else { return event }
    // `extra` from an older client may hold a field this version knows (what a text change
    // replaced, forwarded by a version 1 client), or the whole of an event of a kind this
    // version knows and the client did not (forwarded as unknown): read the event as the log
    // will.
    do {
      return try Event(encoded: event.encoded())
    } catch {
      throw WireError("extra", error.message)
    }
  }

  /// A redacted event: the kind and its ids, nothing else.
  private func redactedEvent(stamp: Stamp, reason name: String) throws(WireError) -> Event {
    guard let reason = Event.Redaction(name: name) else {
      throw WireError("redacted", "'\(name)' is not a reason (expected deleted or superseded)")
    }
    guard let eventKind = EventKind(name: kind) else {
      throw WireError("kind", "'\(kind)' cannot be redacted")
    }
    // What redaction keeps besides the ids: an encrypted account's authenticator.
    var kept: [UInt8] = []
    if let extra {
      guard let bytes = Data(base64Encoded: extra), Event.isKeptThroughRedaction(Array(bytes))
      else {
        throw WireError(
          "extra", "a redacted event carries its ids and its authenticator (field 19) only")
      }
      kept = Array(bytes)
    }
    var attachmentID: AttachmentID?
    switch eventKind {
    case .noteDeleted, .attachmentDeleted, .tagDeleted, .tagErased:
      throw WireError("redacted", "a \(kind) event is never redacted")
    case .attachmentAdded:
      try allow(["note", "attachment"])
      guard let attachment else { throw WireError("attachment", "required for attachmentAdded") }
      guard attachment == WireAttachment(id: attachment.id) else {
        throw WireError("attachment", "a redacted attachmentAdded names the attachment's id only")
      }
      attachmentID = try attachment.identifier()
    case .tagRenamed:
      try allow([])
    case .textSet:
      try allow(["note", "replaces"])
    default:
      try allow(["note"])
    }
    let note = eventKind == .tagRenamed ? nil : try noteID()
    guard
      let event = Event.redacted(
        stamp: stamp, kind: eventKind, note: note, attachment: attachmentID,
        replacing: try replacedTexts(), reason: reason, kept: kept)
    else { throw WireError("redacted", "a \(kind) event cannot be redacted") }
    return event
  }

  private func change() throws(WireError) -> Change {
    if kind == "unknown" {
      guard let kindNumber else { throw WireError("kindNumber", "required for an unknown kind") }
      guard kindNumber >= 1 else { throw WireError("kindNumber", "0 is not a kind") }
      // A known number is an event an older client kept unknown: read from its fields.
      try allow([])
      return .unknown(kind: EventKind(rawValue: kindNumber))
    }
    guard let eventKind = EventKind(name: kind) else {
      throw WireError(
        "kind",
        "'\(kind)' is not a kind of event (expected one of "
          + EventKind.known.map(\.description).joined(separator: ", ") + ", or unknown)")
    }
    guard kindNumber == nil else { throw WireError("kindNumber", "only for an unknown kind") }
    switch eventKind {
    case .noteCreated:
      try allow(["note", "date"])
      return .noteCreated(try noteID(), creationDate: try requiredDate())
    case .textSet:
      try allow(["note", "text", "replaces"])
      guard let text else { throw WireError("text", "required for textSet") }
      return .textSet(try noteID(), text: text, replacing: try replacedTexts())
    case .archivedSet:
      try allow(["note", "archived"])
      guard let archived else { throw WireError("archived", "required for archivedSet") }
      return .archivedSet(try noteID(), archived: archived)
    case .sortDateSet:
      try allow(["note", "date"])
      return .sortDateSet(try noteID(), sortDate: try requiredDate())
    case .tagsSet:
      try allow(["note", "tags"])
      guard let tags else { throw WireError("tags", "required for tagsSet") }
      return .tagsSet(try noteID(), tags: tags)
    case .attachmentsSet:
      try allow(["note", "attachments"])
      guard let attachments else { throw WireError("attachments", "required for attachmentsSet") }
      var ids: [AttachmentID] = []
      for (index, text) in attachments.enumerated() {
        guard let id = AttachmentID(text) else {
          throw WireError("attachments[\(index)]", "'\(text)' is not a UUID")
        }
        ids.append(id)
      }
      return .attachmentsSet(try noteID(), attachments: ids)
    case .noteDeleted:
      try allow(["note"])
      return .noteDeleted(try noteID())
    case .attachmentAdded:
      try allow(["note", "attachment"])
      guard let attachment else { throw WireError("attachment", "required for attachmentAdded") }
      return .attachmentAdded(try attachment.attachment(noteID: try noteID()))
    case .attachmentDeleted:
      try allow(["attachment"])
      guard let attachment else { throw WireError("attachment", "required for attachmentDeleted") }
      return .attachmentDeleted(try attachment.identifier())
    case .tagRenamed:
      try allow(["name"])
      guard let name else { throw WireError("name", "required for tagRenamed") }
      return .tagRenamed(name: name)
    case .tagDeleted:
      try allow(["name"])
      guard let name else { throw WireError("name", "required for tagDeleted") }
      return .tagDeleted(name: name)
    case .tagAdded:
      try allow(["note", "name"])
      guard let name else { throw WireError("name", "required for tagAdded") }
      return .tagAdded(try noteID(), name: name)
    case .tagRemoved:
      try allow(["note", "tag"])
      return .tagRemoved(try noteID(), tag: try tagKey())
    case .tagErased:
      try allow(["tag"])
      return .tagErased(try tagKey())
    default:
      throw WireError("kind", "'\(kind)' is not supported")
    }
  }

  /// Refuses fields this kind does not use.
  private func allow(_ fields: Set<String>) throws(WireError) {
    let present: [(String, Bool)] = [
      ("note", note != nil), ("text", text != nil), ("replaces", replaces != nil),
      ("archived", archived != nil),
      ("date", date != nil), ("tags", tags != nil), ("attachments", attachments != nil),
      ("attachment", attachment != nil), ("name", name != nil), ("tag", tag != nil),
    ]
    for (field, isPresent) in present where isPresent && !fields.contains(field) {
      throw WireError(field, "not a field of \(kind)")
    }
  }

  /// The tag `tag` names, by key.
  private func tagKey() throws(WireError) -> TagKey {
    guard let tag else { throw WireError("tag", "required for \(kind)") }
    guard tag.utf8.count == 32, let key = TagKey(tag) else {
      throw WireError("tag", "'\(tag.prefix(40))' is not a tag key (32 hexadecimal digits)")
    }
    return key
  }

  /// The stamps `replaces` names: at most `Limits.replacedTexts`, each an event id.
  private func replacedTexts() throws(WireError) -> ReplacedTexts? {
    guard let replaces else { return nil }
    guard replaces.count <= Limits.replacedTexts else {
      throw WireError(
        "replaces", "\(replaces.count) event ids; the limit is \(Limits.replacedTexts)")
    }
    var stamps: [Stamp] = []
    for (index, id) in replaces.enumerated() {
      guard let stamp = Stamp(hex: id) else {
        throw WireError("replaces[\(index)]", "'\(id)' is not an event id (48 hexadecimal digits)")
      }
      stamps.append(stamp)
    }
    return ReplacedTexts(stamps)
  }

  private func noteID() throws(WireError) -> NoteID {
    guard let note else { throw WireError("note", "required for \(kind)") }
    guard let id = NoteID(note) else { throw WireError("note", "'\(note)' is not a UUID") }
    return id
  }

  private func requiredDate() throws(WireError) -> Date {
    guard let date else { throw WireError("date", "required for \(kind)") }
    guard let milliseconds = ISO8601.parse(date) else {
      throw WireError("date", ISO8601.problem(with: date, noun: "date"))
    }
    return Date(milliseconds: milliseconds)
  }
}

/// An attachment as JSON carries it.
public struct WireAttachment: Codable, Sendable, Hashable {
  /// The attachment's id.
  public var id: String
  /// The media type.
  public var mimeType: String?
  /// Width in pixels.
  public var width: Int?
  /// Height in pixels.
  public var height: Int?
  /// The SHA-256 of the bytes, 64 hexadecimal digits.
  public var sha256: String?
  /// The number of bytes.
  public var byteCount: Int?

  static let keys: Set<String> = ["id", "mimeType", "width", "height", "sha256", "byteCount"]

  enum CodingKeys: String, CodingKey { case id, mimeType, width, height, sha256, byteCount }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: Self.keys)
    let container = try decoder.container(keyedBy: CodingKeys.self)
    id = try container.decode(String.self, forKey: .id)
    mimeType = try container.decodeIfPresent(String.self, forKey: .mimeType)
    width = try container.decodeIfPresent(Int.self, forKey: .width)
    height = try container.decodeIfPresent(Int.self, forKey: .height)
    sha256 = try container.decodeIfPresent(String.self, forKey: .sha256)
    byteCount = try container.decodeIfPresent(Int.self, forKey: .byteCount)
  }

  /// A reference by id only.
  public init(id: String) {
    self.id = id
  }

  /// The wire form of attachment metadata.
  public init(_ attachment: Attachment) {
    id = attachment.id.description
    mimeType = attachment.mimeType
    width = attachment.width
    height = attachment.height
    sha256 = attachment.blobHash.description
    byteCount = attachment.byteCount
  }

  func identifier() throws(WireError) -> AttachmentID {
    guard let identifier = AttachmentID(id) else {
      throw WireError("attachment.id", "'\(id)' is not a UUID")
    }
    return identifier
  }

  func attachment(noteID: NoteID) throws(WireError) -> Attachment {
    guard let mimeType else { throw WireError("attachment.mimeType", "required") }
    guard let sha256 else { throw WireError("attachment.sha256", "required") }
    guard let hash = BlobHash(hex: sha256) else {
      throw WireError("attachment.sha256", "'\(sha256)' is not 64 hexadecimal digits")
    }
    guard let byteCount, byteCount > 0 else {
      throw WireError("attachment.byteCount", "required, and more than 0")
    }
    guard (width ?? 0) >= 0 else { throw WireError("attachment.width", "negative") }
    guard (height ?? 0) >= 0 else { throw WireError("attachment.height", "negative") }
    return Attachment(
      id: try identifier(), noteID: noteID, mimeType: mimeType, width: width ?? 0,
      height: height ?? 0, blobHash: hash, byteCount: byteCount)
  }
}

/// Any coding key, for listing the keys an object has.
struct AnyKey: CodingKey {
  let stringValue: String
  let intValue: Int? = nil
  init(stringValue: String) { self.stringValue = stringValue }
  init?(intValue: Int) { nil }
}

/// Throws if the object being decoded has a key outside `allowed`. A `null` is left to the
/// field's decoding: an optional field reads it as absent, a required one refuses it by name.
func refuseUnknownKeys(in decoder: any Decoder, allowed: Set<String>) throws {
  let container = try decoder.container(keyedBy: AnyKey.self)
  if let unknown = container.allKeys.map(\.stringValue).sorted().first(where: {
    !allowed.contains($0)
  }) {
    throw DecodingError.dataCorrupted(
      DecodingError.Context(
        codingPath: decoder.codingPath + [AnyKey(stringValue: unknown)],
        debugDescription: "not a field of this object"))
  }
}
