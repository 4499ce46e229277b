internal import Foundation
internal import LMDB

extension NoteStore {
  /// A note by id, or nil if there is none (never created here, not yet synced, or deleted).
  public func note(_ id: NoteID) throws -> Note? {
    try read { transaction in
      guard let record = try noteRecord(id, in: transaction), record.isCreated else { return nil }
      return try makeNote(id, record, in: transaction)
    }
  }

  /// The timeline: notes not archived, newest sort date first, a page at a time.
  ///
  /// Reads only the page from the sort-date index, so its cost does not grow with the number
  /// of notes.
  ///
  /// - Parameters:
  ///   - limit: The page size.
  ///   - after: The last note of the previous page, or nil for the first page.
  public func timeline(limit: Int = 50, after: NoteID? = nil) throws -> [NoteSummary] {
    try page(archived: false, limit: limit, after: after)
  }

  /// The archive: archived notes, newest sort date first, a page at a time.
  ///
  /// - Parameters:
  ///   - limit: The page size.
  ///   - after: The last note of the previous page, or nil for the first page.
  public func archivedNotes(limit: Int = 50, after: NoteID? = nil) throws -> [NoteSummary] {
    try page(archived: true, limit: limit, after: after)
  }

  /// Whether a note was deleted. A deleted note never comes back: changes to it are refused
  /// locally and ignored when they arrive from other replicas.
  public func isDeleted(_ id: NoteID) throws -> Bool {
    try read { transaction in try schema.hasTombstone(id.identifier, in: transaction) }
  }

  /// The archive, newest sort date first: renamed ``archivedNotes(limit:after:)``.
  @available(*, deprecated, renamed: "archivedNotes(limit:after:)")
  public func archive(limit: Int = 50, after: NoteID? = nil) throws -> [NoteSummary] {
    try archivedNotes(limit: limit, after: after)
  }

  private func page(archived: Bool, limit: Int, after: NoteID?) throws -> [NoteSummary] {
    try read { transaction in
      var start: [UInt8] = [archived ? 1 : 0]
      if let after {
        guard let record = try noteRecord(after, in: transaction), record.isCreated,
          record.archived == archived
        else {
          throw VLogError(
            .noteNotFound,
            "note \(after) is not in the \(archived ? "archive" : "timeline"); start from the "
              + "first page")
        }
        start = Keys.timeline(archived: archived, sortDate: record.effectiveSortDate, note: after)
        start.append(0)  // the first key after it
      }
      var ids: [NoteID] = []
      try transaction.withEntries(
        in: schema.timeline, range: .from(start, to: [archived ? 2 : 1])
      ) { entries throws in
        while ids.count < limit, let id = try entries.next({ key, _ in try Keys.timelineNote(key) })
        {
          ids.append(id)
        }
      }
      let cache = TagNameCache()
      return try ids.map { try summary($0, in: transaction, cache: cache) }
    }
  }

  /// Notes with a tag, archived or not, newest sort date first, a page at a time.
  ///
  /// Reads only the page from the tag's index, so its cost does not grow with the number of
  /// notes that have the tag.
  ///
  /// - Parameters:
  ///   - name: The tag's name, in any case.
  ///   - limit: The page size.
  ///   - after: The last note of the previous page, or nil for the first page.
  public func notes(taggedWith name: String, limit: Int = 50, after: NoteID? = nil) throws
    -> [NoteSummary]
  {
    let tag = TagID(name: name)
    return try read { transaction in
      let prefix = Keys.tagPrefix(tag)
      var start = prefix
      if let after {
        guard let record = try noteRecord(after, in: transaction), record.isCreated,
          record.tagIDs.contains(tag)
        else {
          throw VLogError(
            .noteNotFound,
            "note \(after) does not have the tag \(String(reflecting: name)); start from the "
              + "first page")
        }
        start = Keys.tagNote(tag, sortDate: record.effectiveSortDate, after)
        start.append(0)  // the first key after it
      }
      var end = prefix
      end[end.count - 1] = 1  // the first key after every key of the tag
      var ids: [NoteID] = []
      try transaction.withEntries(in: schema.tagNotes, range: .from(start, to: end)) {
        entries throws in
        while ids.count < limit,
          let id = try entries.next({ key, _ in
            NoteID(try Identifier.ending(key, length: prefix.count + 24, in: "tagNotes"))
          })
        {
          ids.append(id)
        }
      }
      let cache = TagNameCache()
      return try ids.map { try summary($0, in: transaction, cache: cache) }
    }
  }

