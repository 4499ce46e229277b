internal import LMDB

/// A note as the `notes` projection stores it: each mutable field with the stamp of the change
/// that set it. A record can exist before its note is created (changes may arrive before the
/// creation); such a note is invisible until its creation arrives.
///
/// The text is not copied: the record holds where the winning `textSet` event lives in the
/// log (its sequence number; 0 while no text is set), and reading a note's text reads that
/// event. Every field keeps its winning event's sequence number: the record is where the
/// store's log finds each field's newest change (``FieldIndex``). A sequence number is local
/// to a store, so the ``canonicalEncoding()`` that state digests hash leaves them out: the
/// stamps name the same events on every replica.
struct NoteRecord: Equatable, Sendable {
  var isCreated = false
  var creationStamp = Stamp.zero
  var creationDate: Int64 = 0
  var textStamp = Stamp.zero
  /// The log sequence number of the `textSet` event whose text the note has; 0 for none.
  var textSequence: UInt64 = 0
  var archivedStamp = Stamp.zero
  var archivedSequence: UInt64 = 0
  var archived = false
  var sortDateStamp = Stamp.zero
  var sortDateSequence: UInt64 = 0
  var sortDate: Int64 = 0
  /// The newest tags list's stamp and sequence number.
  var tagsStamp = Stamp.zero
  var tagsSequence: UInt64 = 0
  /// The newest tags list, without the tags a later change put on or took off the note (and
  /// without those deleted after it).
  var tagList: [String] = []
  /// The tags put on or taken off the note after its newest list, each tag's newest change
  /// alone, oldest first.
  var tagChanges: [TagChange] = []
  var attachmentsStamp = Stamp.zero
  var attachmentsSequence: UInt64 = 0
  var attachments: [AttachmentID] = []
  /// The note's current texts (the one it shows and its conflicts), and what its text changes
  /// replaced: kept in the text part.
  var texts = TextVersions()

  /// The version byte of the record's stored part (everything but the text's stamp and
  /// sequence number, which ``encodedText()`` stores apart: most changes are text edits, and
  /// they then rewrite a small entry instead of the whole record).
  static let formatVersion: UInt8 = 5
  /// The version byte of ``canonicalEncoding()``, which the state digest hashes.
  static let canonicalVersion: UInt8 = 5

  /// The sort date, or the creation date while no change has set one.
  var effectiveSortDate: Int64 {
    sortDateStamp == .zero ? creationDate : sortDate
  }

  /// The note's tags, as it shows them: its newest list's, then those added after it, oldest
  /// first.
  var tags: [String] {
    guard !tagChanges.isEmpty else { return tagList }
    return tagList + tagChanges.compactMap(\.name)
  }

  /// The tags' ids, without duplicates, in order of first appearance.
  var tagIDs: [TagID] {
    let tags = self.tags
    guard tags.count <= 16 else {
      var seen = Set<TagID>()
      return tags.map(TagID.init(name:)).filter { seen.insert($0).inserted }
    }
    // A note has a few tags: a linear search beats hashing them.
    var ids: [TagID] = []
    ids.reserveCapacity(tags.count)
    for name in tags {
      let id = TagID(name: name)
      if !ids.contains(id) { ids.append(id) }
    }
    return ids
  }

  /// Each tag's id, its spelling here (its first appearance, cleaned) and the stamp of the
  /// change that put it there (the list's or the addition's), in order.
  var tagSpellings: [(tag: TagID, spelling: String, stamp: Stamp)] {
    var seen = Set<TagID>()
    var result: [(tag: TagID, spelling: String, stamp: Stamp)] = []
    func add(_ name: String, _ stamp: Stamp) {
      let spelling = TagName.clean(name)
      let id = TagID(name: spelling)
      guard !spelling.isEmpty, seen.insert(id).inserted else { return }
      result.append((id, spelling, stamp))
    }
    for name in tagList { add(name, tagsStamp) }
    for change in tagChanges { if let name = change.name { add(name, change.stamp) } }
    return result
  }

  /// The record's stored part: every field but the text's stamp and sequence number.
  func encoded() -> [UInt8] { encoded(canonical: false) }

