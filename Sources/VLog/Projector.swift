internal import LMDB

/// Applies events to the projections inside a write transaction: loads the records an event
/// touches, merges it into a note's state with ``NoteMerge`` (where a note's rules are stated),
/// and keeps what no note holds itself:
///
/// - a tombstone keeps the earliest stamp that deleted its object, and a deleted object's
///   state is removed; later changes to it are ignored, earlier ones are erased with it;
/// - a redacted event has no effect, but for an `attachmentAdded`, which still claims its
///   attachment id for its note (the attachment of a deleted note keeps an erased record), and
///   a `textSet`, whose base still replaces what it named;
/// - a tag deletion voids every change of the tag older than it: lists lose the tag, additions
///   and removals are dropped, renames forgotten — whether they arrive before it or after;
/// - a tag's display name is the newer of its newest rename and its spelling in the visible
///   note that put it on last (by the stamp of the list or addition) among those that use it;
/// - an attachment keeps the metadata of its earliest `attachmentAdded`, and is visible while
///   its note exists and it has no tombstone; once its note is deleted, the record is erased;
/// - indexes, tag counts and tag spellings are derived from the notes' final state at
///   ``flush(in:)``.
///
/// Notes and tags are changed in an in-memory overlay and written once per flush, so a batch of
/// many changes to one note costs one write, and indexes are updated from the difference
/// between a note's state before and after the batch.
struct Projector {
  let schema: Schema
  /// The merge rules.
  let merge: NoteMerge
  private var notes: [NoteID: NoteEntry] = [:]
  private var tags: [TagID: TagEntry] = [:]
  /// Notes whose attachments were added or removed.
  private var touched: Set<NoteID> = []
  /// Tags whose spelling must be found again from their notes at the end of the flush.
  private var respell: Set<TagID> = []
  /// Tag keys, and each key's latest deletion (nil: none), as found so far: kept for the
  /// projector's life, since a rebuild meets the same tags again and again.
  private let tagKeys = TagKeys()
  private var tagDeletions: [TagKey: Stamp?] = [:]
  /// Tags deleted since the last flush, with their latest deletion: what notes and renames
  /// lose at the flush.
  private var pendingTagErasures: [TagKey: Stamp] = [:]
  /// Whether replaced field changes are collected in ``replaced``, for the log's retention
  /// queue: when applying appended events, and when building a migrated store's queue.
  var tracksReplacements = false
  /// Changes replaced since the last ``takeReplaced()``: the time of the change that replaced
  /// each, and its sequence number.
  private(set) var replaced: [ReplacedChange] = []
  /// Events of kinds this version does not know, skipped.
  private(set) var unknownEvents = 0
  /// What the flushes so far changed.
  private(set) var changes = ChangeSet.Builder()

  /// Counts `notes` as updated in what the commit reports: their sync state changed.
  mutating func markUpdated(_ notes: Set<NoteID>) { changes.updated.formUnion(notes) }

  /// The changes collected so far, which the projector then forgets: what bringing lagging
  /// projections up to date changed, told apart from what the transaction's own changes do.
  mutating func takeChanges() -> ChangeSet.Builder {
    defer { changes = ChangeSet.Builder() }
    return changes
  }

  /// A note in the overlay. A class, so that updates change it in place.
  private final class NoteEntry {
    /// The record as the store had it before this flush.
    let original: NoteRecord?
    /// The record as it is now; nil once deleted (or if there never was one).
    var current: NoteRecord?
    var isDeleted: Bool
    /// Whether `current` differs from `original`.
    var isDirty = false

    init(original: NoteRecord?, isDeleted: Bool) {
      self.original = original
      self.current = original
      self.isDeleted = isDeleted
    }
  }

  private struct TagEntry {
    var original: TagRecord?
    var current: TagRecord
  }

  init(schema: Schema, merge: NoteMerge = NoteMerge()) {
    self.schema = schema
    self.merge = merge
    notes.reserveCapacity(1024)
  }

  /// The replaced changes collected so far, emptying the list.
  mutating func takeReplaced() -> [ReplacedChange] {
    defer { replaced.removeAll(keepingCapacity: true) }
    return replaced
  }

