internal import LMDB

#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Darwin)
  internal import Darwin
#endif

/// A store's replica id, which must be its own: two devices that share one stamp their new
/// events alike, and where two events get one id, a server keeps one and drops the other.
///
/// Copies share it: a phone restored from its backup, a home folder copied to a new laptop, a
/// cloned virtual machine, a device restored from its own older backup. So a store takes a new
/// replica id when it finds it was copied, and when a server says another device pushed events
/// under its ids:
/// - opened for writing, a store compares its file's identity (the inode of `data.mdb`) with
///   the one it recorded: a copied or restored file is another file, and the store takes a
///   new replica id before it writes (its events from before the copy keep theirs);
/// - a copy the file cannot tell (a cloned disk) is told by the server, which refuses a pushed
///   event held under its id with another body (`eventCollision`): the sync client then calls
///   ``NoteStore/renewReplica()``.
extension NoteStore {
  /// Takes a new replica id and gives it to this store's changes the server has not
  /// acknowledged: each keeps its time, its place in the log and its change, and changes made
  /// here after it that name it name it under its new id. The projections are replayed, since
  /// a new id breaks ties between equal times differently.
  ///
  /// The sync client calls this when a server refuses the outbox with `eventCollision`: another
  /// device shares this store's replica id and pushed other events under the same ids. The
  /// events were never acknowledged, so no other replica holds them under the old ids.
  ///
  /// - Returns: Each moved event's old and new stamp, in log order.
  @discardableResult
  public func renewReplica() throws -> [RestampedEvent] {
    try restampingOutbox { log, old, transaction in
      let new = try Self.renewReplica(schema: schema, dependencies: dependencies, in: transaction)
      return try log.moveOutbox(from: old, to: new, in: transaction)
    }
  }

  /// `renewReplica()` on the store's writer queue.
  @discardableResult
  public func renewReplica() async throws -> [RestampedEvent] {
    try await onWriter { try self.renewReplica() }
  }

  /// The replica id as the store's meta database holds it in `transaction`: another process
  /// of the same store may have renewed it.
  func replica(in transaction: borrowing some Transaction & ~Copyable) throws -> ReplicaID {
    let replica = try Self.storedReplica(schema: schema, in: transaction)
    currentReplica.withLock { $0 = replica }
    return replica
  }

  /// The replica id the meta database of `schema` holds.
  static func storedReplica(
    schema: Schema, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> ReplicaID {
    guard let bytes = try transaction.value(forKey: Keys.Meta.replica, in: schema.meta),
      bytes.count == 16
    else { throw VLogError(.corruptStore, "the store has no replica id") }
    return ReplicaID(bytes.withUnsafeBytes { Identifier(bytes: $0) })
  }

  /// The store's replica ids in `transaction`: its own, and those it had before it took a
  /// new one, whose unacknowledged events are still its outbox.
  func localReplicas(in transaction: borrowing some Transaction & ~Copyable) throws -> Set<
    ReplicaID
  > {
    var replicas = try Self.formerReplicas(schema: schema, in: transaction)
    replicas.insert(try replica(in: transaction))
    return replicas
  }

  /// ``localReplicas(in:)`` of the store whose databases are `schema`.
  static func localReplicas(
    schema: Schema, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> Set<ReplicaID> {
    var replicas = try formerReplicas(schema: schema, in: transaction)
    if let facts = try storedFacts(schema: schema, in: transaction) {
      replicas.insert(facts.replica)
    }
    return replicas
  }

  /// The replica ids the store had before its own, as the meta database keeps them.
  private static func formerReplicas(
    schema: Schema, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> Set<ReplicaID> {
    guard let bytes = try transaction.value(forKey: Keys.Meta.formerReplicas, in: schema.meta)
    else { return [] }
    guard bytes.count % 16 == 0 else {
      throw VLogError(.corruptStore, "the store's former replica ids are malformed")
    }
    return bytes.withUnsafeBytes { buffer in
      Set(
        stride(from: 0, to: buffer.count, by: 16).map {
          ReplicaID(Identifier(bytes: buffer, at: $0))
        })
    }
  }

  /// A new replica id, written to the meta database; the one before joins the former ones.
  static func renewReplica(
    schema: Schema, dependencies: Dependencies, in transaction: borrowing WriteTransaction
  ) throws -> ReplicaID {
    var former = try transaction.value(forKey: Keys.Meta.formerReplicas, in: schema.meta) ?? []
    if let old = try transaction.value(forKey: Keys.Meta.replica, in: schema.meta) {
      former += old
    }
    try transaction.put(former, forKey: Keys.Meta.formerReplicas, in: schema.meta)
    let replica = ReplicaID(dependencies.makeIdentifier())
    try transaction.put(replica.identifier.bytes, forKey: Keys.Meta.replica, in: schema.meta)
    return replica
  }

  /// The store's replica id on a writable open: a new one if the store's file is not the one
  /// it recorded (a copy, or a restored backup), and the file recorded.
  ///
  /// - Parameter adopting: Record the file as the store's own without a new id: the file
  ///   compaction just wrote in place of the store's.
  static func checkedReplica(
    _ replica: ReplicaID, path: String, schema: Schema, dependencies: Dependencies,
    adopting: Bool, in transaction: borrowing WriteTransaction
  ) throws -> ReplicaID {
    guard let identity = fileIdentity(of: path) else { return replica }
    let recorded = try transaction.value(forKey: Keys.Meta.file, in: schema.meta)
    guard recorded != identity else { return replica }
    try transaction.put(identity, forKey: Keys.Meta.file, in: schema.meta)
    // A store that recorded none is new, or from a version before: its file is its own.
    guard recorded != nil, !adopting else { return replica }
    return try renewReplica(schema: schema, dependencies: dependencies, in: transaction)
  }

  /// The identity of the store's data file: its inode number, which a copy of the file does
  /// not keep; nil if it cannot be read.
  static func fileIdentity(of path: String) -> [UInt8]? {
    var status = stat()
    guard stat(path + "/data.mdb", &status) == 0 else { return nil }
    return BigEndian.bytes(UInt64(status.st_ino))
  }
}