  /// The record's text part: the stamp and sequence number of its winning text change, then
  /// its other current texts (stamp and sequence number each), the texts named but not yet
  /// received (stamp and the time they were named), and the newest change that recorded no
  /// base (a byte: 0 none, 1 the winning change, 2 the stamp follows).
  func encodedText() -> [UInt8] {
    var writer = ProtobufWriter()
    writer.buffer.reserveCapacity(37)
    textStamp.append(to: &writer.buffer)
    writer.rawVarint(textSequence)
    let others = texts.conflicts(showing: textStamp)
    writer.rawVarint(UInt64(others.count))
    for version in others {
      version.stamp.append(to: &writer.buffer)
      writer.rawVarint(version.sequence)
    }
    writer.rawVarint(UInt64(texts.awaited.count))
    for (stamp, milliseconds) in texts.awaited.sorted(by: { $0.key < $1.key }) {
      stamp.append(to: &writer.buffer)
      writer.rawVarint(milliseconds)
    }
    switch texts.floor {
    case .zero: writer.buffer.append(0)
    case textStamp: writer.buffer.append(1)
    default:
      writer.buffer.append(2)
      texts.floor.append(to: &writer.buffer)
    }
    return writer.buffer
  }

  /// Whether the two records differ only in their text part.
  func hasSameStoredPart(as other: NoteRecord) -> Bool {
    var a = self
    var b = other
    (a.textStamp, a.textSequence, b.textStamp, b.textSequence) = (.zero, 0, .zero, 0)
    (a.texts, b.texts) = (TextVersions(), TextVersions())
    return a == b
  }

  /// What a text change made on this record replaces: the text it shows (if any), then the
  /// conflicts named, each once.
  func replacedTexts(resolving conflicts: [Stamp]) -> ReplacedTexts {
    var base = textStamp == .zero ? ReplacedTexts() : ReplacedTexts(textStamp)
    for stamp in conflicts where !base.contains(stamp) { base.append(stamp) }
    return base
  }

  /// Whether the two records' text parts differ.
  func hasSameTextPart(as other: NoteRecord) -> Bool {
    textStamp == other.textStamp && textSequence == other.textSequence && texts == other.texts
  }

  /// The record's bytes without the sequence numbers, equal on every replica with the same
  /// state.
  func canonicalEncoding() -> [UInt8] { encoded(canonical: true) }

  private func encoded(canonical: Bool) -> [UInt8] {
    var writer = ProtobufWriter()
    writer.buffer.reserveCapacity(
      168 + tagList.reduce(0) { $0 + $1.utf8.count + 1 } + tagChanges.count * 48
        + attachments.count * 16)
    writer.buffer.append(canonical ? Self.canonicalVersion : Self.formatVersion)
    writer.buffer.append(isCreated ? 1 : 0)
    creationStamp.append(to: &writer.buffer)
    writer.rawSigned(creationDate)
    if canonical {
      textStamp.append(to: &writer.buffer)
      let others = texts.conflicts(showing: textStamp)
      writer.rawVarint(UInt64(others.count))
      for version in others { version.stamp.append(to: &writer.buffer) }
    }
    archivedStamp.append(to: &writer.buffer)
    if !canonical { writer.rawVarint(archivedSequence) }
    writer.buffer.append(archived ? 1 : 0)
    sortDateStamp.append(to: &writer.buffer)
    if !canonical { writer.rawVarint(sortDateSequence) }
    writer.rawSigned(sortDate)
    tagsStamp.append(to: &writer.buffer)
    if !canonical { writer.rawVarint(tagsSequence) }
    writer.rawVarint(UInt64(tagList.count))
    for tag in tagList { writer.rawString(tag) }
    writer.rawVarint(UInt64(tagChanges.count))
    for change in tagChanges {
      change.stamp.append(to: &writer.buffer)
      change.key.identifier.append(to: &writer.buffer)
      if let name = change.name {
        writer.buffer.append(1)
        writer.rawString(name)
      } else {
        writer.buffer.append(0)
      }
    }
    attachmentsStamp.append(to: &writer.buffer)
    if !canonical { writer.rawVarint(attachmentsSequence) }
    writer.rawVarint(UInt64(attachments.count))
    for attachment in attachments { attachment.identifier.append(to: &writer.buffer) }
    return writer.buffer
  }

  init() {}

  /// Decodes a record from its stored part and its text part.
  init(decoding bytes: UnsafeRawBufferPointer, text: UnsafeRawBufferPointer?) throws(VLogError) {
    try self.init(decodingStoredPart: bytes)
    guard let text else {
      throw VLogError(.corruptStore, "a note record has no text part")
    }
    (textStamp, textSequence, texts) = try Self.decodeText(text)
  }

