internal import LMDB

/// Which notes have changes made here that the server has not stored yet: each such note with
/// the sequence number of its latest local change, in the store's `pendingNotes` database. A
/// note is pending while that change is in the outbox (after the log's acknowledged
/// watermark), and confirmed once the server stored it — then it leaves the database, so the
/// database is as small as the outbox.
///
/// A local change of a note (or of one of its attachments) records it; acknowledging the
/// outbox confirms the notes whose latest change it reaches; a replay of the log builds the
/// database again from the outbox. It is this replica's alone: not in the state digest.
enum PendingNotes {
  /// Records that `note` has a local change at `sequence`.
  static func record(
    _ note: NoteID, at sequence: UInt64, schema: Schema,
    in transaction: borrowing WriteTransaction
  ) throws {
    // Without allocating: every local change records its note.
    var value = sequence.bigEndian
    try note.identifier.withKey { key in
      try withUnsafeBytes(of: &value) { value in
        try transaction.put(value, forKey: key, in: schema.pendingNotes)
      }
    }
  }

  /// Confirms the notes whose latest local change is at or before `acknowledged`: they leave
  /// the database.
  ///
  /// - Returns: The notes confirmed that a query shows (created, not deleted), and whether
  ///   any note was confirmed at all (``NoteStore/pendingNotes()`` changed).
  static func confirm(
    through acknowledged: UInt64, schema: Schema, in transaction: borrowing WriteTransaction
  ) throws -> (shown: Set<NoteID>, any: Bool) {
    var confirmed: [[UInt8]] = []
    try transaction.forEach(in: schema.pendingNotes) { key, value in
      // A value of another length is not one this version wrote: confirmed, so it goes.
      let sequence = BigEndian.read(UInt64.self, from: Array(value)) ?? 0
      if sequence <= acknowledged { confirmed.append(Array(key)) }
    }
    for key in confirmed { _ = try transaction.delete(forKey: key, in: schema.pendingNotes) }
    let shown = try Set(
      confirmed.compactMap(Self.note).filter {
        try !schema.hasTombstone($0.identifier, in: transaction)
          && schema.noteRecord($0, in: transaction)?.isCreated == true
      })
    return (shown, !confirmed.isEmpty)
  }

  /// Whether `note` has a change the server has not stored yet.
  static func isPending(
    _ note: NoteID, schema: Schema, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> Bool {
    try note.identifier.withKey { key in
      try transaction.containsValue(forKey: key, in: schema.pendingNotes)
    }
  }

  /// Every note with a change the server has not stored yet, in id order.
  static func all(schema: Schema, in transaction: borrowing some Transaction & ~Copyable)
    throws -> [NoteID]
  {
    var notes: [NoteID] = []
    try transaction.forEach(in: schema.pendingNotes) { key, _ in
      if let note = Self.note(Array(key)) { notes.append(note) }
    }
    return notes
  }

  /// Builds the database again as a replay of the log passes: give it each event before the
  /// projector applies it (an attachment's deletion removes the record that names its note),
  /// then ``write(in:)``. It reads only what the replay reads anyway.
  struct Rebuild {
    let schema: Schema
    /// This store's replica ids, its own and those it had before: their events after the
    /// watermark are the outbox. Empty for a store without one.
    let replicas: Set<ReplicaID>
    let acknowledged: UInt64
    private var latest: [NoteID: UInt64] = [:]

    init(schema: Schema, in transaction: borrowing WriteTransaction) throws {
      self.schema = schema
      replicas =
        try NoteStore.storedFacts(schema: schema, in: transaction) == nil
        ? [] : try NoteStore.localReplicas(schema: schema, in: transaction)
      let state = try schema.eventLog.state(in: transaction)
      acknowledged = state.pendingLocal == 0 ? .max : state.acknowledged
    }

    /// Counts an event of the log, in log order.
    mutating func observe(_ logged: LoggedEvent, in transaction: borrowing WriteTransaction)
      throws
    {
      guard logged.sequence > acknowledged, replicas.contains(logged.event.stamp.replica),
        let note = try PendingNotes.note(of: logged.event.change, schema: schema, in: transaction)
      else { return }
      latest[note] = logged.sequence
    }

    /// Replaces the database with what the replay found.
    func write(in transaction: borrowing WriteTransaction) throws {
      try transaction.removeAll(in: schema.pendingNotes)
      for (note, sequence) in latest {
        try record(note, at: sequence, schema: schema, in: transaction)
      }
    }
  }

  /// The note a change is about: its own, or for an attachment's deletion its attachment's —
  /// by the attachment's record, or once the deletion removed that, by its addition in the log
  /// (a redacted addition keeps both ids).
  static func note(
    of change: Change, schema: Schema, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> NoteID? {
    if let note = change.noteID { return note }
    guard case .attachmentDeleted(let attachment) = change else { return nil }
    if let record = try schema.attachmentRecord(attachment, in: transaction) {
      return record.attachment.noteID
    }
    for sequence in try schema.eventLog.sequences(of: attachment.identifier, in: transaction) {
      if case .attachmentAdded(let added) = try schema.eventLog.event(
        at: sequence, in: transaction)?
        .event.change
      {
        return added.noteID
      }
    }
    return nil
  }

  private static func note(_ key: [UInt8]) -> NoteID? {
    guard key.count == 16 else { return nil }
    return NoteID(key.withUnsafeBytes { Identifier(bytes: $0) })
  }
}
