internal import LMDB

/// Counts, sizes and digests of a store, as `vlog stats` shows them.
public struct StoreStatistics: Sendable, Hashable {
  /// Events in the log.
  public let events: Int
  /// Events of kinds this version does not know.
  public let unknownEvents: Int
  /// Local events not yet acknowledged by a server.
  public let outbox: Int
  /// Events of the log the projections do not include yet: those of a pull in progress, or
  /// of one a crash cut short in a store opened read-only (see
  /// ``NoteStore/unprojectedEventCount()``).
  public let unprojectedEvents: Int
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
  /// The size of the data file on disk.
  public let fileBytes: Int
  /// Bytes of the data file in free pages: what ``NoteStore/compact(at:options:)`` would give
  /// back. Erased content may survive in free pages until then.
  public let reclaimableBytes: Int
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
      try eventLog.forEachID(in: transaction) { id in byReplica[id.replica, default: 0] += 1 }
      var blobBytes = 0
      try transaction.forEach(in: schema.blobs) { _, value in blobBytes += value.count }
      let state = try eventLog.state(in: transaction)
      var tags = 0
      try transaction.forEach(in: schema.tags) { _, value in
        if try TagRecord(decoding: value).noteCount > 0 { tags += 1 }
      }
      let visible = try transaction.count(in: schema.timeline)
      var archived = 0
      try transaction.forEach(in: schema.timeline, range: .prefix([1])) { _, _ in archived += 1 }
      return StoreStatistics(
        events: try transaction.count(in: schema.log),
        unknownEvents: Int(clamping: state.unknownEvents),
        outbox: Int(clamping: state.pendingLocal),
        unprojectedEvents: Int(
          clamping: try ProjectionLag.unprojected(
            schema: schema, lastSequence: state.lastSequence, in: transaction)),
        notes: visible, archivedNotes: archived,
        tags: tags,
        attachments: try transaction.count(in: schema.attachments),
        blobs: try transaction.count(in: schema.blobs), blobBytes: blobBytes,
        tombstones: try transaction.count(in: schema.tombstones), eventsByReplica: byReplica,
        mapSize: info.mapSize, usedBytes: info.usedSize,
        fileBytes: try environment.dataFileBytes(),
        reclaimableBytes: try environment.reclaimableBytes(
          databases: schema.all, in: transaction),
        eventSetDigest: state.digest,
        stateDigest: try stateDigest(in: transaction))
    }
  }
}