  /// Decodes a record's stored part; its text stamp and sequence number are left zero.
  init(decodingStoredPart bytes: UnsafeRawBufferPointer) throws(VLogError) {
    var reader = ProtobufReader(bytes)
    guard try reader.byte() == Self.formatVersion else {
      throw VLogError(.corruptStore, "a note record has an unknown format version")
    }
    isCreated = try reader.byte() == 1
    creationStamp = try reader.stamp()
    creationDate = try reader.signed()
    archivedStamp = try reader.stamp()
    archivedSequence = try reader.varint()
    archived = try reader.byte() == 1
    sortDateStamp = try reader.stamp()
    sortDateSequence = try reader.varint()
    sortDate = try reader.signed()
    tagsStamp = try reader.stamp()
    tagsSequence = try reader.varint()
    let tagCount = try reader.count(minimumBytesEach: 1)
    tagList.reserveCapacity(tagCount)
    for _ in 0..<tagCount { tagList.append(try reader.rawString("tag")) }
    let changeCount = try reader.count(minimumBytesEach: Stamp.byteCount + 17)
    tagChanges.reserveCapacity(changeCount)
    for _ in 0..<changeCount {
      let stamp = try reader.stamp()
      let key = TagKey(try reader.fixedIdentifier())
      let name: String?
      switch try reader.byte() {
      case 0: name = nil
      case 1: name = try reader.rawString("tag")
      case let other:
        throw VLogError(.corruptStore, "a note record's tag change has marker \(other)")
      }
      tagChanges.append(TagChange(stamp: stamp, key: key, name: name))
    }
    attachmentsStamp = try reader.stamp()
    attachmentsSequence = try reader.varint()
    let attachmentCount = try reader.count(minimumBytesEach: 16)
    attachments.reserveCapacity(attachmentCount)
    for _ in 0..<attachmentCount {
      attachments.append(AttachmentID(try reader.fixedIdentifier()))
    }
    guard reader.isAtEnd else {
      throw VLogError(.corruptStore, "a note record has \(bytes.count - reader.offset) extra bytes")
    }
  }

  /// Decodes a record's text part.
  static func decodeText(_ bytes: UnsafeRawBufferPointer) throws(VLogError) -> (
    Stamp, UInt64, TextVersions
  ) {
    var reader = ProtobufReader(bytes)
    let stamp = try reader.stamp()
    let sequence = try reader.varint()
    var others: [TextVersions.Version] = []
    for _ in 0..<(try reader.count(minimumBytesEach: Stamp.byteCount + 1)) {
      others.append(
        TextVersions.Version(stamp: try reader.stamp(), sequence: try reader.varint()))
    }
    var awaited: [Stamp: UInt64] = [:]
    for _ in 0..<(try reader.count(minimumBytesEach: Stamp.byteCount + 1)) {
      awaited[try reader.stamp()] = try reader.varint()
    }
    let floor: Stamp
    switch try reader.byte() {
    case 0: floor = .zero
    case 1: floor = stamp
    case 2: floor = try reader.stamp()
    case let other:
      throw VLogError(.corruptStore, "a note record's text part has floor marker \(other)")
    }
    guard reader.isAtEnd else {
      throw VLogError(
        .corruptStore, "a note record's text part has \(bytes.count - reader.offset) extra bytes")
    }
    let shown = stamp == .zero ? nil : TextVersions.Version(stamp: stamp, sequence: sequence)
    return (
      stamp, sequence,
      TextVersions(shown: shown, others: others, awaited: awaited, floor: floor)
    )
  }
}

/// A tag put on a note (with the name it was added under) or taken off it (no name), after
/// the note's newest tags list.
struct TagChange: Equatable, Sendable {
  var stamp: Stamp
  var key: TagKey
  var name: String?
}

/// A tag as the `tags` projection stores it: the newest rename, the newest spelling among the
/// tags of the visible notes that use it, and how many visible notes use it.
///
/// The display name is the newer of the two. Both are functions of the state, never of which
/// events were seen on the way — the spelling comes from the notes' current tags, not from
/// every tags change ever made — so that erasing a deleted note's events, or replaced values,
/// cannot change a tag's name.
struct TagRecord: Equatable, Sendable {
  var renameStamp = Stamp.zero
  var renameName = ""
  /// The tags stamp of ``spellingNote``, the visible note with the newest tags change that
  /// names the tag.
  var spellingStamp = Stamp.zero
  var spelling = ""
  var spellingNote = NoteID(Identifier(high: 0, low: 0))
  var noteCount = 0

