internal import Crypto
internal import LMDB

/// An event with its position in this store's log.
public struct LoggedEvent: Sendable, Hashable {
  /// The event's local sequence number: its position in this store's log, from 1.
  public let sequence: UInt64
  /// The event.
  public let event: Event
}

/// What ingesting a batch of events did.
public struct IngestResult: Sendable, Hashable {
  /// Events appended to the log.
  public let appended: Int
  /// Events skipped because the log already had them.
  public let duplicates: Int
  /// Appended events of kinds this version does not know: stored and forwarded, not projected.
  public let unknownKinds: Int
  /// What the batch changed.
  public let changes: ChangeSet
}

extension NoteStore {
  /// Ingests events from another replica (sync or import), in one transaction.
  ///
  /// Each event keeps its own stamp; an event the log already has is skipped, so ingesting is
  /// idempotent and batches may overlap. The clock advances past every stamp ingested. Events
  /// of unknown kinds are stored (and forwarded) but not projected. Observers get a
  /// ``ChangeSet`` with source ``ChangeSet/Source/sync``.
  ///
  /// A sync client passes `acknowledgingThrough` to record, in the same commit, that the server
  /// stored the local events it pushed (see ``acknowledge(through:)``): one durable commit per
  /// sync call instead of two. With no events and nothing to acknowledge, nothing is written.
  ///
  /// - Parameters:
  ///   - events: The events, in any order, with duplicates allowed.
  ///   - sequence: Also acknowledge every local event up to this sequence number.
  /// - Returns: What was appended and what changed.
  /// - Throws: ``VLogError`` naming the first invalid event, or
  ///   ``VLogError/Code/invalidValue`` for a sequence number beyond the log; then nothing of the
  ///   batch is committed.
  @discardableResult
  public func ingest(_ events: [Event], acknowledgingThrough sequence: UInt64? = nil) throws
    -> IngestResult
  {
    for (index, event) in events.enumerated() {
      do {
        try event.validate()
      } catch {
        throw VLogError(error.code, "event \(index + 1) (\(event.stamp)): \(error.message)")
      }
    }
    guard !events.isEmpty || sequence != nil else {
      return IngestResult(
        appended: 0, duplicates: 0, unknownKinds: 0,
        changes: ChangeSet.Builder().build(source: .sync, eventCount: 0))
    }
    let (result, changeSet) = try VLogError.wrapping {
      try environment.write { transaction throws -> (IngestResult, ChangeSet) in
        var session = try WriteSession(store: self, in: transaction)
        if let sequence {
          _ = try acknowledge(through: sequence, state: &session.state, in: transaction)
        }
        var duplicates = 0
        var unknown = 0
        for event in events {
          if try transaction.containsValue(forKey: event.stamp.bytes, in: schema.eventIndex) {
            duplicates += 1
            continue
          }
          if !event.change.kind.isKnown { unknown += 1 }
          try session.append(event, local: false, in: transaction)
        }
        let changeSet = try session.finish(source: .sync, in: transaction)
        return (
          IngestResult(
            appended: session.appended, duplicates: duplicates, unknownKinds: unknown,
            changes: changeSet),
          changeSet
        )
      }
    }
    if result.appended > 0 { observers.publish(changeSet) }
    return result
  }

  /// Ingests events from another replica on the store's writer queue. See
  /// ``ingest(_:acknowledgingThrough:)``.
  @discardableResult
  public func ingest(_ events: [Event], acknowledgingThrough sequence: UInt64? = nil)
    async throws -> IngestResult
  {
    try await onWriter { try self.ingest(events, acknowledgingThrough: sequence) }
  }

  // MARK: - Outbox

