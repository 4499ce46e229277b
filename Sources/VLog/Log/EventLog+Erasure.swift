internal import Crypto
package import LMDB

/// Erasure: deleted means gone.
///
/// The log indexes, for every note and attachment, the events that change it (`objects`), and
/// marks each deleted object with the sequence number of its first deletion. When a deletion
/// is appended, every other event of the object is redacted in place — it keeps its sequence
/// number, id, kind and ids, and loses its values — and an event of a deleted object appended
/// later is stored redacted. The event-set digest is over ids, so erasure never changes it.
///
/// An `attachmentAdded` event changes two objects: its note and its attachment. Until it is
/// redacted it also references its blob (`blobReferences`); when the last reference to a blob
/// goes, the appender reports the blob as released (``Appender/releasedBlobs``), for the owner
/// of the blobs to remove when it sees fit.
///
/// The object index is keyed by the bucket of the sequence number first (4,096 events to a
/// bucket), then the object, then the sequence number: a transaction's appends touch the few
/// pages of the newest bucket instead of one page per object, and finding an object's events
/// (rare: a deletion, a note's history) reads one short range per bucket.
///
/// | key | value |
/// |---|---|
/// | prefix + bucket (8) + object id (16) + sequence (8) | empty |
/// | prefix + 0xFF… (8) + object id (16) + 0 (8) | the first deletion's sequence; for a tag, its latest deletion's stamp |
extension EventLog {
  /// Sequence numbers to a bucket of the object index, as a shift.
  static let objectBucketBits: UInt64 = 12

  /// The key of an object's event at `sequence`; sequence 0 is the object's deletion marker.
  func objectKey(_ object: Identifier, sequence: UInt64) -> [UInt8] {
    var key = prefix
    key.reserveCapacity(prefix.count + 32)
    appendObjectKey(object, sequence: sequence, to: &key)
    return key
  }

  /// Appends the key of an object's event after the prefix in `key`.
  func appendObjectKey(_ object: Identifier, sequence: UInt64, to key: inout [UInt8]) {
    BigEndian.append(sequence == 0 ? UInt64.max : sequence >> Self.objectBucketBits, to: &key)
    object.append(to: &key)
    BigEndian.append(sequence, to: &key)
  }

  func blobKey(_ hash: BlobHash, sequence: UInt64) -> [UInt8] {
    var key = prefix + hash.bytes
    BigEndian.append(sequence, to: &key)
    return key
  }

