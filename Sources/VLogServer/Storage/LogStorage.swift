internal import VLog
internal import VLogWire

/// The slice of ``ServerStorage`` that keeps each account's event log: pushes and pages,
/// repair, retention and verification.
protocol LogStorage: Sendable {
  /// Stores the pushed events not yet in the account's log, in one transaction, redacts the
  /// replaced changes whose `retention` period has passed, then reads the page after `cursor`:
  /// at most `limit` events and `maximumBytes` of encoded events (but at least one), without
  /// the pushed ones.
  ///
  /// A pushed event the log holds is skipped if it is the held one (a retry), and refused
  /// otherwise (`Event.isStored(as:comparingSealedValues:)`).
  ///
  /// - Throws: ``StorageError`` `invalidCursor` for a cursor past the end of the log, and
  ///   `eventCollision` for pushed events held under their ids with other bodies; nothing is
  ///   stored then.
  func sync(
    account: UInt64, pushing events: [Event], comparingSealedValues: Bool, after cursor: UInt64,
    limit: Int, maximumBytes: Int, retention: (period: Duration?, now: Milliseconds)
  ) async throws -> SyncOutcome

  /// The ids the account's log holds in the buckets whose digests differ from `client`'s, up
  /// to `limit` ids (whole buckets, but at least one), and whether that is all of them.
  func compare(account: UInt64, with client: EventSetBuckets, limit: Int) async throws
    -> Comparison

  /// The events of the account's log with these ids, in the order asked, as many as fit in
  /// `maximumBytes` of encoded events (at least one); ids the log does not hold are skipped.
  func events(account: UInt64, ids: [Stamp], maximumBytes: Int) async throws -> [Event]

  /// Redacts, in every account's log, the replaced changes whose retention period has passed
  /// at `now` (wall-clock milliseconds), and removes the blobs that only they used.
  ///
  /// - Returns: The number of changes redacted.
  @discardableResult
  func applyRetention(_ retention: Duration?, now: Milliseconds) async throws -> Int

  /// Checks every account's event log: checksums and encodings, dense sequence numbers, the
  /// id index, digests, erasure, and with a retention period, that no change replaced longer
  /// ago keeps its values.
  func verify(retention: (period: Duration?, now: Milliseconds)) async throws -> ServerVerification

  /// The sequence numbers of the accounts' last events, read at once (one query on a
  /// database): 0 for an empty log or no account.
  func heads(of accounts: [UInt64]) async throws -> [UInt64: UInt64]
}

extension LogStorage {
  /// ``sync(account:pushing:comparingSealedValues:after:limit:maximumBytes:retention:)`` from
  /// a device of this version, which seals an event the same way each time.
  func sync(
    account: UInt64, pushing events: [Event], after cursor: UInt64, limit: Int,
    maximumBytes: Int, retention: (period: Duration?, now: Milliseconds)
  ) async throws -> SyncOutcome {
    try await sync(
      account: account, pushing: events, comparingSealedValues: true, after: cursor,
      limit: limit, maximumBytes: maximumBytes, retention: retention)
  }

  /// The sequence number of the account's last event: 0 for an empty log or no account.
  func head(of account: UInt64) async throws -> UInt64 {
    try await heads(of: [account])[account] ?? 0
  }
}

/// The last sequence number and event-set digest of an account's log.
struct Head: Sendable, Hashable {
  var sequence: UInt64 = 0
  var digest = EventSetDigest.empty
}

/// What one sync call did.
struct SyncOutcome: Sendable {
  /// The events after the cursor, without the pushed ones, at most `limit`.
  var events: [Event]
  /// The sequence of the last entry the page covers.
  var cursor: UInt64
  /// Whether entries remain after `cursor`.
  var more: Bool
  /// How many pushed events were new.
  var stored: Int
  /// The account's head after the push.
  var head: Head
}

/// The paging rule both backends follow, for sync pages and fetched events alike: events in
/// order, at most `events` of them and as many as fit in `bytes` of encoded events, but at
/// least one, so that every call makes progress and a server's memory per request is bounded.
struct PageBudget {
  let events: Int
  let bytes: Int
  private(set) var taken = 0
  private(set) var used = 0

  init(events: Int = .max, bytes: Int) {
    self.events = events
    self.bytes = bytes
  }

  /// Counts an event of `size` encoded bytes if it fits; false if the page ends before it.
  mutating func take(size: Int) -> Bool {
    guard taken == 0 || used + size <= bytes else { return false }
    taken += 1
    used += size
    return true
  }

  /// Whether the page is full.
  var isFull: Bool { taken >= events || used >= bytes }
}
