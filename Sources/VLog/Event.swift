public import Foundation

/// One user change, as it is stored in the log and exchanged by sync: immutable, stamped, and
/// identified by its stamp.
///
/// Events are never re-stamped: an event made on another replica is stored with its own stamp.
/// An event from a newer version of VLog keeps the fields this version does not know in
/// ``unknownFields`` and its kind in ``Change/unknown(kind:)``, so that it is stored and
/// forwarded unchanged.
///
/// An event can be *redacted* (``redaction``): it keeps its stamp, kind and the ids it names,
/// and loses its payload — when the object it changes is deleted, or when a newer change to the
/// same field has replaced it for longer than the retention period. A redacted event has no
/// effect on state, so a replica that erased an event's content and one that only ever saw
/// the redacted event hold the same state.
public struct Event: Sendable, Hashable, CustomStringConvertible {
  /// When and where the change was made; also the event's unique id.
  public let stamp: Stamp
  /// What changed. For a redacted event, the kind and ids with empty values.
  public let change: Change
  /// Encoded fields this version does not know, kept verbatim in the order received.
  public let unknownFields: [UInt8]
  /// Why the event's payload was erased, or nil if it has it.
  public let redaction: Redaction?

  /// Creates an event.
  public init(stamp: Stamp, change: Change, unknownFields: [UInt8] = []) {
    self.stamp = stamp
    self.change = change
    self.unknownFields = unknownFields
    self.redaction = nil
  }

  private init(stamp: Stamp, redactedChange: Change, redaction: Redaction, kept: [UInt8]) {
    self.stamp = stamp
    self.change = redactedChange
    self.unknownFields = kept
    self.redaction = redaction
  }

  /// A redacted event: the kind and ids of `change`, without its values.
  ///
  /// - Returns: nil for the kinds that cannot be redacted: deletions (they are what erase)
  ///   and kinds this version does not know.
  public static func redacted(stamp: Stamp, change: Change, reason: Redaction) -> Event? {
    redacted(stamp: stamp, change: change, reason: reason, kept: [])
  }

  /// A redacted event keeping `kept`, the encoded fields redaction keeps (an authenticator,
  /// ``authenticator``), which must be nothing else.
  static func redacted(stamp: Stamp, change: Change, reason: Redaction, kept: [UInt8]) -> Event? {
    guard let stripped = change.withoutPayload else { return nil }
    return Event(stamp: stamp, redactedChange: stripped, redaction: reason, kept: kept)
  }

  /// A redacted event of `kind` naming `note` (and for `attachmentAdded`, `attachment`): what
  /// decoders build from the ids a redacted event carries.
  ///
  /// - Returns: nil if the kind cannot be redacted or an id it needs is missing.
  package static func redacted(
    stamp: Stamp, kind: EventKind, note: NoteID?, attachment: AttachmentID?,
    replacing base: ReplacedTexts? = nil, reason: Redaction, kept: [UInt8] = []
  ) -> Event? {
    let change: Change
    switch (kind, note, attachment) {
    case (.tagRenamed, nil, nil): change = .tagRenamed(name: "")
    case (.attachmentAdded, let note?, let attachment?):
      change = .attachmentAdded(Attachment(redacted: attachment, of: note))
    case (_, let note?, nil):
      switch kind {
      case .noteCreated: change = .noteCreated(note, creationDate: Date(milliseconds: 0))
      case .textSet: change = .textSet(note, text: "", replacing: base)
      case .archivedSet: change = .archivedSet(note, archived: false)
      case .sortDateSet: change = .sortDateSet(note, sortDate: Date(milliseconds: 0))
      case .tagsSet: change = .tagsSet(note, tags: [])
      case .tagAdded: change = .tagAdded(note, name: "")
      case .tagRemoved: change = .tagRemoved(note, tag: TagKey(Identifier(high: 0, low: 0)))
      case .attachmentsSet: change = .attachmentsSet(note, attachments: [])
      default: return nil
      }
    default: return nil
    }
    return redacted(stamp: stamp, change: change, reason: reason, kept: kept)
  }

  /// This event with its payload erased, or the event itself if it is redacted already or of
  /// a kind that cannot be (see ``redacted(stamp:change:reason:)``). Its authenticator, if it
  /// has one, is kept: it vouches for what redaction keeps.
  public func redacted(_ reason: Redaction) -> Event {
    guard redaction == nil else { return self }
    return Self.redacted(stamp: stamp, change: change, reason: reason, kept: authenticatorField)
      ?? self
  }

  /// Whether the event's payload was erased.
  public var isRedacted: Bool { redaction != nil }