  /// Tags in use with the number of notes using each, by name.
  public func tags() throws -> [TagCount] {
    try read { transaction in
      var tags: [TagCount] = []
      try transaction.forEach(in: schema.tags) { key, value in
        let record = try TagRecord(decoding: value)
        guard record.noteCount > 0 else { return }
        let id = TagID(rawValue: String(decoding: key, as: UTF8.self))
        tags.append(TagCount(tag: Tag(id: id, name: record.name), noteCount: record.noteCount))
      }
      return tags
    }
  }

  /// The notes that have text conflicts (``Note/conflicts``: texts written on another device
  /// without seeing the one the note shows), in id order, each whole: what an app lists as
  /// needing attention.
  ///
  /// Reads every note's small text entry (its stamps, not its text), then the notes found.
  public func notesWithConflicts() throws -> [Note] {
    try read { transaction in
      var ids: [NoteID] = []
      try transaction.forEach(in: schema.noteTexts) { key, value in
        let (shown, _, texts) = try NoteRecord.decodeText(value)
        guard texts.hasConflicts(showing: shown) else { return }
        ids.append(NoteID(try Identifier.ending(key, length: 16, in: "noteTexts")))
      }
      return try ids.compactMap { id in
        guard let record = try noteRecord(id, in: transaction), record.isCreated else {
          return nil
        }
        return try makeNote(id, record, in: transaction)
      }
    }
  }

  /// An attachment's metadata, or nil if there is none, it was deleted, or its note was.
  public func attachment(_ id: AttachmentID) throws -> Attachment? {
    try read { transaction in try liveAttachment(id, in: transaction) }
  }

  /// The stamp of the event that added an attachment — the id under which a log holds its
  /// addition — or nil if there is none, it was deleted, or its note was.
  public func attachmentAddition(_ id: AttachmentID) throws -> Stamp? {
    try read { transaction in
      guard let record = try schema.attachmentRecord(id, in: transaction), !record.isErased,
        try !schema.hasTombstone(record.attachment.noteID.identifier, in: transaction)
      else { return nil }
      return record.stamp
    }
  }

  /// An attachment whose record exists and whose note is not deleted.
  func liveAttachment(_ id: AttachmentID, in transaction: borrowing some Transaction & ~Copyable)
    throws -> Attachment?
  {
    guard let record = try schema.attachmentRecord(id, in: transaction), !record.isErased,
      try !schema.hasTombstone(record.attachment.noteID.identifier, in: transaction)
    else { return nil }
    return record.attachment
  }

  /// Notes whose text contains `text`, ignoring case and diacritics, newest sort date first.
  ///
  /// When more than `limit` notes match, those of the timeline come before those of the
  /// archive, newest first. A needle of three or more ASCII characters is looked up in the
  /// trigram index (``updateSearchIndex()``), which the first search after changes brings up
  /// to date; a shorter or non-ASCII needle reads every note's text, as does a search of a
  /// store opened read-only whose index lags.
  ///
  /// - Parameters:
  ///   - text: What to look for.
  ///   - limit: The most notes to return.
  public func search(_ text: String, limit: Int = 50) throws -> [NoteSummary] {
    let needle = text.trimmingCharacters(in: .whitespacesAndNewlines)
    guard !needle.isEmpty, limit > 0 else { return [] }
    let matcher = TextMatcher(needle)
    guard let trigrams = SearchTrigrams.of(needle: needle) else {
      return try scan(for: matcher, limit: limit)
    }
    // A store opened read-only cannot bring a lagging index up to date: it reads every text.
    if environment.configuration.isReadOnly {
      let index = SearchIndex(schema: schema)
      if try read({ try index.isBehind(in: $0) }) { return try scan(for: matcher, limit: limit) }
    } else {
      try updateSearchIndex()
    }
    return try read { transaction in
      // The candidates in timeline order (the timeline, then the archive, newest first),
      // each checked as the scan checks it.
      var candidates: [(key: [UInt8], id: NoteID, record: NoteRecord)] = []
      for id in try SearchIndex(schema: schema).candidates(trigrams, in: transaction) {
        guard let record = try noteRecord(id, in: transaction), record.isCreated else { continue }
        let key = Keys.timeline(
          archived: record.archived, sortDate: record.effectiveSortDate, note: id)
        candidates.append((key, id, record))
      }
      candidates.sort { $0.key.lexicographicallyPrecedes($1.key) }
      let cache = TagNameCache()
      var found: [NoteSummary] = []
      for candidate in candidates where found.count < limit {
        guard matcher.matches(try self.text(of: candidate.record, in: transaction)) else {
          continue
        }
        found.append(try summary(candidate.id, candidate.record, in: transaction, cache: cache))
      }
      return found.sorted(by: Self.newestFirst)
    }
  }

