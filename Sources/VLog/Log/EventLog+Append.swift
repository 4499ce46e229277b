package import LMDB

extension EventLog {
  /// Starts appending inside `transaction`: reads the log's state once.
  package func appender(in transaction: borrowing WriteTransaction) throws -> Appender {
    var appender = Appender(log: self, state: try state(in: transaction))
    if prefix.isEmpty {
      appender.lastID = try transaction.withCursor(on: index) { cursor throws -> Stamp? in
        guard try cursor.last() else { return nil }
        return try cursor.withCurrent { key, _ in try id(fromIndexKey: key) }
      }
    }
    return appender
  }

  /// Appends events and moves the outbox watermark inside one write transaction, keeping the
  /// log's state in memory until ``commit(in:)`` writes it once.
  ///
  /// Make one per transaction with ``EventLog/appender(in:)``; a transaction that runs again
  /// (after the map grows) makes a new one.
  package struct Appender {
    /// The log appended to.
    package let log: EventLog
    /// The log's state, with this transaction's appends.
    package internal(set) var state: LogState
    private let initial: LogState
    /// Events appended so far.
    package internal(set) var appended = 0
    /// Events redacted so far, as their object was deleted or by retention.
    package internal(set) var redactedCount = 0
    /// Blobs that lost their last reference in this transaction (see `EventLog+Erasure.swift`).
    package internal(set) var releasedBlobs: Set<BlobHash> = []
    /// Object index entries and replaced changes to write, sorted, at the next flush: sorted
    /// writes touch each page once.
    var pendingObjects: [(object: Identifier, sequence: UInt64)] = []
    var pendingSuperseded: [(milliseconds: UInt64, sequence: UInt64)] = []
    /// The newest change of each note field this transaction read or set; `dirty` ones are
    /// written at the next flush.
    var fieldCache: [FieldKey: (stamp: Stamp, sequence: UInt64, dirty: Bool)] = [:]
    /// Tags changes naming a deleted tag, to redact at commit if a newer tags change of their
    /// note replaced them.
    var pendingTagsChecks: [(sequence: UInt64, note: NoteID, stamp: Stamp)] = []
    /// Whether each object this transaction looked up is deleted.
    var deletionCache: [Identifier: Bool] = [:]
    /// The latest time the clock may take from an appended event: the wall clock plus the
    /// skew bound, for a store; unlimited by default.
    package var clockLimit = HybridTime(rawValue: .max)
    /// The largest id in the index (nil: none), read for logs without a prefix: a local id
    /// after it is appended without a search.
    var lastID: Stamp?

    init(log: EventLog, state: LogState) {
      self.log = log
      self.state = state
      self.initial = state
    }

    /// The stamp for a new local event of `replica`: later than every stamp this replica
    /// issued, and than every other stamp up to ``clockLimit``.
    ///
    /// - Throws: ``VLogError/Code/invalidValue`` if the clock has issued its last time.
    package mutating func stamp(wallMilliseconds: UInt64, replica: ReplicaID) throws(VLogError)
      -> Stamp
    {
      guard let time = state.clock.tick(wallMilliseconds: wallMilliseconds) else {
        throw VLogError(
          .invalidValue, "the clock has issued its last time (\(state.clock.latest))")
      }
      return Stamp(time: time, replica: replica)
    }

    /// Appends an event (counting it in the outbox if it is `local`), and advances the clock
    /// past its stamp.
    ///
    /// An event of a deleted note or attachment is stored redacted; a deletion redacts the
    /// object's other events (see `EventLog+Erasure.swift`).
    ///
    /// The caller makes sure the log does not hold the event yet (``EventLog/contains(_:in:)``);
    /// a local event's stamp comes from ``stamp(wallMilliseconds:replica:)``.
    ///
    /// - Returns: The event's sequence number, and the event as stored.
    /// - Throws: `LMDBError` with code `keyExists` if the log holds the event already.
    @discardableResult
    package mutating func append(
      _ event: Event, local: Bool, in transaction: borrowing WriteTransaction
    ) throws -> LoggedEvent {
      let event = try erasing(event, in: transaction)
      var writer = WireWriter()
      writer.buffer.reserveCapacity(96 + event.unknownFields.count)
      EventCodec.encode(event, into: &writer)
      let bytes = writer.buffer
      let sequence = state.nextSequence
      state.nextSequence += 1
      let log = self.log
      try log.withKey(sequence: sequence) { sequenceKey in
        // A log alone in its database appends at the end of it; a log under a prefix (an
        // account on a server) shares the database with logs whose keys sort after its own.
        try transaction.put(
          forKey: sequenceKey, reservingCount: LogRecord.headerSize + bytes.count,
          in: log.entries, options: log.prefix.isEmpty ? .append : .noOverwrite
        ) { buffer in
          LogRecord.write(bytes, into: buffer)
        }
        let sequenceValue = UnsafeRawBufferPointer(
          rebasing: sequenceKey[(sequenceKey.count - 8)...])
        // A local stamp is usually later than every id in the index, and then goes at the
        // end without a search; not when an ingested stamp lies beyond the clock's limit.
        let atEnd = local && log.prefix.isEmpty && (lastID.map { $0 < event.stamp } ?? true)
        try event.stamp.withKey { id in
          try log.withKey(id: event.stamp) { idKey in
            try transaction.put(
              sequenceValue, forKey: idKey, in: log.index,
              options: atEnd ? .append : .noOverwrite)
          }
          state.digest.add(eventID: id)
        }
      }
      state.clock.observe(event.stamp.time, limit: clockLimit)
      if lastID.map({ $0 < event.stamp }) ?? true { lastID = event.stamp }
      if local { state.pendingLocal += 1 }
      appended += 1
      try indexObjects(of: event, at: sequence, in: transaction)
      try trackReplacement(of: event, at: sequence, in: transaction)
      return LoggedEvent(sequence: sequence, event: event)
    }

    /// Writes the pending object index entries, replaced changes and newest changes, each in
    /// key order.
    mutating func flushPending(in transaction: borrowing WriteTransaction) throws {
      let log = self.log
      // One key buffer, rewritten for each entry.
      var key = log.prefix
      key.reserveCapacity(log.prefix.count + 24)
      let empty: [UInt8] = []
      if !pendingObjects.isEmpty {
        let bits = EventLog.objectBucketBits
        pendingObjects.sort {
          ($0.sequence >> bits, $0.object, $0.sequence) < (
            $1.sequence >> bits, $1.object, $1.sequence
          )
        }
        for (object, sequence) in pendingObjects {
          key.removeSubrange(log.prefix.count...)
          log.appendObjectKey(object, sequence: sequence, to: &key)
          try transaction.put(empty, forKey: key, in: log.objects)
        }
        pendingObjects.removeAll(keepingCapacity: true)
      }
      if !pendingSuperseded.isEmpty {
        pendingSuperseded.sort { ($0.milliseconds, $0.sequence) < ($1.milliseconds, $1.sequence) }
        for (milliseconds, sequence) in pendingSuperseded {
          key.removeSubrange(log.prefix.count...)
          BigEndian.append(milliseconds, to: &key)
          BigEndian.append(sequence, to: &key)
          try transaction.put(empty, forKey: key, in: log.superseded)
        }
        pendingSuperseded.removeAll(keepingCapacity: true)
      }
      let dirty = fieldCache.filter(\.value.dirty).keys.sorted()
      for key in dirty {
        guard let entry = fieldCache[key] else { continue }
        try transaction.put(
          Self.fieldValue(entry.stamp, entry.sequence), forKey: log.fieldKey(key.note, key.field),
          in: log.fields)
        fieldCache[key] = (entry.stamp, entry.sequence, false)
      }
    }

    /// Counts events of kinds this version does not know, seen since the last commit.
    package mutating func countUnknownEvents(_ count: Int) {
      state.unknownEvents += UInt64(count)
    }

    /// Sets the count of events of unknown kinds, after a replay counted them all.
    package mutating func setUnknownEvents(_ count: Int) {
      state.unknownEvents = UInt64(count)
    }

    /// Writes what the appends left pending (index entries, newest changes) and the log's
    /// state if this transaction changed it. While nothing is pending, the outbox watermark
    /// follows the end of the log.
    package mutating func commit(in transaction: borrowing WriteTransaction) throws {
      try flushPending(in: transaction)
      try redactReplacedTagsChanges(in: transaction)
      if state.pendingLocal == 0 { state.acknowledged = state.lastSequence }
      guard state != initial else { return }
      try log.write(state, in: transaction)
    }
  }
}

/// A note's field, as the appender's cache of newest changes keys it; sorted as `fields` is.
struct FieldKey: Hashable, Comparable {
  let note: NoteID
  let field: UInt8

  static func < (a: FieldKey, b: FieldKey) -> Bool {
    (a.note.identifier, a.field) < (b.note.identifier, b.field)
  }
}