  /// Local events not yet acknowledged by the server, oldest first.
  ///
  /// - Parameter limit: The most events to return.
  public func outbox(limit: Int = .max) throws -> [LoggedEvent] {
    try read { transaction in
      let state = try LogState(schema: schema, in: transaction)
      let wanted = min(limit, Int(clamping: state.pendingLocal))
      var pending: [LoggedEvent] = []
      guard wanted > 0 else { return pending }
      try transaction.withEntries(
        in: schema.log, range: .from(Keys.sequence(state.acknowledged + 1))
      ) { entries throws in
        while pending.count < wanted,
          let logged = try entries.next({ key, value throws -> LoggedEvent in
            try Self.decodeLogEntry(key, value)
          })
        {
          if logged.event.stamp.replica == replicaID { pending.append(logged) }
        }
      }
      return pending
    }
  }

  /// The number of local events not yet acknowledged.
  public func outboxCount() throws -> Int {
    try read { transaction in Int(try LogState(schema: schema, in: transaction).pendingLocal) }
  }

  /// Marks every local event up to a sequence number as stored by the server, removing them
  /// from the outbox.
  ///
  /// The sync client sends the outbox oldest first, so the events a server confirms are always
  /// a prefix of it: acknowledge through the sequence number of the last one sent.
  ///
  /// - Parameter sequence: The sequence number of the last event the server confirmed.
  /// - Returns: How many events left the outbox.
  /// - Throws: ``VLogError/Code/invalidValue`` for a sequence number beyond the log.
  @discardableResult
  public func acknowledge(through sequence: UInt64) throws -> Int {
    try VLogError.wrapping {
      try environment.write { transaction throws -> Int in
        var state = try LogState(schema: schema, in: transaction)
        let watermark = state.acknowledged
        let removed = try acknowledge(through: sequence, state: &state, in: transaction)
        if state.acknowledged != watermark { try state.write(schema: schema, in: transaction) }
        return removed
      }
    }
  }

  /// Moves the outbox watermark in `state`; the caller writes `state`.
  private func acknowledge(
    through sequence: UInt64, state: inout LogState, in transaction: borrowing WriteTransaction
  ) throws -> Int {
    guard sequence < state.nextSequence else {
      throw VLogError(
        .invalidValue,
        "cannot acknowledge through event \(sequence): the log ends at \(state.nextSequence - 1)"
      )
    }
    guard sequence > state.acknowledged else { return 0 }
    var removed = 0
    try transaction.forEach(
      in: schema.log,
      range: .from(Keys.sequence(state.acknowledged + 1), through: Keys.sequence(sequence))
    ) { key, value in
      if try Self.decodeLogEntry(key, value).event.stamp.replica == replicaID { removed += 1 }
    }
    state.pendingLocal -= UInt64(removed)
    state.acknowledged = state.pendingLocal == 0 ? state.nextSequence - 1 : sequence
    return removed
  }

  static func decodeLogEntry(
    _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer
  ) throws -> LoggedEvent {
    let sequence = Keys.sequence(from: key)
    return LoggedEvent(
      sequence: sequence,
      event: try EventCodec.decode(try LogRecord.event(in: value, sequence: sequence)))
  }

  // MARK: - The log

  /// Events in log order, after a sequence number.
  ///
  /// - Parameters:
  ///   - sequence: Return events after this one (0 for the first).
  ///   - limit: The most events to return.
  public func events(after sequence: UInt64 = 0, limit: Int = .max) throws -> [LoggedEvent] {
    var result: [LoggedEvent] = []
    try forEachEvent(after: sequence) { logged in
      result.append(logged)
      return result.count < limit
    }
    return result
  }

  /// Calls `body` with each event in log order after `sequence`, in one read transaction,
  /// until `body` returns false.
  public func forEachEvent(
    after sequence: UInt64 = 0, _ body: (LoggedEvent) throws -> Bool
  ) throws {
    try read { transaction in
      try transaction.withEntries(in: schema.log, range: .from(Keys.sequence(sequence + 1))) {
        entries throws in
        while let logged = try entries.next({ key, value throws -> LoggedEvent in
          try Self.decodeLogEntry(key, value)
        }) {
          guard try body(logged) else { return }
        }
      }
    }
  }