  /// Brings the text search index up to date with the log, if changes were made since it
  /// last was; ``search(_:limit:)`` does this itself. An app can call it when idle, so that
  /// the next search finds the index current.
  ///
  /// - Returns: The number of notes reindexed.
  @discardableResult
  public func updateSearchIndex() throws -> Int {
    let index = SearchIndex(schema: schema)
    guard try read({ try index.isBehind(in: $0) }) else { return 0 }
    return try VLogError.wrapping {
      try environment.write { transaction in try index.update(in: transaction) }
    }
  }

  /// Search by reading every visible note's text, in timeline order.
  func scan(for matcher: TextMatcher, limit: Int) throws -> [NoteSummary] {
    try read { transaction in
      let cache = TagNameCache()
      var found: [NoteSummary] = []
      for archived in [false, true] {
        try transaction.withEntries(
          in: schema.timeline, range: .from([archived ? 1 : 0], to: [archived ? 2 : 1])
        ) { entries throws in
          while found.count < limit,
            let id = try entries.next({ key, _ in try Keys.timelineNote(key) })
          {
            guard let record = try noteRecord(id, in: transaction),
              matcher.matches(try self.text(of: record, in: transaction))
            else { continue }
            found.append(try summary(id, record, in: transaction, cache: cache))
          }
        }
      }
      return found.sorted(by: Self.newestFirst)
    }
  }

  /// The number of visible notes: the timeline and the archive.
  public func noteCount() throws -> Int {
    try read { try $0.count(in: schema.timeline) }
  }

  /// Every tombstone: the notes and attachments deleted for good.
  public func deletedObjects() throws -> [DeletedObject] {
    try read { transaction in
      var objects: [DeletedObject] = []
      try transaction.forEach(in: schema.tombstones) { key, value in
        let record = try TombstoneRecord(decoding: value)
        objects.append(
          DeletedObject(
            id: try Identifier.ending(key, in: "tombstones"), kind: record.kind,
            stamp: record.stamp))
      }
      return objects
    }
  }

  // MARK: - Building values

  private static func newestFirst(_ a: NoteSummary, _ b: NoteSummary) -> Bool {
    (a.sortDate, a.id) > (b.sortDate, b.id)
  }

  func noteRecord(_ id: NoteID, in transaction: borrowing some Transaction & ~Copyable) throws
    -> NoteRecord?
  {
    try schema.noteRecord(id, in: transaction)
  }

  /// A note's text, read from the log where its record says it is.
  func text(of record: NoteRecord, in transaction: borrowing some Transaction & ~Copyable)
    throws -> String
  {
    guard record.textSequence != 0 else { return "" }
    return try eventLog.text(at: record.textSequence, stamp: record.textStamp, in: transaction)
  }

  private func tagNames(
    _ record: NoteRecord, in transaction: borrowing some Transaction & ~Copyable,
    cache: TagNameCache? = nil
  ) throws -> [Tag] {
    try record.tagIDs.map { id in
      if let name = cache?.names[id] { return Tag(id: id, name: name) }
      let name = try transaction.withValue(forKey: Array(id.rawValue.utf8), in: schema.tags) {
        bytes throws -> String? in try bytes.map { try TagRecord(decoding: $0).name }
      }
      cache?.names[id] = name ?? id.rawValue
      return Tag(id: id, name: name ?? id.rawValue)
    }
  }

