internal import Foundation
internal import LMDB
internal import VLog
internal import VLogWire

/// The accounts' event logs: pushes in group commits, pages, and the repair of a device's
/// log (``EventLog`` does the rest).
extension LMDBStorage {
  // MARK: - Event logs

  /// The most pushes that share a commit: enough to take, in one commit, the pushes of far more
  /// clients than a server's cores serve at once, and few enough that a group of the largest
  /// requests stays far below LMDB's limit on a transaction's dirty pages.
  static let maximumPushGroup = 64

  /// Stores the pushed events not yet in the account's log, redacts the replaced changes whose
  /// `retention` period has passed, then reads the page after `cursor`.
  ///
  /// The push is applied in a transaction of its own nested in a group commit's: pushes that
  /// arrive while a commit is in flight share the next one and its sync, each is answered only
  /// once that commit is durable, and one that fails takes back only its own writes.
  ///
  /// - Throws: ``StorageError`` `invalidCursor` for a cursor past the end of the log; nothing is
  ///   stored then.
  func sync(
    account: UInt64, pushing events: [Event], comparingSealedValues: Bool, after cursor: UInt64,
    limit: Int, maximumBytes: Int, retention: (period: Duration?, now: Milliseconds)
  ) async throws -> SyncOutcome {
    let log = eventLog(of: account)
    if events.isEmpty {
      return try read { transaction in
        try page(
          log, state: try log.state(in: transaction), after: cursor,
          limit: (limit, maximumBytes), skipping: [], stored: 0, in: transaction)
      }
    }
    let outcome = try await groupWrite { [self] transaction in
      // An account deleted after the request's token was checked takes nothing more.
      _ = try name(of: account, in: transaction)
      var appender = try log.appender(in: transaction)
      let last = appender.state.lastSequence
      guard cursor <= last else { throw StorageError.invalidCursor(cursor, last) }
      var pushed = Set<Stamp>()
      pushed.reserveCapacity(events.count)
      var collisions: [Stamp] = []
      for event in events where pushed.insert(event.stamp).inserted {
        // Held already: a retry, or another event under the same id, which is refused.
        if let held = try log.event(withID: event.stamp, in: transaction)?.event {
          if !event.isStored(as: held, comparingSealedValues: comparingSealedValues) {
            collisions.append(event.stamp)
          }
          continue
        }
        if collisions.isEmpty { try appender.append(event, local: false, in: transaction) }
      }
      guard collisions.isEmpty else { throw StorageError.eventCollision(collisions) }
      try appender.applyRetention(retention.period, now: retention.now, in: transaction)
      try commit(&appender, account: account, now: retention.now, in: transaction)
      return try page(
        log, state: appender.state, after: cursor, limit: (limit, maximumBytes),
        skipping: pushed, stored: appender.appended, in: transaction)
    }
    if outcome.stored > 0 {
      liveFeed.send(.head(account: account, sequence: outcome.head.sequence))
    }
    return outcome
  }

  /// The sequence numbers of the accounts' last events, in one read transaction; 0 for an
  /// empty log or no account.
  func heads(of accounts: [UInt64]) async throws -> [UInt64: UInt64] {
    try read { transaction in
      var heads: [UInt64: UInt64] = [:]
      for account in accounts where heads[account] == nil {
        heads[account] = try eventLog(of: account).state(in: transaction).lastSequence
      }
      return heads
    }
  }

  /// Signals come from this storage's own writes: there is nothing to listen to.
  func listenForSignals() async {}

  /// The events after `cursor`: at most `limit.events` of them, and as many as fit in
  /// `limit.bytes` of encoded events, but at least one.
  func page(
    _ log: EventLog, state: LogState, after cursor: UInt64, limit: (events: Int, bytes: Int),
    skipping pushed: Set<Stamp>, stored: Int,
    in transaction: borrowing some Transaction & ~Copyable
  ) throws -> SyncOutcome {
    let head = Head(sequence: state.lastSequence, digest: state.digest)
    guard cursor <= head.sequence else { throw StorageError.invalidCursor(cursor, head.sequence) }
    var events: [Event] = []
    var budget = PageBudget(events: limit.events, bytes: limit.bytes)
    var last = cursor
    if cursor < head.sequence, limit.events > 0 {
      try log.forEachSized(after: cursor, through: head.sequence, in: transaction) {
        logged, size in
        if !pushed.contains(logged.event.stamp) {
          guard budget.take(size: size) else { return false }
          events.append(logged.event)
        }
        last = logged.sequence
        return !budget.isFull
      }
    }
    return SyncOutcome(
      events: events, cursor: last, more: last < head.sequence, stored: stored, head: head)
  }

  // MARK: - Repair

  /// The ids the account's log holds in the buckets whose digests differ from `client`'s, up
  /// to `limit` ids (whole buckets, but at least one), and whether that is all of them.
  func compare(account: UInt64, with client: EventSetBuckets, limit: Int) async throws
    -> Comparison
  {
    let log = eventLog(of: account)
    return try read { transaction in
      let digest = try log.state(in: transaction).digest
      let differing = try log.buckets(in: transaction).differing(from: client)
      var ids: [Int: [Stamp]] = [:]
      if !differing.isEmpty {
        for id in try log.ids(inBuckets: Set(differing), in: transaction) {
          ids[EventSetBuckets.bucket(of: id), default: []].append(id)
        }
      }
      return Comparison(differing: differing, ids: ids, limit: limit, eventSetDigest: digest)
    }
  }

  /// The events of the account's log with these ids, in the order asked, as many as fit in
  /// `maximumBytes` of encoded events (at least one); ids the log does not hold are skipped.
  func events(account: UInt64, ids: [Stamp], maximumBytes: Int) async throws -> [Event] {
    let log = eventLog(of: account)
    return try read { transaction in
      var events: [Event] = []
      var budget = PageBudget(bytes: maximumBytes)
      for id in ids {
        guard let event = try log.event(withID: id, in: transaction)?.event else { continue }
        guard budget.take(size: event.encoded().count) else { break }
        events.append(event)
      }
      return events
    }
  }

  /// Commits an account's appender, then writes what its batch decided beyond the log: a
  /// deleted object's key goes with it (the content key that wrapped it is then due to
  /// rotate), and blobs that only erased events used wait out the grace period from `now`
  /// (for an undo), then go.
  func commit(
    _ appender: inout EventLog.Appender, account: UInt64, now: Milliseconds,
    in transaction: borrowing WriteTransaction
  ) throws {
    try appender.commit(in: transaction)
    var erasedKeys = false
    for object in appender.erasedObjects {
      erasedKeys =
        try transaction.delete(forKey: BigEndian.bytes(account) + object.bytes, in: objectKeys)
        || erasedKeys
    }
    if erasedKeys {
      try transaction.put([], forKey: Self.rotationDueKey(account), in: accountKeys)
    }
    for hash in appender.releasedBlobs {
      let key = BigEndian.bytes(account) + hash.bytes
      if try transaction.containsValue(forKey: key, in: blobs) {
        try transaction.put(BigEndian.bytes(now.rawValue), forKey: key, in: releasedBlobs)
      }
    }
  }
}
