package import LMDB

/// A log's running state, read at the start of each write transaction and written at its end
/// as one record, so that a transaction that runs again after the map grows starts from the
/// same state.
///
/// The outbox is not a table: it is this replica's events after ``acknowledged`` in the log.
/// ``pendingLocal`` counts them, so an empty outbox costs nothing to read, and while it is empty
/// the watermark moves past ingested events too, so the next read starts near the end.
package struct LogState: Equatable, Sendable {
  /// The sequence number the next appended event gets.
  package var nextSequence: UInt64
  /// The latest time issued or observed.
  var clock: HybridClock
  /// The digest of every event id in the log.
  package var digest: EventSetDigest
  /// Events of kinds this version does not know.
  package var unknownEvents: UInt64
  /// Every local event up to this sequence number is acknowledged by the server.
  package var acknowledged: UInt64
  /// Local events after `acknowledged`.
  package var pendingLocal: UInt64

  /// The sequence number of the last event, 0 for an empty log.
  package var lastSequence: UInt64 { nextSequence - 1 }

  static let recordSize = 48

  /// The state of a log whose last entry is `lastSequence`, from its record (nil for none).
  ///
  /// - Throws: ``VLogError/Code/corruptStore`` for a record of the wrong size.
  init(lastSequence: UInt64, record: UnsafeRawBufferPointer?) throws(VLogError) {
    guard lastSequence < .max else {
      throw VLogError(.corruptStore, "the log's last sequence number is \(lastSequence)")
    }
    nextSequence = lastSequence + 1
    guard let record else {
      (clock, digest, unknownEvents, acknowledged, pendingLocal) = (HybridClock(), .empty, 0, 0, 0)
      return
    }
    guard record.count == Self.recordSize else {
      throw VLogError(
        .corruptStore, "the log state record is \(record.count) bytes, not \(Self.recordSize)")
    }
    func integer(_ index: Int) -> UInt64 {
      BigEndian.read(UInt64.self, from: record, at: index * 8) ?? 0
    }
    clock = HybridClock(latest: HybridTime(rawValue: integer(0)))
    digest = EventSetDigest(high: integer(1), low: integer(2))
    unknownEvents = integer(3)
    acknowledged = integer(4)
    pendingLocal = integer(5)
    // Counts of events in the log cannot exceed its length; a record that says otherwise is
    // damaged (and would overflow the counters).
    guard unknownEvents <= lastSequence, acknowledged <= lastSequence,
      pendingLocal <= lastSequence
    else {
      throw VLogError(
        .corruptStore,
        "the log state counts more events than the log's \(lastSequence) (unknown "
          + "\(unknownEvents), acknowledged through \(acknowledged), pending \(pendingLocal))")
    }
  }

  /// The record: six big-endian 64-bit integers.
  var record: [UInt8] {
    var record = [UInt8]()
    record.reserveCapacity(Self.recordSize)
    for value in [
      clock.latest.rawValue, digest.high, digest.low, unknownEvents, acknowledged, pendingLocal,
    ] {
      BigEndian.append(value, to: &record)
    }
    return record
  }
}

extension EventLog {
  /// The log's state as of `transaction`'s snapshot.
  package func state(in transaction: borrowing some Transaction & ~Copyable) throws -> LogState {
    let last = try lastSequence(in: transaction)
    return try transaction.withValue(forKey: stateKey, in: stateDatabase) {
      record throws -> LogState in
      try LogState(lastSequence: last, record: record)
    }
  }

  /// The sequence number of the last event, or 0 if the log is empty.
  package func lastSequence(in transaction: borrowing some Transaction & ~Copyable) throws
    -> UInt64
  {
    if prefix.isEmpty {
      return try transaction.withCursor(on: entries) { cursor throws -> UInt64 in
        try cursor.last() ? try cursor.withCurrent { key, _ in try sequence(fromKey: key) } : 0
      }
    }
    return try transaction.withEntries(in: entries, range: ownKeys, reverse: true) {
      entries throws -> UInt64 in
      try entries.next { key, _ in try sequence(fromKey: key) } ?? 0
    }
  }

  func write(_ state: LogState, in transaction: borrowing WriteTransaction) throws {
    try transaction.put(state.record, forKey: stateKey, in: stateDatabase)
  }
}

extension EventLog {
  /// Recomputes the log's state from its index — the event-set digest and the clock from the
  /// ids, with nothing pending in the outbox — and writes it: for logs kept without a state
  /// record (a server's format 1).
  package func recoverState(in transaction: borrowing WriteTransaction) throws {
    var state = try LogState(lastSequence: lastSequence(in: transaction), record: nil)
    try forEachID(in: transaction) { id in
      id.withKey { state.digest.add(eventID: $0) }
      state.clock.observe(id.time)
    }
    state.acknowledged = state.lastSequence
    try write(state, in: transaction)
  }
}