  private func liveAttachments(
    _ id: NoteID, _ record: NoteRecord, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> [Attachment] {
    try schema.attachmentIDs(of: id, record, merge: merge, in: transaction).compactMap {
      try liveAttachment($0, in: transaction)
    }
  }

  func makeNote(
    _ id: NoteID, _ record: NoteRecord, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> Note {
    Note(
      id: id, creationDate: Date(milliseconds: record.creationDate),
      text: try text(of: record, in: transaction),
      isArchived: record.archived, sortDate: Date(milliseconds: record.effectiveSortDate),
      tags: try tagNames(record, in: transaction),
      attachments: try liveAttachments(id, record, in: transaction),
      stamps: FieldStamps(
        text: record.textStamp, archived: record.archivedStamp, sortDate: record.sortDateStamp,
        tags: record.tagsStamp, attachments: record.attachmentsStamp),
      conflicts: try record.texts.conflicts(showing: record.textStamp).map { version in
        TextConflict(
          stamp: version.stamp,
          text: try eventLog.text(at: version.sequence, stamp: version.stamp, in: transaction))
      },
      isPending: try PendingNotes.isPending(id, schema: schema, in: transaction))
  }

  private func summary(
    _ id: NoteID, in transaction: borrowing some Transaction & ~Copyable,
    cache: TagNameCache? = nil
  ) throws -> NoteSummary {
    guard let record = try noteRecord(id, in: transaction) else {
      throw VLogError(.corruptStore, "an index names note \(id), which has no record")
    }
    return try summary(id, record, in: transaction, cache: cache)
  }

  private func summary(
    _ id: NoteID, _ record: NoteRecord, in transaction: borrowing some Transaction & ~Copyable,
    cache: TagNameCache? = nil
  ) throws -> NoteSummary {
    var thumbnail: AttachmentID?
    for attachmentID in try schema.attachmentIDs(of: id, record, merge: merge, in: transaction) {
      // An attachment of this note, which is visible, needs no check of its note.
      guard let stored = try schema.attachmentRecord(attachmentID, in: transaction),
        !stored.isErased
      else { continue }
      let attachment =
        stored.attachment.noteID == id
        ? stored.attachment : try liveAttachment(attachmentID, in: transaction)
      if let attachment, attachment.isImage {
        thumbnail = attachmentID
        break
      }
    }
    return NoteSummary(
      id: id,
      truncatedText: record.textSequence == 0
        ? ""
        : try eventLog.truncatedText(
          at: record.textSequence, stamp: record.textStamp, in: transaction),
      isArchived: record.archived,
      sortDate: Date(milliseconds: record.effectiveSortDate),
      tagNames: try tagNames(record, in: transaction, cache: cache).map(\.name),
      thumbnailAttachmentID: thumbnail,
      conflictCount: record.texts.conflicts(showing: record.textStamp).count,
      isPending: try PendingNotes.isPending(id, schema: schema, in: transaction))
  }
}

/// Tags' display names read during one query: a page of summaries reads each tag once.
final class TagNameCache {
  var names: [TagID: String] = [:]
}

extension TagID {
  init(rawValue: String) {
    self.init(name: rawValue)
  }
}

/// Finds text ignoring case and diacritics: Foundation's comparison, with a fast path for the
/// common case of an ASCII needle in an ASCII text, where ignoring case and diacritics is
/// comparing bytes with ASCII letters folded to lowercase.
struct TextMatcher {
  let needle: String
  /// The needle's bytes folded to lowercase, if it is ASCII.
  private let ascii: [UInt8]?

  init(_ needle: String) {
    self.needle = needle
    ascii = needle.utf8.allSatisfy { $0 < 0x80 } ? needle.utf8.map(Self.fold) : nil
  }

  @inline(__always)
  private static func fold(_ byte: UInt8) -> UInt8 {
    byte &- 0x41 < 26 ? byte | 0x20 : byte
  }

  func matches(_ text: String) -> Bool {
    if let ascii,
      let found = text.utf8.withContiguousStorageIfAvailable({ Self.find(ascii, in: $0) }),
      let found
    {
      return found
    }
    return text.range(of: needle, options: [.caseInsensitive, .diacriticInsensitive]) != nil
  }

  /// Whether `text` contains `needle`, or nil if `text` is not ASCII.
  private static func find(_ needle: [UInt8], in text: UnsafeBufferPointer<UInt8>) -> Bool? {
    var nonASCII: UInt8 = 0
    for byte in text { nonASCII |= byte }
    guard nonASCII < 0x80 else { return nil }
    guard let first = needle.first else { return true }
    guard needle.count <= text.count else { return false }
    var index = 0
    let last = text.count - needle.count
    while index <= last {
      if fold(text[index]) == first {
        var offset = 1
        while offset < needle.count, fold(text[index + offset]) == needle[offset] { offset += 1 }
        if offset == needle.count { return true }
      }
      index += 1
    }
    return false
  }
}
