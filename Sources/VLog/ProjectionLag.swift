internal import LMDB

/// How far the projections lag the log: the sequence number of the last event they include,
/// kept in `meta` (`projectedThrough`, 8 bytes) while a deferred ingest left events after it
/// unprojected, and absent when they include every event.
///
/// A sync client ingests the pages of a pull that more pages follow with their projections
/// deferred (``NoteStore/ingest(_:acknowledgingThrough:deferringProjections:)-4bo9v``): each
/// page commits its events, their index entries and what the log's rules need (erasure,
/// idempotence) durably, and the projections, the retention queue and the counts of unknown
/// kinds are brought up to date once, from the log, by the first write session after it
/// that projects — the pull's last page, a user write, ``NoteStore/bringProjectionsUpToDate()-6y5uv``
/// or the next open. A pull then writes each note's record, index entries and text part once,
/// not once a page; a crash between the two commits loses nothing, since the log is the truth
/// and the replay of its tail is what the write would have done.
///
/// A page that deletes projects at once, with every page before it: the log erases the deleted
/// objects' content at that commit, and a record may not name content that is gone. A reader
/// during the lag sees the state of the last commit that projected — whole pages, as observers
/// were told; what reads the log itself (a note's versions, its history) sees the log.
enum ProjectionLag {
  static let key = Array("projectedThrough".utf8)

  /// The sequence number of the last event the projections include; nil when they include
  /// every event of the log.
  static func projectedThrough(
    schema: Schema, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> UInt64? {
    try transaction.withValue(forKey: key, in: schema.meta) { value throws(VLogError) -> UInt64? in
      guard let value else { return nil }
      guard value.count == 8, let sequence = BigEndian.read(UInt64.self, from: value) else {
        throw VLogError(.corruptStore, "the projections' watermark is \(value.count) bytes")
      }
      return sequence
    }
  }

  /// How many events of a log ending at `lastSequence` the projections do not include.
  static func unprojected(
    schema: Schema, lastSequence: UInt64, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> UInt64 {
    try projectedThrough(schema: schema, in: transaction).map { lastSequence &- $0 } ?? 0
  }

  /// Records that the projections include the events through `sequence` only.
  static func record(
    _ sequence: UInt64, schema: Schema, in transaction: borrowing WriteTransaction
  ) throws {
    try transaction.put(BigEndian.bytes(sequence), forKey: key, in: schema.meta)
  }

  /// Records that the projections include every event.
  static func clear(schema: Schema, in transaction: borrowing WriteTransaction) throws {
    _ = try transaction.delete(forKey: key, in: schema.meta)
  }
}

extension Projector {
  /// Applies the log's events after `sequence` to the projections — writing the overlay out
  /// whenever it holds ``replayOverlayLimit`` notes and tags, and at the end — and queues the
  /// changes they replaced for retention in `log`: how a rebuild replays the whole log and a
  /// write session the events the projections lag by.
  ///
  /// - Parameters:
  ///   - observe: Sees each event before it is applied.
  /// - Returns: The number of events applied.
  mutating func replay(
    after sequence: UInt64, log: inout EventLog.Appender,
    in transaction: borrowing WriteTransaction,
    progress: ((RebuildProgress) -> Void)? = nil,
    observe: (LoggedEvent) throws -> Void = { _ in }
  ) throws -> Int {
    let replayed = try log.log.replay(after: sequence, in: transaction, progress: progress) {
      logged in
      try observe(logged)
      try apply(logged.event, at: logged.sequence, in: transaction)
      if overlayCount >= Self.replayOverlayLimit {
        try flush(in: transaction)
        log.enqueueReplaced(takeReplaced())
      }
    }
    try flush(in: transaction)
    log.enqueueReplaced(takeReplaced())
    return replayed
  }
}
