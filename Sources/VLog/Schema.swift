internal import LMDB

/// The named databases of a store, all in one LMDB environment.
///
/// | database | key | value |
/// |---|---|---|
/// | `meta` | name | store facts: format, replica id, the account it belongs to, and the ``EventLog``'s state (`logState`) |
/// | `log` | sequence (8 bytes, big-endian) | ``LogRecord``: checksum (4) + encoded event |
/// | `eventIndex` | stamp (24) | sequence (8) |
/// | `objects` | note or attachment id (16) + sequence (8) | empty; with sequence 0: its deletion's sequence |
/// | `blobReferences` | SHA-256 (32) + sequence (8) | empty: the attachments, not erased, that use the blob |
/// | `fields` | — | unused: a store's note records hold each field's newest change |
/// | `superseded` | milliseconds (8) + sequence (8) | empty: replaced changes awaiting redaction |
/// | `blobs` | SHA-256 (32) | attachment bytes |
/// | `notes` | note id (16) | ``NoteRecord`` |
/// | `tombstones` | id (16) | ``TombstoneRecord`` |
/// | `attachments` | attachment id (16) | ``AttachmentRecord`` |
/// | `noteAttachments` | note id (16) + attachment id (16) | empty |
/// | `tags` | tag id (UTF-8) | ``TagRecord`` |
/// | `tagNotes` | tag id + 0x00 + inverted sort date (8) + note id (16) | empty |
/// | `timeline` | archived (1) + inverted sort date (8) + note id (16) | empty |
/// | `searchPostings`, `searchNotes`, `searchOrdinals` | see ``SearchIndex`` | |
/// | `pendingNotes` | note id (16) | its latest local change's sequence (8), while the server has not stored it (``PendingNotes``) |
///
/// `notes` to `timeline` are projections: derived from the log, dropped and rebuilt by
/// ``NoteStore/rebuildProjections(progress:)``. The search index is derived too, and brought up
/// to date lazily (``SearchIndex``). The log, its indexes and the blobs are the store's data.
struct Schema: Sendable {
  let meta: Database
  let log: Database
  let eventIndex: Database
  let objects: Database
  let blobReferences: Database
  let fields: Database
  let superseded: Database
  let blobs: Database
  let notes: Database
  /// Each note's text stamp and sequence number, apart from the rest of its record in `notes`
  /// (same keys): a text edit rewrites this small entry only.
  let noteTexts: Database
  let tombstones: Database
  let attachments: Database
  let noteAttachments: Database
  let tags: Database
  let tagNotes: Database
  let timeline: Database
  let searchPostings: Database
  let searchNotes: Database
  let searchOrdinals: Database
  /// The notes with local changes the server has not stored yet (``PendingNotes``): this
  /// replica's, rebuilt from the outbox, not in the state digest.
  let pendingNotes: Database
  /// The log in `log`, `eventIndex` and `meta`.
  let eventLog: EventLog

  /// The projections, in the order the state digest reads them.
  var projections: [Database] {
    [notes, noteTexts, tombstones, attachments, noteAttachments, tags, tagNotes, timeline]
  }

  /// The search index's databases: derived, emptied by a rebuild, not in the state digest.
  var search: [Database] { [searchPostings, searchNotes, searchOrdinals] }

  /// Every database of the store.
  var all: [Database] {
    [meta, log, eventIndex, objects, blobReferences, fields, superseded, blobs] + projections
      + search + [pendingNotes]
  }

  static let databaseCount = 20

  init(environment: Environment, create: Bool) throws {
    let flags: Database.Flags = create ? .create : []
    func open(_ name: String) throws -> Database {
      try environment.openDatabase(named: name, flags: flags)
    }
    meta = try open("meta")
    log = try open("log")
    eventIndex = try open("eventIndex")
    objects = try open("objects")
    blobReferences = try open("blobReferences")
    fields = try open("fields")
    superseded = try open("superseded")
    blobs = try open("blobs")
    notes = try open("notes")
    noteTexts = try open("noteTexts")
    tombstones = try open("tombstones")
    attachments = try open("attachments")
    noteAttachments = try open("noteAttachments")
    tags = try open("tags")
    tagNotes = try open("tagNotes")
    timeline = try open("timeline")
    searchPostings = try open("searchPostings")
    searchNotes = try open("searchNotes")
    searchOrdinals = try open("searchOrdinals")
    pendingNotes = try open("pendingNotes")
    eventLog = EventLog(
      entries: log, index: eventIndex, state: meta, objects: objects,
      blobReferences: blobReferences, fields: fields, superseded: superseded,
      fieldIndex: NoteRecordFields(notes: notes, noteTexts: noteTexts))
  }
}