  /// The display name: the newer of the rename and the spelling.
  var name: String { renameStamp > spellingStamp ? renameName : spelling }

  /// Whether the record says anything: a record of no note and no rename is removed.
  var isEmpty: Bool { noteCount == 0 && renameStamp == .zero && spellingStamp == .zero }

  func encoded() -> [UInt8] {
    var writer = ProtobufWriter()
    renameStamp.append(to: &writer.buffer)
    writer.rawString(renameName)
    spellingStamp.append(to: &writer.buffer)
    writer.rawString(spelling)
    spellingNote.identifier.append(to: &writer.buffer)
    writer.rawVarint(UInt64(noteCount))
    return writer.buffer
  }

  init() {}

  init(decoding bytes: UnsafeRawBufferPointer) throws(VLogError) {
    var reader = ProtobufReader(bytes)
    renameStamp = try reader.stamp()
    renameName = try reader.rawString("tag name")
    spellingStamp = try reader.stamp()
    spelling = try reader.rawString("tag spelling")
    spellingNote = NoteID(try reader.fixedIdentifier())
    noteCount = try reader.storedInt("tag note count")
    guard reader.isAtEnd else { throw VLogError(.corruptStore, "a tag record has extra bytes") }
  }
}

/// An attachment as the `attachments` projection stores it, with the stamp of the event that
/// added it (if an id is added twice, the earlier event wins).
///
/// An attachment of a deleted note keeps an *erased* record: the stamp and the note, and no
/// metadata — what a redacted `attachmentAdded` event carries — so that "the earliest add
/// wins" gives the same result whether a replica saw the content before it was erased or not.
struct AttachmentRecord: Equatable, Sendable {
  var stamp: Stamp
  var attachment: Attachment

  /// Whether the record is erased: its note was deleted.
  var isErased: Bool { attachment.blobHash == .erased }

  func encoded() -> [UInt8] {
    var writer = ProtobufWriter()
    stamp.append(to: &writer.buffer)
    attachment.noteID.identifier.append(to: &writer.buffer)
    guard !isErased else { return writer.buffer }
    writer.rawVarint(UInt64(attachment.width))
    writer.rawVarint(UInt64(attachment.height))
    writer.rawVarint(UInt64(attachment.byteCount))
    writer.buffer.append(contentsOf: attachment.blobHash.bytes)
    writer.rawString(attachment.mimeType)
    return writer.buffer
  }

  init(stamp: Stamp, attachment: Attachment) {
    self.stamp = stamp
    self.attachment = attachment
  }

  /// The record with its metadata erased.
  var erased: AttachmentRecord {
    AttachmentRecord(
      stamp: stamp, attachment: Attachment(redacted: attachment.id, of: attachment.noteID))
  }

  init(id: AttachmentID, decoding bytes: UnsafeRawBufferPointer) throws(VLogError) {
    var reader = ProtobufReader(bytes)
    stamp = try reader.stamp()
    let noteID = NoteID(try reader.fixedIdentifier())
    if reader.isAtEnd {
      attachment = Attachment(redacted: id, of: noteID)
      return
    }
    let width = try reader.storedInt("attachment width")
    let height = try reader.storedInt("attachment height")
    let byteCount = try reader.storedInt("attachment size")
    guard let hash = BlobHash(bytes: Array(try reader.fixed(32))), hash != .erased else {
      throw VLogError(.corruptStore, "an attachment record has no hash")
    }
    let mimeType = try reader.rawString("media type")
    guard reader.isAtEnd else {
      throw VLogError(.corruptStore, "an attachment record has extra bytes")
    }
    attachment = Attachment(
      id: id, noteID: noteID, mimeType: mimeType, width: width, height: height, blobHash: hash,
      byteCount: byteCount)
  }
}

/// A tombstone: the kind of object deleted and the earliest stamp that deleted it.
struct TombstoneRecord: Equatable, Sendable {
  var kind: DeletedObject.Kind
  var stamp: Stamp

  func encoded() -> [UInt8] {
    var bytes = [kind.rawValue]
    stamp.append(to: &bytes)
    return bytes
  }