  /// The event's unique id: its stamp.
  public var id: Stamp { stamp }

  /// The stamp and the change: `2026-11-22T04:13:46.123Z#0@… textSet 1b4e… "Hello"`, or for a
  /// redacted event `… textSet 1b4e… (redacted: deleted)`.
  public var description: String { "\(stamp) \(changeDescription)" }

  /// The change, or for a redacted event its kind, ids and reason:
  /// `textSet 1b4e… (redacted: deleted)`.
  public var changeDescription: String {
    guard let redaction else { return change.description }
    return "\(change.kind) \(change.redactedSubject) (redacted: \(redaction))"
  }

  /// Why an event was redacted: a number in the encoding, so that newer reasons can appear.
  public struct Redaction: Hashable, Sendable, CustomStringConvertible {
    /// The number in the encoding (1 or more).
    public let rawValue: UInt64

    /// Wraps a reason number.
    public init(rawValue: UInt64) { self.rawValue = rawValue }

    /// The object the event changes was deleted: its content is erased everywhere.
    public static let deleted = Redaction(rawValue: 1)
    /// A newer change to the same field replaced the event longer ago than the retention
    /// period: it can never win again, and its old value is no longer kept.
    public static let superseded = Redaction(rawValue: 2)

    /// `deleted`, `superseded`, or `reason N`.
    public var description: String {
      switch rawValue {
      case 1: "deleted"
      case 2: "superseded"
      default: "reason \(rawValue)"
      }
    }

    /// The reason with this name, as ``description`` writes it.
    public init?(name: String) {
      switch name {
      case "deleted": self = .deleted
      case "superseded": self = .superseded
      default: return nil
      }
    }
  }
}

extension Event {
  /// Decodes an event from VLog's compact binary encoding, the one the log stores and the sync
  /// protocol may carry.
  ///
  /// Fields this version does not know are kept in ``unknownFields``, so the event can be
  /// forwarded without loss. Decoding checks the encoding only; ``validate()`` checks the
  /// values.
  ///
  /// - Throws: ``VLogError/Code/malformedEvent`` naming the field that is wrong.
  public init(encoded bytes: [UInt8]) throws(VLogError) {
    self = try EventCodec.decode(bytes)
  }

  /// The event in VLog's compact binary encoding: protocol-buffers fields, a few dozen bytes
  /// plus the text it carries. ``init(encoded:)`` reads it back.
  public func encoded() -> [UInt8] { EventCodec.encode(self) }

  /// Checks the event's values against the limits every replica enforces (text size, tag
  /// names, dates, attachment metadata, the size of fields a newer version added), so that an event one replica accepts, all accept.
  ///
  /// ``NoteStore`` checks every event it appends or ingests; a server checks the events it is
  /// sent with this before storing them.
  ///
  /// - Throws: ``VLogError`` saying which value is out of bounds.
  public func validate() throws(VLogError) {
    let sealed = sealedValuesField
    try Validation.checkUnknownFields(unknownFields, sealed: sealed, of: stamp)
    guard redaction == nil else { return }
    try Validation.check(change, isSealed: sealed != nil)
  }
}

/// What an event changes. Each case is one kind of user change (see ``EventKind``).
public enum Change: Sendable, Hashable, CustomStringConvertible {
  /// A note was created. Its five fields start empty (sort date: the creation date) until
  /// changes set them.
  case noteCreated(NoteID, creationDate: Date)
  /// A note's text was set, replacing the texts its device showed: by the
  /// stamps of the changes that set them, none if the note had no text, or nil if the change
  /// did not record them (made by a version that did not: it replaces every older text).
  ///
  /// The note shows its newest text; its other texts that no change replaced are its
  /// conflicts (``Note/conflicts``).
  case textSet(NoteID, text: String, replacing: ReplacedTexts? = nil)
  /// A note was archived or brought back to the timeline.
  case archivedSet(NoteID, archived: Bool)
  /// A note's sort date was set.
  case sortDateSet(NoteID, sortDate: Date)
  /// A note's tags were set, by display name, in order: exactly these, as of this change
  /// (tags added to the note by newer changes stay; see ``Note/tags``).
  case tagsSet(NoteID, tags: [String])
  /// A tag was put on a note, by display name: the note has it as of this change, whatever
  /// tags other changes put on it meanwhile.
  case tagAdded(NoteID, name: String)
  /// A tag was taken off a note, named by its key: the note lacks it as of this change.
  case tagRemoved(NoteID, tag: TagKey)
  /// A note's attachments were set, in order.
  case attachmentsSet(NoteID, attachments: [AttachmentID])
  /// A note was deleted, for good.
  case noteDeleted(NoteID)
  /// An attachment was added: its metadata, with the hash of its bytes.
  case attachmentAdded(Attachment)
  /// An attachment was deleted, for good.
  case attachmentDeleted(AttachmentID)
  /// A tag's display name was set (only its case can differ from the tag's id).
  case tagRenamed(name: String)
  /// A tag was deleted, by name: what versions before protocol 3 write. A log stores it as
  /// ``tagErased(_:)`` of the name's key, which it means.
  case tagDeleted(name: String)
  /// A tag was deleted, named by its key: every note that had it loses it as of this change,
  /// and every log erases its name from the changes made before it (its renames, its
  /// additions, and the tags lists that named it). A later change that names the tag creates
  /// it again.
  case tagErased(TagKey)
  /// A kind of change this version does not know; stored and forwarded, skipped by projections.
  case unknown(kind: EventKind)

