internal import Crypto
internal import Foundation
public import VLog

/// Seals an encrypted account's events before they leave the device, and opens them when they
/// arrive: the ids stay clear, the values go sealed in the event's `sealedValues` (field 18 of its encoding).
///
/// The sealed form of each kind keeps what a log needs and nothing more:
/// - a note's creation, text, archived flag and sort date: the note's id (and a text's replaced
///   stamps), with the values of a redacted event as placeholders;
/// - a tag, wherever an event names one: ``AccountKeys/tagName(of:)`` in place of its name, so a
///   server still tells tags apart, strips a deleted tag from a tags list and erases it, without
///   reading a name;
/// - an attachment's addition: its ids, `Attachment.sealedMediaType` and no size in pixels,
///   and the hash and size of its bytes as ``ObjectKey/sealBlob(_:of:)`` sealed them
///   (``SealedBlob``), which is what the server stores; the metadata in clear, the clear
///   bytes' hash among it, is sealed;
/// - an attachment list: its note's id, the list sealed;
/// - a deletion: unchanged, as it carries ids only.
///
/// Every event, redacted ones and deletions included, carries the authenticator of the
/// account's devices (``AccountKeys/authenticator(of:)``), which ``open(_:objectKey:)`` checks
/// before anything else: a server cannot make up an event, nor change the stamp, kind or ids
/// of one, without the device refusing it.
///
/// The values are sealed with the note's key (``keyedObject(of:)``), an attachment's addition
/// with the attachment's, and an event that names a tag apart from any note (a rename, a
/// deletion) with the account's tag-values key; each is bound to the event's stamp and kind,
/// so that a sealed value moved to another event does not open. Values are padded
/// (``Padding``) before they are sealed.
public struct EventSealer: Sendable {
  /// The account's keys.
  public let keys: AccountKeys

  /// A sealer with `keys`.
  public init(keys: AccountKeys) { self.keys = keys }

  /// `event` as an encrypted account's device sends it.
  ///
  /// - Parameters:
  ///   - event: The event as the device's store holds it.
  ///   - objectKey: The key of a note or an attachment, by id.
  ///   - sealedBlob: The name of an attachment's bytes as sealed, for an attachment's
  ///     addition (without it, an addition cannot be sealed).
  /// - Throws: ``AccountKeyError`` for an event that cannot be sealed: a kind this version does
  ///   not know; or what `objectKey` or `sealedBlob` throws.
  public func seal(
    _ event: Event, objectKey: (Identifier) throws -> ObjectKey,
    sealedBlob: ((Attachment) throws -> SealedBlob)? = nil
  ) throws -> Event {
    guard !event.isRedacted else { return authenticated(event) }
    func keyed(_ tag: TagKey) -> TagKey { TagKey(name: keys.tagName(of: tag)) }
    let clear: Event
    let placeholder: Change
    switch event.change {
    case .noteCreated, .textSet, .archivedSet, .sortDateSet, .attachmentsSet:
      clear = event
      guard let stripped = event.change.withoutPayload else { return event }
      placeholder = stripped
    case .tagsSet(let note, let names):
      clear = event
      var seen = Set<String>()
      placeholder = .tagsSet(
        note, tags: names.map(keys.tagName).filter { seen.insert($0).inserted })
    case .tagAdded(let note, let name):
      clear = event
      placeholder = .tagAdded(note, name: keys.tagName(name))
    case .tagRemoved(let note, let tag):
      clear = event
      placeholder = .tagRemoved(note, tag: keyed(tag))
    case .tagErased(let tag):
      clear = event
      placeholder = .tagErased(keyed(tag))
    case .tagDeleted(let name):
      // What versions before protocol 3 wrote: sealed as the deletion by key it means.
      clear = Event(stamp: event.stamp, change: .tagErased(TagKey(name: name)))
      placeholder = .tagErased(TagKey(name: keys.tagName(name)))
    case .tagRenamed(let name):
      clear = event
      placeholder = .tagRenamed(name: keys.tagName(name))
    case .noteDeleted, .attachmentDeleted:
      return authenticated(event)
    case .attachmentAdded(let attachment):
      clear = event
      guard let sealedBlob else {
        throw AccountKeyError("the bytes of attachment \(attachment.id) are not sealed")
      }
      let name = try sealedBlob(attachment)
      placeholder = .attachmentAdded(
        Attachment(
          id: attachment.id, noteID: attachment.noteID, mimeType: Attachment.sealedMediaType,
          width: 0, height: 0, blobHash: name.hash, byteCount: name.byteCount))
    case .unknown(let kind):
      throw AccountKeyError("an event of \(kind), unknown to this version, cannot be sealed")
    }
    let key = try self.key(for: placeholder, objectKey: objectKey)
    let sealed = try Self.withContext(of: event.stamp, placeholder.kind) { context in
      try key.sealValue(Padding.paddedValue(clear.fieldsToSeal), context: context)
    }
    return authenticated(Event(stamp: event.stamp, change: placeholder).withSealedValues(sealed))
  }

  /// `event`, in the form the server receives, with the authenticator of the account's
  /// devices.
  private func authenticated(_ event: Event) -> Event {
    event.withAuthenticator(keys.authenticator(of: event))
  }