extension Schema {
  /// A note's record, if the store has one.
  func noteRecord(_ id: NoteID, in transaction: borrowing some Transaction & ~Copyable) throws
    -> NoteRecord?
  {
    try id.identifier.withKey { key in
      try transaction.withValue(forKey: key, in: notes) { bytes throws -> NoteRecord? in
        guard let bytes else { return nil }
        return try transaction.withValue(forKey: key, in: noteTexts) { text in
          try NoteRecord(decoding: bytes, text: text)
        }
      }
    }
  }

  /// The attachments a note shows, in order (``NoteMerge/shownAttachments(of:added:)``), from
  /// its record and the attachments added to it. The ids may include deleted attachments:
  /// readers skip those.
  func attachmentIDs(
    of note: NoteID, _ record: NoteRecord, merge: NoteMerge,
    in transaction: borrowing some Transaction & ~Copyable
  ) throws -> [AttachmentID] {
    var ids: [AttachmentID] = []
    try transaction.forEach(in: noteAttachments, range: .prefix(note.identifier.bytes)) {
      key, _ in
      ids.append(AttachmentID(try Identifier.ending(key, length: 32, in: "noteAttachments")))
    }
    var added: [(stamp: Stamp, id: AttachmentID)] = []
    for id in ids where !record.attachments.contains(id) {
      guard let stored = try attachmentRecord(id, in: transaction), !stored.isErased else {
        continue
      }
      added.append((stored.stamp, id))
    }
    return merge.shownAttachments(of: record, added: added)
  }

  /// An attachment's record, if the store has one (whether or not its note still exists).
  func attachmentRecord(
    _ id: AttachmentID, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> AttachmentRecord? {
    try id.identifier.withKey { key in
      try transaction.withValue(forKey: key, in: attachments) {
        bytes throws -> AttachmentRecord? in
        try bytes.map { try AttachmentRecord(id: id, decoding: $0) }
      }
    }
  }

  /// Whether a note or attachment has a tombstone.
  func hasTombstone(_ id: Identifier, in transaction: borrowing some Transaction & ~Copyable)
    throws -> Bool
  {
    try id.withKey { key in try transaction.containsValue(forKey: key, in: tombstones) }
  }
}

/// Keys of the store's databases.
enum Keys {
  static func noteAttachment(_ note: NoteID, _ attachment: AttachmentID) -> [UInt8] {
    var key = note.identifier.bytes
    attachment.identifier.append(to: &key)
    return key
  }

  /// A tag's index entry for a note: the tag's notes sort newest first, as in the timeline.
  static func tagNote(_ tag: TagID, sortDate: Int64, _ note: NoteID) -> [UInt8] {
    var key = tagPrefix(tag)
    key.reserveCapacity(key.count + 24)
    BigEndian.append(invertedSortDate(sortDate), to: &key)
    note.identifier.append(to: &key)
    return key
  }

  /// A sort date's bits inverted, so that later dates sort earlier.
  static func invertedSortDate(_ sortDate: Int64) -> UInt64 {
    ~(UInt64(bitPattern: sortDate) ^ (1 << 63))
  }

  static func tagPrefix(_ tag: TagID) -> [UInt8] {
    Array(tag.rawValue.utf8) + [0]
  }

  /// Newest first: the sort date's bits are inverted so that later dates sort earlier.
  static func timeline(archived: Bool, sortDate: Int64, note: NoteID) -> [UInt8] {
    var key: [UInt8] = [archived ? 1 : 0]
    key.reserveCapacity(25)
    BigEndian.append(invertedSortDate(sortDate), to: &key)
    note.identifier.append(to: &key)
    return key
  }

  static func timelineNote(_ key: UnsafeRawBufferPointer) throws(VLogError) -> NoteID {
    NoteID(try Identifier.ending(key, length: 25, in: "timeline"))
  }

  enum Meta {
    static let format = Array("format".utf8)
    static let replica = Array("replica".utf8)
    /// The identity of the store's data file when it last opened for writing
    /// (`NoteStore.fileIdentity(of:)`).
    static let file = Array("file".utf8)
    /// The replica ids the store had before its own, 16 bytes each (`NoteStore.renewReplica()`).
    static let formerReplicas = Array("formerReplicas".utf8)
    /// The server's clock minus this device's, in milliseconds, 8 bytes big-endian
    /// (`NoteStore.recordServerClock(offset:)`).
    static let clock = Array("clock".utf8)
    /// The account the store belongs to (``AccountBinding``).
    static let account = Array("account".utf8)
  }
}
