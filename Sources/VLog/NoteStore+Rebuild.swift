internal import Crypto
internal import Foundation
internal import LMDB

/// A digest of a store's projected state: notes, tombstones, attachments, tags and indexes.
///
/// Two replicas that hold the same events have the same state digest, whatever order the events
/// arrived in; a store's digest does not change when its projections are rebuilt. Blobs are
/// not included (a replica fetches them lazily).
public struct StateDigest: Hashable, Sendable, CustomStringConvertible {
  /// The SHA-256 bytes.
  public let bytes: [UInt8]

  /// 64 lowercase hexadecimal digits.
  public var description: String { Hex.string(bytes) }
}

extension NoteStore {
  /// Drops the projections and replays the whole log into them, in one transaction.
  ///
  /// The result is byte-identical to the state the store had, which is what makes it safe to
  /// run at any time (and what `vlog verify` checks). Memory stays bounded: the projector
  /// writes out its overlay whenever it holds 50,000 notes and tags, however long the log.
  ///
  /// - Parameter progress: Called every 10,000 events and at the end, on the calling thread.
  /// - Returns: The number of events replayed.
  @discardableResult
  public func rebuildProjections(progress: ((RebuildProgress) -> Void)? = nil) throws -> Int {
    try VLogError.wrapping {
      try environment.write { transaction throws -> Int in
        try replayLog(into: transaction, progress: progress)
      }
    }
  }

  /// Empties the projections and replays the log into them inside `transaction`.
  func replayLog(
    into transaction: borrowing WriteTransaction, progress: ((RebuildProgress) -> Void)?
  ) throws -> Int {
    // Projections a deferred ingest left behind had not queued what its events replaced for
    // retention: the replay queues it (re-queueing a queued change changes nothing).
    let lagging = try ProjectionLag.projectedThrough(schema: schema, in: transaction) != nil
    return try Self.replayLog(
      schema: schema, merge: merge, into: transaction, progress: progress,
      tracksReplacements: lagging)
  }

  /// - Parameter tracksReplacements: Whether to queue the replaced changes for retention
  ///   (a migrated store's log has no queue yet; re-queueing a queued change changes nothing).
  static func replayLog(
    schema: Schema, merge: NoteMerge, into transaction: borrowing WriteTransaction,
    progress: ((RebuildProgress) -> Void)?, tracksReplacements: Bool = false
  ) throws -> Int {
    let eventLog = schema.eventLog
    for database in schema.projections + schema.search {
      try transaction.removeAll(in: database)
    }
    var log = try eventLog.appender(in: transaction)
    var projector = Projector(schema: schema, merge: merge)
    projector.tracksReplacements = tracksReplacements
    var pending = try PendingNotes.Rebuild(schema: schema, in: transaction)
    let replayed = try projector.replay(
      after: 0, log: &log, in: transaction, progress: progress
    ) { logged in try pending.observe(logged, in: transaction) }
    log.setUnknownEvents(projector.unknownEvents)
    try log.commit(in: transaction)
    try pending.write(in: transaction)
    try ProjectionLag.clear(schema: schema, in: transaction)
    return replayed
  }

  /// The digest of the projected state (see ``StateDigest``).
  public func stateDigest() throws -> StateDigest {
    try read { transaction in try stateDigest(in: transaction) }
  }

  func stateDigest(in transaction: borrowing some Transaction & ~Copyable) throws -> StateDigest {
    var hasher = SHA256()
    // Note records are hashed whole (stored part and text part) without their sequence
    // numbers, which are local to this store.
    for database in schema.projections where database != schema.noteTexts {
      hasher.update(data: Array((database.name ?? "").utf8) + [0])
      let isNotes = database == schema.notes
      try transaction.forEach(in: database) { key, value in
        let canonical =
          isNotes
          ? try transaction.withValue(forKey: key, in: schema.noteTexts) { text in
            try NoteRecord(decoding: value, text: text).canonicalEncoding()
          } : nil
        var lengths = ProtobufWriter()
        lengths.rawVarint(UInt64(key.count))
        lengths.rawVarint(UInt64(canonical?.count ?? value.count))
        hasher.update(data: lengths.buffer)
        hasher.update(bufferPointer: key)
        if let canonical {
          hasher.update(data: canonical)
        } else {
          hasher.update(bufferPointer: value)
        }
      }
    }
    return StateDigest(bytes: Array(hasher.finalize()))
  }

  /// The order-independent digest of every event in the log (see ``EventSetDigest``).
  public func eventSetDigest() throws -> EventSetDigest {
    try read { transaction in try eventLog.state(in: transaction).digest }
  }

  /// The number of events in the log.
  public func eventCount() throws -> Int {
    try read { try $0.count(in: schema.log) }
  }

  /// The number of events of kinds this version does not know: stored, forwarded, not projected.
  public func unknownEventCount() throws -> Int {
    try read { transaction in Int(clamping: try eventLog.state(in: transaction).unknownEvents) }
  }
}
