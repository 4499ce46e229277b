package import LMDB

extension EventLog {
  /// Starts appending inside `transaction`: reads the log's state once.
  package func appender(in transaction: borrowing WriteTransaction) throws -> Appender {
    var appender = Appender(
      log: self, state: try state(in: transaction), facts: facts(in: transaction))
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
    /// The log's rules for this transaction, with what they decided that is not written yet:
    /// records are written at each append, index entries and the rest at the next flush.
    var batch: LogBatch
    /// The log's facts, read inside the transaction this appender was made in (and lives in).
    var facts: StoredLogFacts
    /// Events redacted so far, as their object was deleted or by retention.
    package var redactedCount: Int { batch.redactedCount }
    /// Blobs that lost their last reference in this transaction (see `LogBatch.swift`), known
    /// once ``commit(in:)`` has run.
    package internal(set) var releasedBlobs: Set<BlobHash> = []
    /// The objects a server erases what it keeps of (``LogDecisions/erasedObjects``), known once
    /// ``commit(in:)`` has run.
    package internal(set) var erasedObjects: [Identifier] = []
    /// The latest time the clock may take from an appended event: the wall clock plus the
    /// skew bound, for a store; unlimited by default.
    package var clockLimit = HybridTime(rawValue: .max)
    /// The largest id in the index (nil: none), read for logs without a prefix: a local id
    /// after it is appended without a search.
    var lastID: Stamp?

    init(log: EventLog, state: LogState, facts: StoredLogFacts) {
      self.log = log
      self.state = state
      self.initial = state
      self.facts = facts
      self.batch = LogBatch(
        lastSequence: state.lastSequence, tracksFields: log.fieldIndex == nil,
        keepsAppended: false, rules: log.rules)
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
      // The record is written below: the batch does not keep it, and reads find it here.
      let logged = try batch.append(event, facts: &facts)
      let event = logged.event
      var writer = ProtobufWriter()
      writer.buffer.reserveCapacity(96 + event.unknownFields.count)
      EventCodec.encode(event, into: &writer)
      let bytes = writer.buffer
      let sequence = logged.sequence
      state.nextSequence = sequence + 1
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
      return logged
    }

    /// Writes what the batch decided and this shell has not written yet: redacted records,
    /// deletion markers, object and blob index entries, newest changes and the retention
    /// queue, each in key order (sorted writes touch each page once).
    mutating func flushPending(in transaction: borrowing WriteTransaction) throws {
      let log = self.log
      var decisions = batch.decisions
      batch.decisions = LogDecisions()
      for (sequence, event) in decisions.redacted.sorted(by: { $0.key < $1.key }) {
        let bytes = event.encoded()
        try log.withKey(sequence: sequence) { key in
          try transaction.put(
            forKey: key, reservingCount: LogRecord.headerSize + bytes.count, in: log.entries
          ) { buffer in
            LogRecord.write(bytes, into: buffer)
          }
        }
      }
      erasedObjects += decisions.erasedObjects
      for (object, sequence) in decisions.deletions {
        try transaction.put(
          BigEndian.bytes(sequence), forKey: log.objectKey(object, sequence: 0), in: log.objects)
      }
      for (object, stamp) in decisions.tagDeletions {
        try transaction.put(
          stamp.bytes, forKey: log.objectKey(object, sequence: 0), in: log.objects)
      }
      // One key buffer, rewritten for each entry.
      var key = log.prefix
      key.reserveCapacity(log.prefix.count + 24)
      let empty: [UInt8] = []
      if !decisions.objects.isEmpty {
        let bits = EventLog.objectBucketBits
        decisions.objects.sort {
          ($0.sequence >> bits, $0.object, $0.sequence) < (
            $1.sequence >> bits, $1.object, $1.sequence
          )
        }
        for (object, sequence) in decisions.objects {
          key.removeSubrange(log.prefix.count...)
          log.appendObjectKey(object, sequence: sequence, to: &key)
          try transaction.put(empty, forKey: key, in: log.objects)
        }
      }
      for (hash, sequences) in decisions.addedReferences {
        for sequence in sequences {
          try transaction.put(
            empty, forKey: log.blobKey(hash, sequence: sequence), in: log.blobReferences)
        }
      }
      for (hash, sequences) in decisions.removedReferences {
        for sequence in sequences {
          _ = try transaction.delete(
            forKey: log.blobKey(hash, sequence: sequence), in: log.blobReferences)
        }
      }
      for field in decisions.forgottenFields {
        _ = try transaction.delete(forKey: log.fieldKey(field.note, field.field), in: log.fields)
      }
      for (field, newest) in decisions.fields.sorted(by: { $0.key < $1.key }) {
        try transaction.put(
          Self.fieldValue(newest.stamp, newest.sequence),
          forKey: log.fieldKey(field.note, field.field), in: log.fields)
      }
      if !decisions.replaced.isEmpty {
        decisions.replaced.sort()
        for entry in decisions.replaced {
          key.removeSubrange(log.prefix.count...)
          BigEndian.append(entry.milliseconds, to: &key)
          BigEndian.append(entry.sequence, to: &key)
          try transaction.put(empty, forKey: key, in: log.superseded)
        }
      }
      for entry in decisions.dequeued {
        _ = try transaction.delete(forKey: log.supersededKey(entry), in: log.superseded)
      }
      releasedBlobs.formUnion(decisions.releasedBlobs)
    }

    /// Counts events of kinds this version does not know, seen since the last commit.
    package mutating func countUnknownEvents(_ count: Int) {
      state.unknownEvents += UInt64(count)
    }

    /// Sets the count of events of unknown kinds, after a replay counted them all.
    package mutating func setUnknownEvents(_ count: Int) {
      state.unknownEvents = UInt64(count)
    }

    /// Finishes the batch (erasure, the tags changes a tag deletion left to check, released
    /// blobs: see ``LogBatch/finish(facts:)``), writes what it decided, and writes the log's
    /// state if this transaction changed it. While nothing is pending, the outbox watermark
    /// follows the end of the log.
    package mutating func commit(in transaction: borrowing WriteTransaction) throws {
      try flushPending(in: transaction)
      try batch.finish(facts: &facts)
      try flushPending(in: transaction)
      if state.pendingLocal == 0 { state.acknowledged = state.lastSequence }
      guard state != initial else { return }
      try log.write(state, in: transaction)
    }
  }
}
