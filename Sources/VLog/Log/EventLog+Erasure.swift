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
    try indexObjects(in: transaction)
  }

  /// Files every event of the log in the object index again, keeping its deletion markers:
  /// after the rules of which ids an event is filed under changed (format 8 files a tag by
  /// its composed name).
  package func reindexObjects(in transaction: borrowing WriteTransaction) throws {
    var keys: [[UInt8]] = []
    try transaction.forEach(in: objects, range: ownKeys) { key, _ in
      // Bucket UInt64.max holds the deletion markers.
      if BigEndian.read(UInt64.self, from: key, at: prefix.count) != UInt64.max {
        keys.append(Array(key))
      }
    }
    for key in keys { _ = try transaction.delete(forKey: key, in: objects) }
    try indexObjects(in: transaction)
  }

  /// Files every event of the log in the object index, in batches.
  private func indexObjects(in transaction: borrowing WriteTransaction) throws {
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

  /// The id under which the object index files a tag's events: its key (``TagKey``).
  package static func tagObject(_ tag: TagID) -> Identifier { TagKey(tag).identifier }

  /// The stamp of a tag's latest deletion, if the log holds one.
  package func tagDeletion(
    of tag: TagID, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> Stamp? {
    try tagDeletion(ofObject: Self.tagObject(tag), in: transaction)
  }

  /// The stamp of the latest deletion of any tag the log holds: what vouches for a tag's
  /// addition or rename served redacted (`RedactionEvidence`). Reads every deletion marker.
  package func latestTagDeletion(in transaction: borrowing some Transaction & ~Copyable) throws
    -> Stamp?
  {
    var latest: Stamp?
    let markers = prefix + [UInt8](repeating: 0xFF, count: 8)
    try transaction.withEntries(in: objects, range: .prefix(markers)) { entries throws in
      while let stamp = try entries.next({ _, value throws -> Stamp? in
        // A tag's marker holds a stamp; a note's or an attachment's, a sequence number.
        value.count == Stamp.byteCount ? Stamp(bytes: value) : nil
      }) {
        if let stamp, latest.map({ stamp > $0 }) ?? true { latest = stamp }
      }
    }
    return latest
  }

  /// The stamp of the latest deletion of the tag filed as `object`, if the log holds one.
  func tagDeletion(
    ofObject object: Identifier, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> Stamp? {
    try transaction.withValue(forKey: objectKey(object, sequence: 0), in: objects) {
      value throws -> Stamp? in
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
    try references(hash, excluding: [], in: transaction)
  }

  /// Whether an event not redacted, other than those at the excluded sequence numbers, adds an
  /// attachment with these bytes.
  func references(
    _ hash: BlobHash, excluding excluded: Set<UInt64>,
    in transaction: borrowing some Transaction & ~Copyable
  ) throws -> Bool {
    let prefixCount = prefix.count + hash.bytes.count
    return try transaction.withEntries(in: blobReferences, range: .prefix(prefix + hash.bytes)) {
      entries throws -> Bool in
      while let sequence = try entries.next({ key, _ in
        BigEndian.read(UInt64.self, from: key, at: prefixCount) ?? 0
      }) {
        if !excluded.contains(sequence) { return true }
      }
      return false
    }
  }

  /// Builds the object and blob indexes of a log that has none (a store or server of an
  /// earlier format), then erases what its deletions say: one pass over the log, filing each
  /// event as an append would (``LogBatch/index(_:facts:)``), then the batch's erasure.
  ///
  /// - Returns: The number of events redacted.
  package func buildErasureIndexes(in transaction: borrowing WriteTransaction) throws -> Int {
    var appender = try appender(in: transaction)
    var batch: [LoggedEvent] = []
    // In batches: a write inside a read of the same database is not allowed.
    var after: UInt64 = 0
    repeat {
      batch.removeAll(keepingCapacity: true)
      try forEach(after: after, in: transaction) { logged in
        batch.append(logged)
        return batch.count < 10_000
      }
      var facts = facts(in: transaction)
      for logged in batch { try appender.batch.index(logged, facts: &facts) }
      try appender.flushPending(in: transaction)
      after = batch.last?.sequence ?? after
    } while batch.count == 10_000
    try appender.commit(in: transaction)
    return appender.redactedCount
  }
}

extension EventLog {
  /// Erases the names of deleted tags from a log written before deletions named tags by key:
  /// one pass over the log, storing each deletion by name as one by key and erasing what each
  /// tag's latest deletion erases (``LogBatch`` rule 2).
  ///
  /// - Returns: The number of events redacted.
  package func eraseDeletedTagNames(in transaction: borrowing WriteTransaction) throws -> Int {
    var appender = try appender(in: transaction)
    var deletions: [LoggedEvent] = []
    try forEach(after: 0, in: transaction) { logged in
      if logged.event.change.deletedTag != nil { deletions.append(logged) }
      return true
    }
    var facts = facts(in: transaction)
    for logged in deletions { try appender.batch.refileTagDeletion(logged, facts: &facts) }
    try appender.commit(in: transaction)
    return appender.redactedCount
  }
}

extension Change {
  /// The notes and attachments the change is about, as the object index files it: the note
  /// of a note's change, the note and the attachment of an `attachmentAdded`, the attachment
  /// of an `attachmentDeleted`.
  /// ``objectIDs`` without an array: the first and the second, if any.
  package var objects: (Identifier?, Identifier?) {
    switch self {
    case .noteCreated(let id, _), .textSet(let id, _, _), .archivedSet(let id, _),
      .sortDateSet(let id, _), .tagsSet(let id, _), .attachmentsSet(let id, _),
      .noteDeleted(let id), .tagAdded(let id, _), .tagRemoved(let id, _):
      (id.identifier, nil)
    case .attachmentAdded(let attachment):
      (attachment.noteID.identifier, attachment.id.identifier)
    case .attachmentDeleted(let id): (id.identifier, nil)
    case .tagRenamed, .tagDeleted, .tagErased, .unknown: (nil, nil)
    }
  }

  package var objectIDs: [Identifier] {
    let (first, second) = objects
    return [first, second].compactMap { $0 }
  }

  /// The tags a change names, as the object index files them (see ``EventLog/tagObject(_:)``):
  /// the tags of a tags list, the tag of a rename, an addition or a removal (a redacted
  /// addition or removal names none). A deletion is not filed: the log keeps each tag's latest deletion
  /// apart.
  package var tagObjectIDs: [Identifier] {
    switch self {
    case .tagsSet(_, let tags):
      var seen = Set<TagID>()
      return tags.map { TagID(name: TagName.clean($0)) }.filter { seen.insert($0).inserted }
        .map(EventLog.tagObject)
    case .tagRenamed(let name), .tagAdded(_, let name):
      let cleaned = TagName.clean(name)
      return cleaned.isEmpty ? [] : [EventLog.tagObject(TagID(name: cleaned))]
    case .tagRemoved(_, let tag):
      // A redacted removal keeps no tag: its key is zeros.
      return tag.identifier == Identifier(high: 0, low: 0) ? [] : [tag.identifier]
    default: return []
    }
  }

  /// The tag a deletion deletes, by key: `tagErased`'s, or the key of `tagDeleted`'s name.
  package var deletedTag: TagKey? {
    switch self {
    case .tagErased(let tag): tag
    case .tagDeleted(let name): TagKey(name: name)
    default: nil
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