  /// The kind of change.
  public var kind: EventKind {
    switch self {
    case .noteCreated: .noteCreated
    case .textSet: .textSet
    case .archivedSet: .archivedSet
    case .sortDateSet: .sortDateSet
    case .tagsSet: .tagsSet
    case .tagAdded: .tagAdded
    case .tagRemoved: .tagRemoved
    case .attachmentsSet: .attachmentsSet
    case .noteDeleted: .noteDeleted
    case .attachmentAdded: .attachmentAdded
    case .attachmentDeleted: .attachmentDeleted
    case .tagRenamed: .tagRenamed
    case .tagDeleted: .tagDeleted
    case .tagErased: .tagErased
    case .unknown(let kind): kind
    }
  }

  /// The note the change is about: the note itself, or the note an attachment belongs to.
  public var noteID: NoteID? {
    switch self {
    case .noteCreated(let id, _), .textSet(let id, _, _), .archivedSet(let id, _),
      .sortDateSet(let id, _), .tagsSet(let id, _), .attachmentsSet(let id, _),
      .noteDeleted(let id), .tagAdded(let id, _), .tagRemoved(let id, _):
      id
    case .attachmentAdded(let attachment): attachment.noteID
    case .attachmentDeleted, .tagRenamed, .tagDeleted, .tagErased, .unknown: nil
    }
  }

  /// The change with the same kind and ids and no values: what a redacted event keeps (a text
  /// change keeps the stamps of the texts it replaced: what it replaced stays replaced; a
  /// tag's removal keeps its note, not which tag). Nil for deletions, which are never
  /// redacted, and for unknown kinds.
  package var withoutPayload: Change? {
    switch self {
    case .noteCreated(let id, _): .noteCreated(id, creationDate: Date(milliseconds: 0))
    case .textSet(let id, _, let base): .textSet(id, text: "", replacing: base)
    case .archivedSet(let id, _): .archivedSet(id, archived: false)
    case .sortDateSet(let id, _): .sortDateSet(id, sortDate: Date(milliseconds: 0))
    case .tagsSet(let id, _): .tagsSet(id, tags: [])
    case .tagAdded(let id, _): .tagAdded(id, name: "")
    case .attachmentsSet(let id, _): .attachmentsSet(id, attachments: [])
    case .attachmentAdded(let attachment):
      .attachmentAdded(Attachment(redacted: attachment.id, of: attachment.noteID))
    case .tagRenamed: .tagRenamed(name: "")
    case .tagRemoved(let id, _): .tagRemoved(id, tag: TagKey(Identifier(high: 0, low: 0)))
    case .noteDeleted, .attachmentDeleted, .tagDeleted, .tagErased, .unknown: nil
    }
  }

  /// The base of a text change as descriptions end with it: ` replacing [stamp, …]`, or
  /// nothing for a change that recorded none.
  static func describe(_ base: ReplacedTexts?) -> String {
    guard let base else { return "" }
    return " replacing [\(base.map(\.description).joined(separator: ", "))]"
  }

  /// What a redacted event still names: the note, or the attachment and its note (and what a
  /// text change replaced).
  var redactedSubject: String {
    switch self {
    case .textSet(let id, _, let base): "\(id)" + Self.describe(base)
    case .attachmentAdded(let attachment): "\(attachment.id) to \(attachment.noteID)"
    default: noteID.map(\.description) ?? ""
    }
  }

