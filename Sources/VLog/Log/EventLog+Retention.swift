package import LMDB

/// Bounded history: a change replaced by a newer change to the same field can never win
/// again, and once it has been replaced for longer than the retention period its values are
/// redacted (``Event/Redaction/superseded``).
///
/// The log keeps, per note and field, the stamp and sequence number of the newest change it
/// holds (`fields`), and a queue of replaced changes ordered by when they were replaced
/// (`superseded`: the time of the change that replaced them, an upper bound). Each commit
/// redacts the changes in the queue whose time has come, after checking that a newer change
/// to the field is still in the log. Replacement is decided by stamps alone, so every replica
/// makes the same decision about the same events; when each redacts depends on its own clock.
///
/// | database | key | value |
/// |---|---|---|
/// | fields | prefix + note id (16) + field (1) | stamp (24) + sequence (8) of the newest change |
/// | superseded | prefix + replaced-at milliseconds (8) + sequence (8) | empty |
extension EventLog {
  func fieldKey(_ note: NoteID, _ field: NoteField) -> [UInt8] {
    var key = prefix
    key.reserveCapacity(prefix.count + 17)
    note.identifier.append(to: &key)
    key.append(field.rawValue)
    return key
  }

  /// The newest change to a note's field that the log holds: its stamp and sequence number.
  func newestChange(
    to note: NoteID, field: NoteField, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> (stamp: Stamp, sequence: UInt64)? {
    if let fieldIndex {
      return try fieldIndex.newestChange(to: note, field: field, in: transaction)
    }
    return try transaction.withValue(forKey: fieldKey(note, field), in: fields) {
      value throws -> (Stamp, UInt64)? in
      guard let value else { return nil }
      guard value.count == Stamp.byteCount + 8,
        let sequence = BigEndian.read(UInt64.self, from: value, at: Stamp.byteCount)
      else { throw VLogError(.corruptStore, "a field record is \(value.count) bytes") }
      return (Stamp(bytes: value), sequence)
    }
  }

  /// The key of a queued replaced change.
  func supersededKey(_ entry: ReplacedChange) -> [UInt8] {
    var key = prefix
    BigEndian.append(entry.milliseconds, to: &key)
    BigEndian.append(entry.sequence, to: &key)
    return key
  }

  /// The queued replaced changes that are due at `now`: those replaced at or before the
  /// latest due time (``LogBatch/latestDueTime(retention:now:)``), in queue order.
  func dueReplacedChanges(
    retention: Duration, now: Milliseconds, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> [ReplacedChange] {
    guard let latest = LogBatch.latestDueTime(retention: retention, now: now) else { return [] }
    var due: [ReplacedChange] = []
    let prefixCount = prefix.count
    try transaction.withEntries(in: superseded, range: ownKeys) { entries throws in
      while let entry = try entries.next({ key, _ throws -> ReplacedChange in
        guard key.count == prefixCount + 16,
          let time = BigEndian.read(UInt64.self, from: key, at: prefixCount),
          let sequence = BigEndian.read(UInt64.self, from: key, at: prefixCount + 8)
        else { throw VLogError(.corruptStore, "a superseded key is \(key.count) bytes") }
        return ReplacedChange(milliseconds: time, sequence: sequence)
      }) {
        guard entry.milliseconds <= latest else { return }
        due.append(entry)
      }
    }
    return due
  }
}

extension EventLog.Appender {
  static func fieldValue(_ stamp: Stamp, _ sequence: UInt64) -> [UInt8] {
    var value = stamp.bytes
    BigEndian.append(sequence, to: &value)
    return value
  }

  /// Queues changes their owner found replaced (a log with a ``EventLog/fieldIndex``):
  /// each sequence number with the time of the change that replaced it.
  package mutating func enqueueReplaced(_ replaced: [ReplacedChange]) {
    batch.enqueueReplaced(replaced)
  }

  /// Finds the newest change to a note's field again from the note's events: after restamping
  /// changed stamps in place.
  mutating func refreshNewestChange(
    to note: NoteID, field: NoteField, in transaction: borrowing WriteTransaction
  ) throws {
    guard log.fieldIndex == nil else { return }
    try flushPending(in: transaction)
    var newest: (Stamp, UInt64)?
    for sequence in try log.sequences(of: note.identifier, in: transaction) {
      guard let logged = try log.event(at: sequence, in: transaction),
        logged.event.change.field == field, newest.map({ $0.0 < logged.event.stamp }) ?? true
      else { continue }
      newest = (logged.event.stamp, sequence)
    }
    let key = log.fieldKey(note, field)
    if let newest {
      try transaction.put(Self.fieldValue(newest.0, newest.1), forKey: key, in: log.fields)
    } else {
      _ = try transaction.delete(forKey: key, in: log.fields)
    }
    batch.forgetNewestChange(of: FieldKey(note: note, field: field))
  }

  /// Redacts the replaced changes whose retention period has passed at `now` (wall-clock
  /// milliseconds); with no retention (nil), does nothing (``LogBatch/applyRetention(_:now:stored:facts:)``).
  ///
  /// - Returns: The number of changes redacted.
  @discardableResult
  package mutating func applyRetention(
    _ retention: Duration?, now: Milliseconds, in transaction: borrowing WriteTransaction
  ) throws -> Int {
    guard let retention else { return 0 }
    try flushPending(in: transaction)
    let due = try log.dueReplacedChanges(retention: retention, now: now, in: transaction)
    let redacted = try batch.applyRetention(retention, now: now, stored: due, facts: &facts)
    try flushPending(in: transaction)
    return redacted
  }
}

extension Change {
  /// The note field a change sets, if it sets one.
  package var field: NoteField? {
    switch self {
    case .textSet: .text
    case .archivedSet: .archived
    case .sortDateSet: .sortDate
    case .tagsSet: .tags
    case .attachmentsSet: .attachments
    default: nil
    }
  }
}