  init(kind: DeletedObject.Kind, stamp: Stamp) {
    self.kind = kind
    self.stamp = stamp
  }

  init(decoding bytes: UnsafeRawBufferPointer) throws(VLogError) {
    guard bytes.count == 1 + Stamp.byteCount, let kind = DeletedObject.Kind(rawValue: bytes[0])
    else { throw VLogError(.corruptStore, "a tombstone record is malformed") }
    self.kind = kind
    stamp = Stamp(bytes: bytes, at: 1)
  }
}

extension ProtobufWriter {
  mutating func rawSigned(_ value: Int64) {
    rawVarint(UInt64(bitPattern: (value << 1) ^ (value >> 63)))
  }

  mutating func rawString(_ string: String) {
    var string = string
    string.withUTF8 { utf8 in
      rawVarint(UInt64(utf8.count))
      buffer.append(contentsOf: utf8)
    }
  }
}

extension ProtobufReader {
  mutating func byte() throws(VLogError) -> UInt8 {
    try fixed(1)[0]
  }

  mutating func fixed(_ count: Int) throws(VLogError) -> UnsafeRawBufferPointer {
    guard base.count - offset >= count else {
      throw VLogError(.corruptStore, "a record is truncated at byte \(offset)")
    }
    defer { offset += count }
    return UnsafeRawBufferPointer(rebasing: base[offset..<offset + count])
  }

  mutating func stamp() throws(VLogError) -> Stamp {
    Stamp(bytes: try fixed(Stamp.byteCount))
  }

  mutating func fixedIdentifier() throws(VLogError) -> Identifier {
    Identifier(bytes: try fixed(16))
  }

  mutating func rawString(_ name: String) throws(VLogError) -> String {
    let bytes = try lengthDelimited()
    guard let string = String(validUTF8: bytes) else {
      throw VLogError(.corruptStore, "a record's \(name) is not valid UTF-8")
    }
    return string
  }

  /// A stored non-negative integer that must fit an `Int`.
  mutating func storedInt(_ name: String) throws(VLogError) -> Int {
    let value = try varint()
    guard let integer = Int(exactly: value) else {
      throw VLogError(.corruptStore, "a record's \(name) \(value) is out of range")
    }
    return integer
  }

  /// A count of items that each take at least `minimumBytesEach` bytes, checked against what
  /// is left so that a corrupt count cannot allocate without bound.
  mutating func count(minimumBytesEach: Int) throws(VLogError) -> Int {
    let count = try varint()
    guard count <= UInt64((base.count - offset) / minimumBytesEach) else {
      throw VLogError(.corruptStore, "a record's count \(count) exceeds its size")
    }
    return Int(count)
  }
}

extension NoteRecord {
  /// A field's winning stamp and sequence number.
  func newestChange(to field: NoteField) -> (stamp: Stamp, sequence: UInt64)? {
    let (stamp, sequence): (Stamp, UInt64) =
      switch field {
      case .text: (textStamp, textSequence)
      case .archived: (archivedStamp, archivedSequence)
      case .sortDate: (sortDateStamp, sortDateSequence)
      case .tags: (tagsStamp, tagsSequence)
      case .attachments: (attachmentsStamp, attachmentsSequence)
      }
    return stamp == .zero ? nil : (stamp, sequence)
  }
}

/// A store's note records as its log's ``FieldIndex``: a field's newest change is the one its
/// record holds (a deleted note has none).
struct NoteRecordFields: FieldIndex {
  let notes: Database
  let noteTexts: Database

  func newestChange(
    to note: NoteID, field: NoteField, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> (stamp: Stamp, sequence: UInt64)? {
    try note.identifier.withKey { key in
      if field == .text {
        return try transaction.withValue(forKey: key, in: noteTexts) {
          bytes throws -> (stamp: Stamp, sequence: UInt64)? in
          guard let bytes else { return nil }
          let (stamp, sequence, _) = try NoteRecord.decodeText(bytes)
          return stamp == .zero ? nil : (stamp, sequence)
        }
      }
      return try transaction.withValue(forKey: key, in: notes) {
        bytes throws -> (stamp: Stamp, sequence: UInt64)? in
        try bytes.flatMap { try NoteRecord(decodingStoredPart: $0).newestChange(to: field) }
      }
    }
  }
}