  /// The kind and the values: `textSet 1b4e28ba-… "Hello"`.
  public var description: String {
    switch self {
    case .noteCreated(let id, let date):
      "noteCreated \(id) \(ISO8601.format(milliseconds: date.milliseconds))"
    case .textSet(let id, let text, let base):
      "textSet \(id) \(String(reflecting: text))" + Self.describe(base)
    case .archivedSet(let id, let archived): "archivedSet \(id) \(archived)"
    case .sortDateSet(let id, let date):
      "sortDateSet \(id) \(ISO8601.format(milliseconds: date.milliseconds))"
    case .tagsSet(let id, let tags): "tagsSet \(id) \(tags)"
    case .tagAdded(let id, let name): "tagAdded \(id) \(String(reflecting: name))"
    case .tagRemoved(let id, let tag): "tagRemoved \(id) tag \(tag)"
    case .attachmentsSet(let id, let attachments):
      "attachmentsSet \(id) [\(attachments.map(\.description).joined(separator: ", "))]"
    case .noteDeleted(let id): "noteDeleted \(id)"
    case .attachmentAdded(let attachment):
      "attachmentAdded \(attachment.id) to \(attachment.noteID) \(attachment.mimeType) "
        + "\(attachment.width)x\(attachment.height) \(attachment.byteCount) bytes "
        + "sha256 \(attachment.blobHash)"
    case .attachmentDeleted(let id): "attachmentDeleted \(id)"
    case .tagRenamed(let name): "tagRenamed \(String(reflecting: name))"
    case .tagDeleted(let name): "tagDeleted \(String(reflecting: name))"
    case .tagErased(let tag): "tagErased tag \(tag)"
    case .unknown(let kind): "\(kind) (unknown to this version)"
    }
  }
}

/// The kind of an event, as a number in the encoding. New kinds may appear in newer versions;
/// an unknown kind is kept, not dropped.
public struct EventKind: Hashable, Sendable, CustomStringConvertible {
  /// The number in the encoding.
  public let rawValue: UInt64

  /// Wraps a kind number.
  public init(rawValue: UInt64) { self.rawValue = rawValue }

  /// ``Change/noteCreated(_:creationDate:)``.
  public static let noteCreated = EventKind(rawValue: 1)
  /// ``Change/textSet(_:text:replacing:)``.
  public static let textSet = EventKind(rawValue: 2)
  /// ``Change/archivedSet(_:archived:)``.
  public static let archivedSet = EventKind(rawValue: 3)
  /// ``Change/sortDateSet(_:sortDate:)``.
  public static let sortDateSet = EventKind(rawValue: 4)
  /// ``Change/tagsSet(_:tags:)``.
  public static let tagsSet = EventKind(rawValue: 5)
  /// ``Change/attachmentsSet(_:attachments:)``.
  public static let attachmentsSet = EventKind(rawValue: 6)
  /// ``Change/noteDeleted(_:)``.
  public static let noteDeleted = EventKind(rawValue: 7)
  /// ``Change/attachmentAdded(_:)``.
  public static let attachmentAdded = EventKind(rawValue: 8)
  /// ``Change/attachmentDeleted(_:)``.
  public static let attachmentDeleted = EventKind(rawValue: 9)
  /// ``Change/tagRenamed(name:)``.
  public static let tagRenamed = EventKind(rawValue: 10)
  /// ``Change/tagDeleted(name:)``.
  public static let tagDeleted = EventKind(rawValue: 11)
  /// ``Change/tagAdded(_:name:)``.
  public static let tagAdded = EventKind(rawValue: 12)
  /// ``Change/tagRemoved(_:tag:)``.
  public static let tagRemoved = EventKind(rawValue: 13)
  /// ``Change/tagErased(_:)``.
  public static let tagErased = EventKind(rawValue: 14)

  /// Every kind this version knows.
  public static let known: [EventKind] = (1...14).map { EventKind(rawValue: $0) }

  /// Whether this version knows the kind.
  public var isKnown: Bool { (1...14).contains(rawValue) }

  /// The kind's name, for example `textSet`, or `kind 42` for an unknown one.
  public var description: String {
    let names = [
      "noteCreated", "textSet", "archivedSet", "sortDateSet", "tagsSet", "attachmentsSet",
      "noteDeleted", "attachmentAdded", "attachmentDeleted", "tagRenamed", "tagDeleted",
      "tagAdded", "tagRemoved", "tagErased",
    ]
    return isKnown ? names[Int(rawValue) - 1] : "kind \(rawValue)"
  }

  /// The kind with this name, as ``description`` writes it.
  public init?(name: String) {
    guard let kind = Self.known.first(where: { $0.description == name }) else { return nil }
    self = kind
  }
}