  /// The number of notes and tags held in the overlay.
  var overlayCount: Int { notes.count + tags.count }

  /// The overlay size at which a long replay writes it out: memory stays bounded by this, not
  /// by the length of the log.
  static let replayOverlayLimit = 50_000

  // MARK: - Applying events

  /// Applies an event as the log stores it at `sequence` (where a note's text is read from).
  mutating func apply(
    _ event: Event, at sequence: UInt64, in transaction: borrowing WriteTransaction
  ) throws {
    let stamp = event.stamp
    if event.isRedacted {
      switch event.change {
      case .attachmentAdded(let attachment):
        try addAttachment(attachment, stamp: stamp, in: transaction)
      case .textSet(let id, _, _):
        // Its text is gone, but what it replaced stays replaced.
        try mergeNote(id, event, at: sequence, in: transaction)
      case .unknown: unknownEvents += 1
      default: break
      }
      return
    }
    switch event.change {
    case .noteCreated(let id, _), .textSet(let id, _, _), .archivedSet(let id, _),
      .sortDateSet(let id, _), .tagsSet(let id, _), .tagAdded(let id, _),
      .attachmentsSet(let id, _):
      try mergeNote(id, event, at: sequence, in: transaction)
    case .tagRemoved(let id, let key):
      // The log keeps a removal older than its tag's deletion as it came (it names no tag):
      // it is void.
      if let deletion = try tagDeletion(key, in: transaction), stamp < deletion { break }
      try mergeNote(id, event, at: sequence, in: transaction)
    case .noteDeleted(let id):
      try deleteNote(id, stamp: stamp, in: transaction)
    case .attachmentAdded(let attachment):
      try addAttachment(attachment, stamp: stamp, in: transaction)
    case .attachmentDeleted(let id):
      try deleteAttachment(id, stamp: stamp, in: transaction)
    case .tagRenamed(let name):
      try renameTag(name, stamp: stamp, in: transaction)
    case .tagDeleted, .tagErased:
      guard let key = event.change.deletedTag else { break }
      try eraseTag(key, deletedAt: stamp, in: transaction)
    case .unknown:
      unknownEvents += 1
    }
  }

  // MARK: Notes

  /// The note's current record from the overlay or the store; nil if it has none or is deleted.
  mutating func note(_ id: NoteID, in transaction: borrowing some Transaction & ~Copyable) throws
    -> NoteRecord?
  {
    try entry(for: id, in: transaction).current
  }

  /// Whether a note is visible, deleted, or absent (never created, as far as this store knows).
  enum NoteStatus { case visible, deleted, absent }

  mutating func status(of id: NoteID, in transaction: borrowing some Transaction & ~Copyable)
    throws -> NoteStatus
  {
    let entry = try entry(for: id, in: transaction)
    if entry.isDeleted { return .deleted }
    return entry.current?.isCreated == true ? .visible : .absent
  }

  /// Whether the note has a tombstone.
  mutating func isDeleted(_ id: NoteID, in transaction: borrowing some Transaction & ~Copyable)
    throws -> Bool
  {
    try entry(for: id, in: transaction).isDeleted
  }