  /// The sequence number of the object's first deletion, if the log holds one.
  package func deletion(
    of object: Identifier, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> UInt64? {
    try transaction.withValue(forKey: objectKey(object, sequence: 0), in: objects) {
      value throws -> UInt64? in
      try value.map { value throws(VLogError) in try Self.sequence(fromIndexValue: value) }
    }
  }

  /// The sequence numbers of the events that change an object, in log order.
  ///
  /// Visits only the buckets the index holds (seeking from one to the next), so the time is
  /// bounded by the index's contents whatever the log's state says.
  package func sequences(
    of object: Identifier, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> [UInt64] {
    let prefix = self.prefix
    var sequences: [UInt64] = []
    var seekKey = prefix
    var bucket: UInt64 = 0
    try transaction.withCursor(on: objects) { cursor in
      // Bucket UInt64.max holds the deletion markers.
      while bucket < UInt64.max {
        seekKey.removeSubrange(prefix.count...)
        BigEndian.append(bucket, to: &seekKey)
        object.append(to: &seekKey)
        guard try cursor.seek(to: seekKey) else { return }
        var next: UInt64?
        repeat {
          let (found, sequence): (UInt64?, UInt64?) = try cursor.withCurrent { key, _ in
            guard key.count >= prefix.count + 8,
              key.prefix(prefix.count).elementsEqual(prefix),
              let found = BigEndian.read(UInt64.self, from: key, at: prefix.count)
            else { return (nil, nil) }  // past this log's keys
            guard found == bucket, key.count >= prefix.count + 24,
              key[(prefix.count + 8)..<(prefix.count + 24)].elementsEqual(
                seekKey[(prefix.count + 8)...])
            else { return (found, nil) }
            guard key.count == prefix.count + 32,
              let sequence = BigEndian.read(UInt64.self, from: key, at: prefix.count + 24)
            else {
              throw VLogError(.corruptStore, "an object index key is \(key.count) bytes")
            }
            return (found, sequence)
          }
          guard let found else { return }
          guard let sequence else {
            // Another object or a later bucket: go on from the bucket after this one, or
            // from the bucket the cursor reached.
            next = found > bucket ? found : bucket + 1
            break
          }
          sequences.append(sequence)
          next = bucket + 1
        } while try cursor.next()
        guard let next, next > bucket else { return }
        bucket = next
      }
    }
    return sequences
  }

  /// Rewrites the object index in this layout from the log and the deletion markers of an
  /// index keyed by object first (format 3): the events are indexed again, the markers kept.
  package func rebuildObjectIndex(in transaction: borrowing WriteTransaction) throws {
    var markers: [(object: Identifier, value: [UInt8])] = []
    var keys: [[UInt8]] = []
    try transaction.forEach(in: objects, range: ownKeys) { key, value in
      keys.append(Array(key))
      if key.count == prefix.count + 24,
        BigEndian.read(UInt64.self, from: key, at: prefix.count + 16) == 0
      {
        markers.append(
          (Identifier(bytes: UnsafeRawBufferPointer(rebasing: key[prefix.count...])), Array(value)))
      }
    }
    for key in keys { _ = try transaction.delete(forKey: key, in: objects) }
    for (object, value) in markers {
      try transaction.put(value, forKey: objectKey(object, sequence: 0), in: objects)
    }
    var batch: [(Identifier, UInt64)] = []
    var after: UInt64 = 0
    repeat {
      batch.removeAll(keepingCapacity: true)
      try forEach(after: after, in: transaction) { logged in
        for object in logged.event.change.objectIDs + logged.event.change.tagObjectIDs {
          batch.append((object, logged.sequence))
        }
        after = logged.sequence
        return batch.count < 10_000
      }
      for (object, sequence) in batch {
        try transaction.put(
          [UInt8](), forKey: objectKey(object, sequence: sequence), in: objects)
      }
    } while !batch.isEmpty
  }

  /// The id under which the object index files a tag's events: the first 16 bytes of the
  /// SHA-256 of `tag`, a zero byte and the tag's id.
  package static func tagObject(_ tag: TagID) -> Identifier {
    let digest = Array(SHA256.hash(data: Array("tag".utf8) + [0] + Array(tag.rawValue.utf8)))
    return digest.withUnsafeBytes { Identifier(bytes: UnsafeRawBufferPointer(rebasing: $0[..<16])) }
  }

  /// The stamp of a tag's latest deletion, if the log holds one.
  package func tagDeletion(
    of tag: TagID, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> Stamp? {
    try transaction.withValue(
      forKey: objectKey(Self.tagObject(tag), sequence: 0), in: objects
    ) { value throws -> Stamp? in
      guard let value else { return nil }
      guard value.count == Stamp.byteCount else {
        throw VLogError(.corruptStore, "a tag deletion record is \(value.count) bytes")
      }
      return Stamp(bytes: value)
    }
  }

  /// Whether an event not redacted adds an attachment with these bytes.
  package func references(
    _ hash: BlobHash, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> Bool {
    try transaction.withEntries(in: blobReferences, range: .prefix(prefix + hash.bytes)) {
      entries throws -> Bool in
      try entries.next { _, _ in true } ?? false
    }
  }

  /// Builds the object and blob indexes of a log that has none (a store or server of an
  /// earlier format), then erases what its deletions say: one pass over the log, then one
  /// redaction pass per deleted object.
  ///
  /// - Returns: The number of events redacted.
  package func buildErasureIndexes(in transaction: borrowing WriteTransaction) throws -> Int {
    var deleted: [(object: Identifier, isNote: Bool)] = []
    var deletedTags: [(TagID, Stamp)] = []
    var batch: [LoggedEvent] = []
    var appender = try appender(in: transaction)
    func index(_ batch: [LoggedEvent]) throws {
      for logged in batch {
        try appender.trackReplacement(of: logged.event, at: logged.sequence, in: transaction)
        for object in logged.event.change.objectIDs + logged.event.change.tagObjectIDs {
          try transaction.put(
            [UInt8](), forKey: objectKey(object, sequence: logged.sequence), in: objects)
        }
        if case .tagDeleted(let name) = logged.event.change {
          deletedTags.append((TagID(name: name), logged.event.stamp))
        }
        if let hash = logged.event.referencedBlob {
          try transaction.put(
            [UInt8](), forKey: blobKey(hash, sequence: logged.sequence), in: blobReferences)
        }
        if let object = logged.event.change.deletedObject,
          try deletion(of: object, in: transaction) == nil
        {
          try transaction.put(
            BigEndian.bytes(logged.sequence), forKey: objectKey(object, sequence: 0), in: objects)
          deleted.append((object, logged.event.change.kind == .noteDeleted))
        }
      }
    }
    // In batches: a write inside a read of the same database is not allowed.
    var after: UInt64 = 0
    repeat {
      batch.removeAll(keepingCapacity: true)
      try forEach(after: after, in: transaction) { logged in
        batch.append(logged)
        return batch.count < 10_000
      }
      try index(batch)
      after = batch.last?.sequence ?? after
    } while batch.count == 10_000
    var redacted = 0
    for (object, isNote) in deleted {
      redacted += try appender.erase(object, isNote: isNote, in: transaction)
    }
    for (tag, stamp) in deletedTags {
      try appender.eraseTag(tag, deletedAt: stamp, in: transaction)
    }
    redacted = max(redacted, appender.redactedCount)
    try appender.commit(in: transaction)
    return redacted
  }
}

extension EventLog.Appender {
  /// The form in which `event` is stored: redacted if it changes an object the log holds a
  /// deletion of, or renames a tag deleted after it.
  mutating func erasing(_ event: Event, in transaction: borrowing WriteTransaction) throws
    -> Event
  {
    guard !event.isRedacted, event.change.deletedObject == nil else { return event }
    if case .tagRenamed(let name) = event.change,
      let deleted = try log.tagDeletion(of: TagID(name: name), in: transaction),
      event.stamp < deleted
    {
      return event.redacted(.deleted)
    }
    let (first, second) = event.change.objects
    if let first, try isDeleted(first, in: transaction) { return event.redacted(.deleted) }
    if let second, try isDeleted(second, in: transaction) { return event.redacted(.deleted) }
    return event
  }

  /// Whether the log holds a deletion of the object, remembered for the transaction.
  mutating func isDeleted(_ object: Identifier, in transaction: borrowing WriteTransaction)
    throws -> Bool
  {
    if let known = deletionCache[object] { return known }
    let deleted = try log.deletion(of: object, in: transaction) != nil
    deletionCache[object] = deleted
    return deleted
  }

  /// Indexes a stored event under its objects and blob; for a first deletion, marks the object
  /// and redacts its other events.
  mutating func indexObjects(
    of event: Event, at sequence: UInt64, in transaction: borrowing WriteTransaction
  ) throws {
    let log = self.log
    let (first, second) = event.change.objects
    if let first { pendingObjects.append((first, sequence)) }
    if let second { pendingObjects.append((second, sequence)) }
    switch event.change {
    case .tagsSet, .tagRenamed:
      for object in event.change.tagObjectIDs { pendingObjects.append((object, sequence)) }
    default: break
    }
    if let hash = event.referencedBlob {
      try transaction.put(
        [UInt8](), forKey: log.blobKey(hash, sequence: sequence), in: log.blobReferences)
    }
    if case .tagDeleted(let name) = event.change {
      try eraseTag(TagID(name: name), deletedAt: event.stamp, in: transaction)
    }
    if let object = event.change.deletedObject, try !isDeleted(object, in: transaction) {
      try transaction.put(
        BigEndian.bytes(sequence), forKey: log.objectKey(object, sequence: 0), in: log.objects)
      deletionCache[object] = true
      try erase(object, isNote: event.change.kind == .noteDeleted, in: transaction)
    }
  }

  /// Records a tag's deletion (the latest one counts) and erases what it says: the tag's
  /// renames made before it, and the tags changes that named the tag and that a newer tags
  /// change of their note has replaced. A tags change still in force keeps the tag: its note
  /// has it (a device that tagged the note without knowing of the deletion).
  mutating func eraseTag(
    _ tag: TagID, deletedAt stamp: Stamp, in transaction: borrowing WriteTransaction
  ) throws {
    let object = EventLog.tagObject(tag)
    if let latest = try log.tagDeletion(of: tag, in: transaction), latest >= stamp { return }
    try flushPending(in: transaction)
    try transaction.put(stamp.bytes, forKey: log.objectKey(object, sequence: 0), in: log.objects)
    for sequence in try log.sequences(of: object, in: transaction) {
      guard let logged = try log.event(at: sequence, in: transaction),
        !logged.event.isRedacted, logged.event.stamp < stamp
      else { continue }
      switch logged.event.change {
      case .tagRenamed:
        try redact(at: sequence, reason: .deleted, in: transaction)
      case .tagsSet(let note, _):
        // Whether a newer tags change replaced it is known once the transaction's changes
        // are all applied: at ``commit(in:)``.
        pendingTagsChecks.append((sequence, note, logged.event.stamp))
      default: break
      }
    }
  }

  /// Redacts the tags changes naming a deleted tag that a newer tags change of their note
  /// replaced (see ``eraseTag(_:deletedAt:in:)``).
  mutating func redactReplacedTagsChanges(in transaction: borrowing WriteTransaction) throws {
    guard !pendingTagsChecks.isEmpty else { return }
    let checks = pendingTagsChecks
    pendingTagsChecks.removeAll()
    for (sequence, note, stamp) in checks {
      if let newest = try log.newestChange(to: note, field: 4, in: transaction),
        newest.stamp > stamp
      {
        try redact(at: sequence, reason: .deleted, in: transaction)
      }
    }
  }

  /// Redacts every event of a deleted object but its deletions; a note's fields are
  /// forgotten too.
  ///
  /// - Returns: The number of events redacted.
  @discardableResult
  mutating func erase(
    _ object: Identifier, isNote: Bool, in transaction: borrowing WriteTransaction
  ) throws -> Int {
    try flushPending(in: transaction)
    if isNote { try forgetFields(of: NoteID(object), in: transaction) }
    var redacted = 0
    for sequence in try log.sequences(of: object, in: transaction) {
      if try redact(at: sequence, reason: .deleted, in: transaction) { redacted += 1 }
    }
    return redacted
  }

  /// Replaces the event at `sequence` with its redacted form, keeping its id: the index and the
  /// event-set digest do not change. An event already redacted, or of a kind that is never
  /// redacted (deletions, unknown kinds), is left as it is.
  ///
  /// - Returns: Whether the event was redacted now.
  @discardableResult
  package mutating func redact(
    at sequence: UInt64, reason: Event.Redaction, in transaction: borrowing WriteTransaction
  ) throws -> Bool {
    guard let logged = try log.event(at: sequence, in: transaction) else {
      throw VLogError(.corruptStore, "the object index names event \(sequence), which is missing")
    }
    let event = logged.event
    let redacted = event.redacted(reason)
    guard redacted.isRedacted, !event.isRedacted else { return false }
    let bytes = redacted.encoded()
    let log = self.log
    try log.withKey(sequence: sequence) { key in
      try transaction.put(
        forKey: key, reservingCount: LogRecord.headerSize + bytes.count, in: log.entries
      ) { buffer in
        LogRecord.write(bytes, into: buffer)
      }
    }
    if let hash = event.referencedBlob {
      _ = try transaction.delete(
        forKey: log.blobKey(hash, sequence: sequence), in: log.blobReferences)
      if try !log.references(hash, in: transaction) { releasedBlobs.insert(hash) }
    }
    redactedCount += 1
    return true
  }
}

extension Change {
  /// The notes and attachments the change is about, as the object index files it: the note
  /// of a note's change, the note and the attachment of an `attachmentAdded`, the attachment
  /// of an `attachmentDeleted`.
  /// ``objectIDs`` without an array: the first and the second, if any.
  package var objects: (Identifier?, Identifier?) {
    switch self {
    case .noteCreated(let id, _), .textSet(let id, _), .archivedSet(let id, _),
      .sortDateSet(let id, _), .tagsSet(let id, _), .attachmentsSet(let id, _),
      .noteDeleted(let id):
      (id.identifier, nil)
    case .attachmentAdded(let attachment):
      (attachment.noteID.identifier, attachment.id.identifier)
    case .attachmentDeleted(let id): (id.identifier, nil)
    case .tagRenamed, .tagDeleted, .unknown: (nil, nil)
    }
  }

  package var objectIDs: [Identifier] {
    let (first, second) = objects
    return [first, second].compactMap { $0 }
  }

  /// The tags a change names, as the object index files them (see ``EventLog/tagObject(_:)``):
  /// the tags of a tags change, the tag of a rename.
  package var tagObjectIDs: [Identifier] {
    switch self {
    case .tagsSet(_, let tags):
      var seen = Set<TagID>()
      return tags.map { TagID(name: TagName.clean($0)) }.filter { seen.insert($0).inserted }
        .map(EventLog.tagObject)
    case .tagRenamed(let name): return [EventLog.tagObject(TagID(name: TagName.clean(name)))]
    default: return []
    }
  }

  /// The object a deletion deletes.
  package var deletedObject: Identifier? {
    switch self {
    case .noteDeleted(let id): id.identifier
    case .attachmentDeleted(let id): id.identifier
    default: nil
    }
  }
}

extension Event {
  /// The blob an `attachmentAdded` event names, unless it is redacted.
  package var referencedBlob: BlobHash? {
    guard !isRedacted, case .attachmentAdded(let attachment) = change else { return nil }
    return attachment.blobHash
  }
}