  /// The event with this id, if the log has it.
  public func event(withID id: Stamp) throws -> LoggedEvent? {
    try read { transaction in
      guard
        let sequence = try transaction.withValue(
          forKey: id.bytes, in: schema.eventIndex, { $0.map(Keys.sequence(from:)) })
      else { return nil }
      return try loggedEvent(at: sequence, in: transaction)
    }
  }

  /// The sequence number of the last event in the log, or 0 if it is empty.
  public func lastSequence() throws -> UInt64 {
    try read { transaction in
      try transaction.withCursor(on: schema.log) { cursor throws -> UInt64 in
        try cursor.last() ? try cursor.withCurrent { key, _ in Keys.sequence(from: key) } : 0
      }
    }
  }

  func loggedEvent(at sequence: UInt64, in transaction: borrowing some Transaction & ~Copyable)
    throws -> LoggedEvent?
  {
    let key = Keys.sequence(sequence)
    return try transaction.withValue(forKey: key, in: schema.log) { value throws -> LoggedEvent? in
      guard let value else { return nil }
      return try key.withUnsafeBytes { key in try Self.decodeLogEntry(key, value) }
    }
  }

  // MARK: - Blobs

  /// Stores the bytes of an attachment received out of band, after checking them against their
  /// hash. Storing bytes already present does nothing.
  ///
  /// - Throws: ``VLogError/Code/blobMismatch`` if the bytes' SHA-256 is not `hash`.
  public func storeBlob(_ bytes: [UInt8], hash: BlobHash) throws {
    let actual = BlobHash(bytes: Array(SHA256.hash(data: bytes)))!
    guard actual == hash else {
      throw VLogError(
        .blobMismatch, "the bytes' SHA-256 is \(actual), not \(hash); nothing was stored")
    }
    try VLogError.wrapping {
      try environment.write { transaction in
        guard try !transaction.containsValue(forKey: hash.bytes, in: schema.blobs) else { return }
        try transaction.put(bytes, forKey: hash.bytes, in: schema.blobs)
      }
    }
  }

  /// The bytes stored under a hash, if present.
  public func blob(_ hash: BlobHash) throws -> [UInt8]? {
    try read { try $0.value(forKey: hash.bytes, in: schema.blobs) }
  }

  /// The bytes of an attachment.
  ///
  /// - Throws: ``VLogError/Code/attachmentNotFound`` for an unknown attachment,
  ///   ``VLogError/Code/blobMissing`` when its bytes have not been downloaded yet.
  public func attachmentData(_ id: AttachmentID) throws -> [UInt8] {
    guard let attachment = try attachment(id) else {
      throw VLogError(.attachmentNotFound, "there is no attachment \(id)")
    }
    guard let bytes = try blob(attachment.blobHash) else {
      throw VLogError(
        .blobMissing,
        "the bytes of attachment \(id) (sha256 \(attachment.blobHash)) are not in this store yet")
    }
    return bytes
  }

  /// Hashes of attachments whose bytes this store does not have, to download.
  public func missingBlobs() throws -> [BlobHash] {
    try read { transaction in
      var hashes = Set<BlobHash>()
      try transaction.forEach(in: schema.attachments) { key, value in
        let record = try AttachmentRecord(
          id: AttachmentID(Identifier(bytes: key)), decoding: value)
        guard try !schema.hasTombstone(record.attachment.noteID.identifier, in: transaction)
        else { return }
        hashes.insert(record.attachment.blobHash)
      }
      return try hashes.filter {
        try !transaction.containsValue(forKey: $0.bytes, in: schema.blobs)
      }
      .sorted { $0.description < $1.description }
    }
  }

  /// Runs `body` in a read transaction, turning LMDB's errors into ``VLogError``s.
  func read<R>(_ body: (borrowing ReadTransaction) throws -> R) throws -> R {
    try VLogError.wrapping { try environment.read(body) }
  }
}