  private mutating func entry(
    for id: NoteID, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> NoteEntry {
    if let entry = notes[id] { return entry }
    let entry =
      try schema.hasTombstone(id.identifier, in: transaction)
      ? NoteEntry(original: nil, isDeleted: true)
      : NoteEntry(original: try schema.noteRecord(id, in: transaction), isDeleted: false)
    notes[id] = entry
    return entry
  }

  /// Merges an event into its note's record (``NoteMerge``), unless the note is deleted; the
  /// changes it replaced enter ``replaced`` while the projector tracks replacements.
  private mutating func mergeNote(
    _ id: NoteID, _ event: Event, at sequence: UInt64, in transaction: borrowing WriteTransaction
  ) throws {
    let entry = try entry(for: id, in: transaction)
    guard !entry.isDeleted else { return }
    let created = entry.current == nil
    if created { entry.current = NoteRecord() }
    let (merge, log, keys) = (self.merge, schema.eventLog, tagKeys)
    // Moved out and back, so that the merge appends to the buffer the projector keeps.
    var replaced = self.replaced
    self.replaced = []
    defer { self.replaced = replaced }
    let changed = try merge.apply(
      event.change, stamp: event.stamp, sequence: sequence, isRedacted: event.isRedacted,
      to: &entry.current!, replaced: &replaced, tagKey: keys.key,
      // Held: applied to this projection before, that is, earlier in the log (a rebuild
      // replays the log in order, so what comes later is not held yet).
      isHeld: { named in try log.sequence(of: named, in: transaction).map { $0 < sequence } ?? false
      }
    )
    if changed {
      entry.isDirty = true
    } else if created {
      entry.current = nil
    }
    if !tracksReplacements { replaced.removeAll(keepingCapacity: true) }
  }

  private mutating func deleteNote(
    _ id: NoteID, stamp: Stamp, in transaction: borrowing WriteTransaction
  ) throws {
    // Load before writing the tombstone, so the entry remembers the record to remove.
    let entry = try entry(for: id, in: transaction)
    try putTombstone(id.identifier, kind: .note, stamp: stamp, in: transaction)
    if entry.current != nil { entry.isDirty = true }
    entry.current = nil
    entry.isDeleted = true
    // The note's attachment records stay, erased: the stamp and the note keep "the earliest
    // add of an id wins" independent of the order in which the delete and the adds arrive.
    var records: [AttachmentRecord] = []
    try transaction.forEach(
      in: schema.noteAttachments, range: .prefix(id.identifier.bytes)
    ) { key, _ in
      let attachment = AttachmentID(try Identifier.ending(key, length: 32, in: "noteAttachments"))
      if let record = try attachmentRecord(attachment, in: transaction), !record.isErased {
        records.append(record)
      }
    }
    for record in records {
      try transaction.put(
        record.erased.encoded(), forKey: record.attachment.id.identifier.bytes,
        in: schema.attachments)
    }
  }

  private func putTombstone(
    _ id: Identifier, kind: DeletedObject.Kind, stamp: Stamp,
    in transaction: borrowing WriteTransaction
  ) throws {
    let key = id.bytes
    let existing = try transaction.withValue(forKey: key, in: schema.tombstones) {
      bytes throws -> TombstoneRecord? in try bytes.map { try TombstoneRecord(decoding: $0) }
    }
    if let existing, existing.stamp <= stamp { return }
    try transaction.put(
      TombstoneRecord(kind: kind, stamp: stamp).encoded(), forKey: key, in: schema.tombstones)
  }

  // MARK: Attachments

  private mutating func addAttachment(
    _ attachment: Attachment, stamp: Stamp, in transaction: borrowing WriteTransaction
  ) throws {
    let key = attachment.id.identifier.bytes
    guard try !schema.hasTombstone(attachment.id.identifier, in: transaction) else { return }
    // The attachment of a deleted note is recorded erased, whether its add arrives before the
    // note's deletion (and is erased then) or after it (redacted or not).
    let attachment =
      try isDeleted(attachment.noteID, in: transaction)
      ? Attachment(redacted: attachment.id, of: attachment.noteID) : attachment
    let existing = try attachmentRecord(attachment.id, in: transaction)
    if let existing {
      guard stamp < existing.stamp else { return }
      try transaction.delete(
        forKey: Keys.noteAttachment(existing.attachment.noteID, attachment.id),
        in: schema.noteAttachments)
      touched.insert(existing.attachment.noteID)
    }
    try transaction.put(
      AttachmentRecord(stamp: stamp, attachment: attachment).encoded(), forKey: key,
      in: schema.attachments)
    try transaction.put(
      [UInt8](), forKey: Keys.noteAttachment(attachment.noteID, attachment.id),
      in: schema.noteAttachments)
    touched.insert(attachment.noteID)
  }

  private mutating func deleteAttachment(
    _ id: AttachmentID, stamp: Stamp, in transaction: borrowing WriteTransaction
  ) throws {
    try putTombstone(id.identifier, kind: .attachment, stamp: stamp, in: transaction)
    guard let existing = try attachmentRecord(id, in: transaction) else { return }
    try transaction.delete(forKey: id.identifier.bytes, in: schema.attachments)
    try transaction.delete(
      forKey: Keys.noteAttachment(existing.attachment.noteID, id), in: schema.noteAttachments)
    touched.insert(existing.attachment.noteID)
  }

  func attachmentRecord(
    _ id: AttachmentID, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> AttachmentRecord? {
    try schema.attachmentRecord(id, in: transaction)
  }

  // MARK: Tags

  mutating func tag(_ id: TagID, in transaction: borrowing some Transaction & ~Copyable) throws
    -> TagRecord?
  {
    if let entry = tags[id] { return entry.current }
    let record = try transaction.withValue(forKey: Array(id.rawValue.utf8), in: schema.tags) {
      bytes throws -> TagRecord? in try bytes.map { try TagRecord(decoding: $0) }
    }
    if let record { tags[id] = TagEntry(original: record, current: record) }
    return record
  }

  private mutating func updateTag(
    _ id: TagID, in transaction: borrowing WriteTransaction, _ change: (inout TagRecord) -> Void
  ) throws {
    var record = try tag(id, in: transaction) ?? TagRecord()
    change(&record)
    if var entry = tags[id] {
      entry.current = record
      tags[id] = entry
    } else {
      tags[id] = TagEntry(original: nil, current: record)
    }
  }

  private mutating func renameTag(
    _ name: String, stamp: Stamp, in transaction: borrowing WriteTransaction
  ) throws {
    let cleaned = TagName.clean(name)
    guard !cleaned.isEmpty else { return }
    let policy = merge.policy
    try updateTag(TagID(name: cleaned), in: transaction) { record in
      if policy.wins(stamp, over: record.renameStamp) {
        record.renameStamp = stamp
        record.renameName = cleaned
      }
    }
  }

  /// Forgets a tag's rename made before its deletion at `stamp`. A rename made after it stays:
  /// the name then depends only on which renames and deletions exist, never on the order in
  /// which they arrived (a rename older than a deletion the log already holds is stored
  /// redacted and never applied).
  private mutating func forgetRenames(
    _ tag: TagID, deletedAt stamp: Stamp, in transaction: borrowing WriteTransaction
  ) throws {
    guard let record = try self.tag(tag, in: transaction), record.renameStamp != .zero,
      record.renameStamp < stamp
    else { return }
    try updateTag(tag, in: transaction) { record in
      record.renameStamp = .zero
      record.renameName = ""
    }
  }

  /// A tag's latest deletion: the newest the log holds or this projector applied.
  private mutating func tagDeletion(
    _ key: TagKey, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> Stamp? {
    if let known = tagDeletions[key] { return known }
    let found = try schema.eventLog.tagDeletion(ofObject: key.identifier, in: transaction)
    tagDeletions[key] = .some(found)
    return found
  }

  /// Applies a tag's deletion: a removal older than it that comes later is ignored (the log
  /// stores later additions and lists older than it redacted or without the tag), and what the
  /// notes and the tag hold of earlier changes is voided at the flush.
  private mutating func eraseTag(
    _ key: TagKey, deletedAt stamp: Stamp, in transaction: borrowing WriteTransaction
  ) throws {
    let latest = max(try tagDeletion(key, in: transaction) ?? .zero, stamp)
    tagDeletions[key] = .some(latest)
    pendingTagErasures[key] = max(pendingTagErasures[key] ?? .zero, stamp)
  }

  /// Voids the changes of the tags deleted since the last flush that are older than their
  /// deletion: in every note record that names them (visible or not, in the store or the
  /// overlay), and the tags' renames.
  private mutating func applyTagErasures(in transaction: borrowing WriteTransaction) throws {
    guard !pendingTagErasures.isEmpty else { return }
    let erasures = pendingTagErasures
    pendingTagErasures.removeAll()
    var deletions: [TagKey: Stamp] = [:]
    for key in erasures.keys { deletions[key] = try tagDeletion(key, in: transaction) }
    // Renames: the tags the store and the overlay know, by key.
    var tags = Set(self.tags.keys)
    try transaction.forEach(in: schema.tags) { key, _ in
      tags.insert(TagID(name: String(decoding: key, as: UTF8.self)))
    }
    for tag in tags.sorted() {
      if let deletion = deletions[tagKeys.key(tag)] {
        try forgetRenames(tag, deletedAt: deletion, in: transaction)
      }
    }
    // Notes: every record, since one not visible yet is in no index.
    var named: Set<NoteID> = []
    try transaction.forEach(in: schema.notes) { key, value in
      let record = try NoteRecord(decodingStoredPart: value)
      if merge.names(deletions, in: record) {
        named.insert(NoteID(try Identifier.ending(key, length: 16, in: "notes")))
      }
    }
    for (id, entry) in notes where entry.current.map({ merge.names(deletions, in: $0) }) == true {
      named.insert(id)
    }
    for id in named.sorted() {
      let entry = try entry(for: id, in: transaction)
      guard !entry.isDeleted, entry.current != nil else { continue }
      if merge.voidTags(deletions, in: &entry.current!) { entry.isDirty = true }
    }
  }

  // MARK: - Flushing

  /// Writes the overlay's changed notes and tags, updates the indexes and tag counts from the
  /// difference, records what changed, and empties the overlay.
  mutating func flush(in transaction: borrowing WriteTransaction) throws {
    try applyTagErasures(in: transaction)
    // In key order: neighbouring records share pages, which LMDB then touches once.
    for (id, entry) in notes.sorted(by: { $0.key < $1.key }) {
      let before = entry.original
      let after = entry.current
      let wasVisible = before?.isCreated ?? false
      let isVisible = after?.isCreated ?? false
      if entry.isDirty {
        try id.identifier.withKey { key in
          if let after {
            // Each part only if it changed: most changes are text edits.
            if before.map({ !$0.hasSameStoredPart(as: after) }) ?? true {
              try after.encoded().withUnsafeBytes { value in
                try transaction.put(value, forKey: key, in: schema.notes)
              }
            }
            if before.map({ !$0.hasSameTextPart(as: after) }) ?? true {
              try after.encodedText().withUnsafeBytes { value in
                try transaction.put(value, forKey: key, in: schema.noteTexts)
              }
            }
          } else if before != nil {
            try transaction.delete(forKey: key, in: schema.notes)
            try transaction.delete(forKey: key, in: schema.noteTexts)
          }
        }
        try updateIndexes(
          id, from: wasVisible ? before : nil, to: isVisible ? after : nil, in: transaction)
      }
      if !wasVisible && isVisible {
        changes.inserted.insert(id)
      } else if wasVisible && !isVisible {
        changes.deleted.insert(id)
      } else if isVisible && (entry.isDirty || touched.contains(id)) {
        changes.updated.insert(id)
      }
    }
    for id in touched where notes[id] == nil {
      if let record = try note(id, in: transaction), record.isCreated {
        changes.updated.insert(id)
      }
    }
    for tag in respell.sorted(by: { $0.rawValue < $1.rawValue }) {
      try respellTag(tag, in: transaction)
    }
    for (id, entry) in tags where entry.original != entry.current {
      let key = Array(id.rawValue.utf8)
      if entry.current.isEmpty {
        if entry.original != nil { try transaction.delete(forKey: key, in: schema.tags) }
      } else {
        try transaction.put(entry.current.encoded(), forKey: key, in: schema.tags)
      }
      changes.tagsChanged = true
    }
    respell.removeAll(keepingCapacity: true)
    notes.removeAll(keepingCapacity: true)
    tags.removeAll(keepingCapacity: true)
    touched.removeAll(keepingCapacity: true)
  }

  /// Moves a note's timeline and tag index entries from its old visible state to its new one,
  /// and keeps its tags' counts and spellings.
  private mutating func updateIndexes(
    _ id: NoteID, from before: NoteRecord?, to after: NoteRecord?,
    in transaction: borrowing WriteTransaction
  ) throws {
    if let before, let after, before.archived == after.archived,
      before.effectiveSortDate == after.effectiveSortDate, before.tagList == after.tagList,
      before.tagChanges == after.tagChanges, before.tagsStamp == after.tagsStamp
    {
      return
    }
    let oldKey = before.map {
      Keys.timeline(archived: $0.archived, sortDate: $0.effectiveSortDate, note: id)
    }
    let newKey = after.map {
      Keys.timeline(archived: $0.archived, sortDate: $0.effectiveSortDate, note: id)
    }
    if oldKey != newKey {
      if let oldKey { try transaction.delete(forKey: oldKey, in: schema.timeline) }
      if let newKey { try transaction.put([UInt8](), forKey: newKey, in: schema.timeline) }
    }
    let oldTags = Set(before?.tagIDs ?? [])
    let newTags = Set(after?.tagIDs ?? [])
    let oldDate = before?.effectiveSortDate ?? 0
    let newDate = after?.effectiveSortDate ?? 0
    for tag in oldTags where !newTags.contains(tag) || oldDate != newDate {
      try transaction.delete(
        forKey: Keys.tagNote(tag, sortDate: oldDate, id), in: schema.tagNotes)
    }
    for tag in newTags where !oldTags.contains(tag) || oldDate != newDate {
      try transaction.put(
        [UInt8](), forKey: Keys.tagNote(tag, sortDate: newDate, id), in: schema.tagNotes)
    }
    for tag in oldTags.subtracting(newTags) {
      try updateTag(tag, in: transaction) { $0.noteCount -= 1 }
    }
    for tag in newTags.subtracting(oldTags) {
      try updateTag(tag, in: transaction) { $0.noteCount += 1 }
    }
    // Spellings: the note's tags are a candidate for each tag it has; a tag it no longer has
    // (or that lost this note's newer spelling) is spelled again from its notes at the end.
    for tag in oldTags.subtracting(newTags)
    where try self.tag(tag, in: transaction)?.spellingNote == id {
      respell.insert(tag)
    }
    if let after {
      for (tag, spelling, stamp) in after.tagSpellings {
        var lost = false
        try updateTag(tag, in: transaction) { record in
          if record.spellingNote == id || record.spellingStamp < stamp {
            lost = record.spellingNote == id && stamp < record.spellingStamp
            record.spellingStamp = stamp
            record.spelling = spelling
            record.spellingNote = id
          }
        }
        if lost { respell.insert(tag) }
      }
    }
  }

  /// Spells a tag again from the visible notes that use it: the spelling in the note whose
  /// tags changed last.
  private mutating func respellTag(_ tag: TagID, in transaction: borrowing WriteTransaction)
    throws
  {
    var best: (stamp: Stamp, spelling: String, note: NoteID)?
    var noteIDs: [NoteID] = []
    try transaction.forEach(in: schema.tagNotes, range: .prefix(Keys.tagPrefix(tag))) { key, _ in
      noteIDs.append(NoteID(try Identifier.ending(key, length: nil, in: "tagNotes")))
    }
    for noteID in noteIDs {
      guard let record = try schema.noteRecord(noteID, in: transaction),
        let found = record.tagSpellings.first(where: { $0.tag == tag }),
        best.map({ $0.stamp < found.stamp }) ?? true
      else { continue }
      best = (found.stamp, found.spelling, noteID)
    }
    try updateTag(tag, in: transaction) { record in
      record.spellingStamp = best?.stamp ?? .zero
      record.spelling = best?.spelling ?? ""
      record.spellingNote = best?.note ?? TagRecord().spellingNote
    }
  }
}

/// Tag keys computed so far (each a hash of the tag's id): kept for a projector's life, since a
/// rebuild meets the same tags again and again.
private final class TagKeys {
  private var keys: [TagID: TagKey] = [:]

  func key(_ tag: TagID) -> TagKey {
    if let key = keys[tag] { return key }
    let key = TagKey(tag)
    keys[tag] = key
    return key
  }
}
