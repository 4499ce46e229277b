internal import Crypto
internal import Foundation
internal import LMDB

/// How far a rebuild has come.
public struct RebuildProgress: Sendable, Hashable {
  /// Events replayed so far.
  public let replayed: Int
  /// Events in the log.
  public let total: Int
}

/// A digest of a store's projected state: notes, tombstones, attachments, tags and indexes.
///
/// Two replicas that hold the same events have the same state digest, whatever order the events
/// arrived in; a store's digest does not change when its projections are rebuilt. Blobs are
/// not included (a replica fetches them lazily).
public struct StateDigest: Hashable, Sendable, CustomStringConvertible {
  /// The SHA-256 bytes.
  public let bytes: [UInt8]

  /// 64 lowercase hexadecimal digits.
  public var description: String {
    bytes.map { byte in
      let text = String(byte, radix: 16)
      return text.count == 1 ? "0" + text : text
    }.joined()
  }
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
    for database in schema.projections { try transaction.removeAll(in: database) }
    var state = try LogState(schema: schema, in: transaction)
    let total = try transaction.count(in: schema.log)
    var projector = Projector(schema: schema, mergeRule: mergeRule)
    var replayed = 0
    let progressInterval = 10_000
    try transaction.withEntries(in: schema.log) { entries throws in
      while let event = try entries.next({ key, value throws -> Event in
        let sequence = Keys.sequence(from: key)
        return try EventCodec.decode(try LogRecord.event(in: value, sequence: sequence))
      }) {
        try projector.apply(event, in: transaction)
        replayed += 1
        if projector.overlayCount >= Projector.replayOverlayLimit {
          try projector.flush(in: transaction)
        }
        if replayed % progressInterval == 0 {
          progress?(RebuildProgress(replayed: replayed, total: total))
        }
      }
    }
    try projector.flush(in: transaction)
    state.unknownEvents = UInt64(projector.unknownEvents)
    try state.write(schema: schema, in: transaction)
    progress?(RebuildProgress(replayed: replayed, total: total))
    return replayed
  }

  /// The digest of the projected state (see ``StateDigest``).
  public func stateDigest() throws -> StateDigest {
    try read { transaction in try stateDigest(in: transaction) }
  }

  func stateDigest(in transaction: borrowing some Transaction & ~Copyable) throws -> StateDigest {
    var hasher = SHA256()
    for database in schema.projections {
      hasher.update(data: Array((database.name ?? "").utf8) + [0])
      try transaction.forEach(in: database) { key, value in
        var lengths = WireWriter()
        lengths.rawVarint(UInt64(key.count))
        lengths.rawVarint(UInt64(value.count))
        hasher.update(data: lengths.buffer)
        hasher.update(bufferPointer: key)
        hasher.update(bufferPointer: value)
      }
    }
    return StateDigest(bytes: Array(hasher.finalize()))
  }

  /// The order-independent digest of every event in the log (see ``EventSetDigest``).
  public func eventSetDigest() throws -> EventSetDigest {
    try read { transaction in try LogState(schema: schema, in: transaction).digest }
  }

  /// The number of events in the log.
  public func eventCount() throws -> Int {
    try read { try $0.count(in: schema.log) }
  }

  /// The number of events of kinds this version does not know: stored, forwarded, not projected.
  public func unknownEventCount() throws -> Int {
    try read { transaction in Int(try LogState(schema: schema, in: transaction).unknownEvents) }
  }
}

/// Counts, sizes and digests of a store, as `vlog stats` shows them.
public struct StoreStatistics: Sendable, Hashable {
  /// Events in the log.
  public let events: Int
  /// Events of kinds this version does not know.
  public let unknownEvents: Int
  /// Local events not yet acknowledged by a server.
  public let outbox: Int
  /// Visible notes (timeline and archive).
  public let notes: Int
  /// Archived notes.
  public let archivedNotes: Int
  /// Tags in use.
  public let tags: Int
  /// Attachment records.
  public let attachments: Int
  /// Blobs stored.
  public let blobs: Int
  /// Total bytes of the stored blobs.
  public let blobBytes: Int
  /// Tombstones of deleted notes and attachments.
  public let tombstones: Int
  /// Events per replica that made them.
  public let eventsByReplica: [ReplicaID: Int]
  /// The current size of the memory map, in bytes.
  public let mapSize: Int
  /// Bytes of the map in use.
  public let usedBytes: Int
  /// The order-independent digest of the event set.
  public let eventSetDigest: EventSetDigest
  /// The digest of the projected state.
  public let stateDigest: StateDigest
}

extension NoteStore {
  /// Counts, sizes and digests, read in one snapshot. Walks the event index to count events
  /// per replica, so its cost grows with the log.
  public func statistics() throws -> StoreStatistics {
    let info = try VLogError.wrapping { try environment.info() }
    return try read { transaction in
      var byReplica: [ReplicaID: Int] = [:]
      try transaction.forEach(in: schema.eventIndex) { key, _ in
        byReplica[Stamp(bytes: key).replica, default: 0] += 1
      }
      var blobBytes = 0
      try transaction.forEach(in: schema.blobs) { _, value in blobBytes += value.count }
      let state = try LogState(schema: schema, in: transaction)
      var tags = 0
      try transaction.forEach(in: schema.tags) { _, value in
        if try TagRecord(decoding: value).noteCount > 0 { tags += 1 }
      }
      let visible = try transaction.count(in: schema.timeline)
      var archived = 0
      try transaction.forEach(in: schema.timeline, range: .prefix([1])) { _, _ in archived += 1 }
      return StoreStatistics(
        events: try transaction.count(in: schema.log), unknownEvents: Int(state.unknownEvents),
        outbox: Int(state.pendingLocal), notes: visible, archivedNotes: archived, tags: tags,
        attachments: try transaction.count(in: schema.attachments),
        blobs: try transaction.count(in: schema.blobs), blobBytes: blobBytes,
        tombstones: try transaction.count(in: schema.tombstones), eventsByReplica: byReplica,
        mapSize: info.mapSize, usedBytes: info.usedSize, eventSetDigest: state.digest,
        stateDigest: try stateDigest(in: transaction))
    }
  }
}
