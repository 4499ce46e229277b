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
  func fieldKey(_ note: NoteID, _ field: UInt8) -> [UInt8] {
    var key = prefix
    key.reserveCapacity(prefix.count + 17)
    note.identifier.append(to: &key)
    key.append(field)
    return key
  }

  /// The newest change to a note's field that the log holds: its stamp and sequence number.
  func newestChange(
    to note: NoteID, field: UInt8, in transaction: borrowing some Transaction & ~Copyable
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

  /// Whether a change is replaced, and has been for longer than `retention` at `now`: its
  /// values should be redacted. Uses the newest change's time, an upper bound of when it was
  /// replaced.
  func isPastRetention(
    _ logged: LoggedEvent, retention: Duration, now: UInt64,
    in transaction: borrowing some Transaction & ~Copyable
  ) throws -> Bool {
    guard !logged.event.isRedacted, let field = logged.event.change.field,
      let note = logged.event.change.noteID,
      let newest = try newestChange(to: note, field: field, in: transaction),
      newest.stamp > logged.event.stamp
    else { return false }
    return Self.isDue(newest.stamp.time.milliseconds, retention: retention, now: now)
  }

  /// Whether a change replaced at `milliseconds` is due for redaction at `now`.
  package static func isDue(_ milliseconds: UInt64, retention: Duration, now: UInt64) -> Bool {
    let period = retention.wholeMilliseconds
    guard period > 0 else { return true }
    let (due, overflow) = milliseconds.addingReportingOverflow(period)
    return !overflow && due <= now
  }
}

extension EventLog.Appender {
  /// Records a change to a field: the newest change stays in `fields`; the older one goes to
  /// the queue of replaced changes.
  mutating func trackReplacement(
    of event: Event, at sequence: UInt64, in transaction: borrowing WriteTransaction
  ) throws {
    guard log.fieldIndex == nil, let field = event.change.field, let note = event.change.noteID,
      event.redaction != .deleted
    else { return }
    let key = FieldKey(note: note, field: field)
    guard let newest = try newestChange(key, in: transaction) else {
      fieldCache[key] = (event.stamp, sequence, true)
      return
    }
    if event.stamp > newest.stamp {
      fieldCache[key] = (event.stamp, sequence, true)
      enqueue(newest.sequence, replacedAt: event.stamp)
    } else if !event.isRedacted {
      enqueue(sequence, replacedAt: newest.stamp)
    }
  }

  /// The newest change to a note's field: from this transaction's cache, else from `fields`.
  private mutating func newestChange(
    _ key: FieldKey, in transaction: borrowing WriteTransaction
  ) throws -> (stamp: Stamp, sequence: UInt64)? {
    if let cached = fieldCache[key] { return (cached.stamp, cached.sequence) }
    guard let stored = try log.newestChange(to: key.note, field: key.field, in: transaction)
    else { return nil }
    fieldCache[key] = (stored.stamp, stored.sequence, false)
    return stored
  }

  static func fieldValue(_ stamp: Stamp, _ sequence: UInt64) -> [UInt8] {
    var value = stamp.bytes
    BigEndian.append(sequence, to: &value)
    return value
  }

  /// Queues changes their owner found replaced (a log with a ``EventLog/fieldIndex``):
  /// each sequence number with the time of the change that replaced it.
  package mutating func enqueueReplaced(
    _ replaced: [(milliseconds: UInt64, sequence: UInt64)]
  ) {
    pendingSuperseded.append(contentsOf: replaced)
  }

  private mutating func enqueue(_ sequence: UInt64, replacedAt stamp: Stamp) {
    pendingSuperseded.append((stamp.time.milliseconds, sequence))
  }

  /// Forgets a deleted note's fields: its changes are all redacted.
  mutating func forgetFields(of note: NoteID, in transaction: borrowing WriteTransaction) throws {
    guard log.fieldIndex == nil else { return }
    for field in Change.fields {
      fieldCache[FieldKey(note: note, field: field)] = nil
      _ = try transaction.delete(forKey: log.fieldKey(note, field), in: log.fields)
    }
  }

  /// Finds the newest change to a note's field again from the note's events: after restamping
  /// changed stamps in place.
  mutating func refreshNewestChange(
    to note: NoteID, field: UInt8, in transaction: borrowing WriteTransaction
  ) throws {
    guard log.fieldIndex == nil else { return }
    try flushPending(in: transaction)
    fieldCache[FieldKey(note: note, field: field)] = nil
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
  }

  /// Redacts the replaced changes whose retention period has passed at `now` (wall-clock
  /// milliseconds); with no retention (nil), does nothing. Each is checked against the newest
  /// change to its field before it is redacted.
  ///
  /// - Returns: The number of changes redacted.
  @discardableResult
  package mutating func applyRetention(
    _ retention: Duration?, now: UInt64, in transaction: borrowing WriteTransaction
  ) throws -> Int {
    guard let retention else { return 0 }
    try flushPending(in: transaction)
    let log = self.log
    var due: [(key: [UInt8], sequence: UInt64)] = []
    try transaction.withEntries(in: log.superseded, range: log.ownKeys) { entries throws in
      while let entry = try entries.next({ key, _ throws -> ([UInt8], UInt64, UInt64) in
        guard key.count == log.prefix.count + 16,
          let time = BigEndian.read(UInt64.self, from: key, at: log.prefix.count),
          let sequence = BigEndian.read(UInt64.self, from: key, at: log.prefix.count + 8)
        else { throw VLogError(.corruptStore, "a superseded key is \(key.count) bytes") }
        return (Array(key), time, sequence)
      }) {
        guard EventLog.isDue(entry.1, retention: retention, now: now) else { return }
        due.append((entry.0, entry.2))
      }
    }
    var redacted = 0
    for (key, sequence) in due {
      _ = try transaction.delete(forKey: key, in: log.superseded)
      guard let logged = try log.event(at: sequence, in: transaction),
        try log.isPastRetention(logged, retention: .zero, now: now, in: transaction)
      else { continue }
      if try redact(at: sequence, reason: .superseded, in: transaction) { redacted += 1 }
    }
    return redacted
  }
}

extension Change {
  /// The note field a change sets: 1 text, 2 archived, 3 sort date, 4 tags, 5 attachments.
  package var field: UInt8? {
    switch self {
    case .textSet: 1
    case .archivedSet: 2
    case .sortDateSet: 3
    case .tagsSet: 4
    case .attachmentsSet: 5
    default: nil
    }
  }

  /// Every note field, as ``field`` numbers them.
  package static let fields: [UInt8] = [1, 2, 3, 4, 5]
}

extension Duration {
  /// The duration in whole milliseconds, 0 for negative durations, saturating.
  package var wholeMilliseconds: UInt64 {
    let (seconds, attoseconds) = components
    guard seconds >= 0 else { return 0 }
    let (milliseconds, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1000)
    guard !overflow else { return .max }
    return milliseconds &+ UInt64(max(0, attoseconds) / 1_000_000_000_000_000)
  }
}