  /// The event `sealed`, sealed by ``seal(_:objectKey:sealedBlob:)`` on a device of the account,
  /// with its values, once its authenticator shows that a device of the account made it.
  ///
  /// A redacted event, and a deletion, which carries ids only, is what it is. A tags list is
  /// the tags sealed in it that the log kept: a log strips the tags deleted after the list was
  /// set.
  ///
  /// - Throws: ``AccountKeyError`` for an event no device of the account vouched for, that
  ///   does not open with these keys, that carries no sealed values where its kind needs them,
  ///   or whose sealed values are of another note or attachment; or what `objectKey` throws.
  public func open(_ sealed: Event, objectKey: (Identifier) throws -> ObjectKey) throws -> Event {
    try open(sealed, heldKey: { try objectKey($0) })
  }

  /// ``open(_:objectKey:)``, given the keys a device holds: an event whose object has no key
  /// (`heldKey` gives nil: the object's deletion erased it) is taken as erased, redacted.
  func open(_ sealed: Event, heldKey: (Identifier) throws -> ObjectKey?) throws -> Event {
    try keys.checkAuthenticator(of: sealed)
    if let redaction = sealed.redaction {
      // As the device stores it: its ids, without what vouched for them.
      return Event.redacted(stamp: sealed.stamp, change: sealed.change, reason: redaction)
        ?? sealed
    }
    guard let values = sealed.sealedValuesRange else {
      switch sealed.change {
      case .noteDeleted, .attachmentDeleted:
        return Event(stamp: sealed.stamp, change: sealed.change)
      default:
        throw AccountKeyError(
          "event \(sealed.stamp) (\(sealed.change.kind)) of an encrypted account carries no "
            + "sealed values")
      }
    }
    let key: ObjectKey
    if let object = Self.keyedObject(of: sealed.change) {
      guard let held = try heldKey(object) else {
        return Event.redacted(stamp: sealed.stamp, change: sealed.change, reason: .deleted)
          ?? sealed
      }
      key = held
    } else {
      key = keys.tagValuesKey
    }
    let opened = try Self.withContext(of: sealed.stamp, sealed.change.kind) { context in
      try key.open(sealed.unknownFields[values], context: context)
    }
    let fields = try Padding.valueFields(opened)
    let clear: Event
    do {
      clear = try fields.withUnsafeBytes { fields in
        try Event(stamp: sealed.stamp, kind: sealed.change.kind, sealedFields: fields)
      }
    } catch {
      throw AccountKeyError("event \(sealed.stamp)'s sealed values are malformed: \(error)")
    }
    guard clear.change.objects == sealed.change.objects else {
      throw AccountKeyError(
        "event \(sealed.stamp)'s sealed values are of another note or attachment")
    }
    switch (sealed.change, clear.change) {
    case (.tagsSet(_, let kept), .tagsSet(let note, let names)):
      let keptNames = Set(kept)
      return Event(
        stamp: clear.stamp,
        change: .tagsSet(note, tags: names.filter { keptNames.contains(keys.tagName($0)) }),
        unknownFields: clear.unknownFields)
    case (.tagAdded(_, let keyed), .tagAdded(_, let name)),
      (.tagRenamed(let keyed), .tagRenamed(let name)):
      guard keys.tagName(name) == keyed else {
        throw AccountKeyError("event \(sealed.stamp)'s sealed tag name is not the tag it names")
      }
      return clear
    default:
      return clear
    }
  }

  /// The key that seals the values of an event whose sealed form is `change`.
  private func key(for change: Change, objectKey: (Identifier) throws -> ObjectKey) throws
    -> ObjectKey
  {
    if let object = Self.keyedObject(of: change) { return try objectKey(object) }
    return keys.tagValuesKey
  }

  /// The note or attachment whose key seals `change`'s values: the attachment an addition
  /// adds, else the note the change is of; nil for a change that carries ids only, or that
  /// names a tag apart from any note (sealed with the account's tag-values key).
  public static func keyedObject(of change: Change) -> Identifier? {
    switch change {
    case .noteDeleted, .attachmentDeleted: nil
    case .attachmentAdded(let attachment): attachment.id.identifier
    default: change.noteID?.identifier
    }
  }

  /// Lends `body` what a sealed value is bound to: the event's stamp and kind, written
  /// without allocating.
  private static func withContext<R>(
    of stamp: Stamp, _ kind: EventKind, _ body: (UnsafeRawBufferPointer) throws -> R
  ) throws -> R {
    try stamp.withKey { stampBytes in
      try withUnsafeBytes(of: kind.rawValue.bigEndian) { kindBytes in
        try withUnsafeTemporaryAllocation(
          byteCount: contextPrefix.count + stampBytes.count + kindBytes.count, alignment: 1
        ) { context in
          context.copyBytes(from: contextPrefix)
          UnsafeMutableRawBufferPointer(rebasing: context[contextPrefix.count...])
            .copyMemory(from: stampBytes)
          UnsafeMutableRawBufferPointer(
            rebasing: context[(contextPrefix.count + stampBytes.count)...]
          ).copyMemory(from: kindBytes)
          return try body(UnsafeRawBufferPointer(context))
        }
      }
    }
  }

  private static let contextPrefix = Array("vlog event\u{0}".utf8)
}
