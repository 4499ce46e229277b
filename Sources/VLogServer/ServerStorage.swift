internal import VLog
internal import VLogWire

/// Where a sync server keeps its data: accounts, sign-in tokens, and per account an event log
/// and its blobs.
///
/// Two implementations keep the same promises: ``LMDBStorage`` (one environment in a data
/// directory, one server process) and ``PostgresStorage`` (one PostgreSQL database, any number
/// of server processes). Both
///
/// - number each account's events 1, 2, 3… in commit order, with no gaps: a reader that sees
///   number n sees every number before it, so a cursor never skips an event;
/// - store a push all or nothing, each event id at most once per account;
/// - erase what was deleted in the transaction that stores the deletion — an encrypted
///   account's key of the object too, marking a rotation due — and redact replaced
///   changes past the retention period on each push (see `EventLog+Erasure.swift` and
///   `EventLog+Retention.swift` in the engine: the same rules, the same redacted bytes);
/// - keep each account's event-set digest equal to the digest of the ids its log holds.
///
/// The server's tests run against both (`Backend` in the test support).
protocol ServerStorage: Sendable {
  /// `lmdb` or `postgres`, for the health answer and logs.
  var backend: String { get }

  /// Creates an account: end-to-end encrypted if it has `encryption`, with that record of its
  /// keys.
  ///
  /// - Throws: ``StorageError`` `accountExists` if the name is taken.
  func createAccount(named name: String, password: PasswordHash, encryption: EncryptionRecord?)
    async throws

  /// What an encrypted account's devices need of its keys; nil for an account that is not
  /// encrypted (or does not exist).
  func encryption(of account: UInt64) async throws -> EncryptionRecord?

  /// Stores keys of an encrypted account's notes and attachments, wrapped by its content key
  /// of `epoch`, in one transaction. An object that holds a key keeps it (its events are
  /// sealed by it); an object whose deletion the log holds takes none.
  ///
  /// - Returns: How many keys were stored.
  /// - Throws: ``StorageError`` `keysChanged` if the account's epoch is not `epoch` (or it is
  ///   not encrypted); nothing is stored then.
  func storeObjectKeys(_ keys: [Identifier: [UInt8]], account: UInt64, epoch: UInt64)
    async throws -> Int

  /// The keys of `objects` the account holds, and the epoch that wrapped them, read at once.
  func objectKeys(of objects: [Identifier], account: UInt64) async throws -> ObjectKeyPage

  /// The account's keys in order of the objects' ids, after `after`: at most `limit`.
  func objectKeys(account: UInt64, after: Identifier?, limit: Int) async throws -> ObjectKeyPage

  /// Rotates an encrypted account's content key, in one transaction: the next epoch's record
  /// and link (none for a re-keying), the new recovery key with `recoverySecret` (its secret
  /// hashed) if the rotation replaces it, and every object key replaced by the rotation's. A
  /// re-keying also signs out every session of the account but the one whose token hash is
  /// `keeping`, as a password change does.
  ///
  /// - Returns: The new record.
  /// - Throws: ``StorageError`` `keysChanged` if the account's epoch is not the rotation's, or
  ///   the rotation lacks the key of an object the account holds one of; nothing changes then.
  func rotateKeys(
    account: UInt64, by rotation: KeyRotation.Checked, recoverySecret: PasswordHash?,
    keeping: [UInt8]?
  ) async throws
    -> EncryptionRecord

  /// The links of an encrypted account's epochs after `epoch`, in order: each the next
  /// content key sealed by the one before.
  func links(account: UInt64, after epoch: UInt64) async throws -> [[UInt8]]

  /// The account stored under a normalised user name.
  func account(named name: String) async throws -> AccountRecord?

  /// An account, by number.
  func account(number: UInt64) async throws -> AccountRecord?

  /// Replaces an account's password and revokes every token of it but the one whose hash is
  /// `keeping`, in one transaction; for an encrypted account, replaces its keys' seal to the
  /// password with `seal` in the same transaction.
  ///
  /// - Throws: ``StorageError`` `accountDeleted` if the account no longer exists, `keysChanged`
  ///   if `seal` is not at the account's epoch (nothing changes then).
  func setPassword(
    account: UInt64, password: PasswordHash, keeping: [UInt8]?, seal: PasswordSeal.Checked?
  ) async throws

  /// 32 random bytes made the first time any instance asks and the same ever after, for every
  /// instance on this storage: what the answers about names no account has are drawn from,
  /// so that they are the same every time without telling the name is unknown.
  func serverSecret() async throws -> [UInt8]

  /// Replaces an account's password hash with the same password's hash at another cost (a
  /// rehash at sign-in), if the stored hash is still `current`: a password changed meanwhile
  /// wins. Tokens and keys are untouched.
  ///
  /// - Returns: Whether the hash was replaced.
  func rehashPassword(account: UInt64, from current: PasswordHash, to new: PasswordHash)
    async throws -> Bool

  /// Deletes an account and everything of it — events and their indexes, blobs, tokens, the
  /// account record — in one transaction. Pushes and uploads that were authorised before and
  /// arrive after it store nothing. The account's number is never given again.
  ///
  /// - Throws: ``StorageError`` `accountDeleted` if the account no longer exists.
  func deleteAccount(_ account: UInt64) async throws

  /// An account's tokens, expired ones included.
  func tokens(of account: UInt64) async throws -> [TokenRecord]

  /// Stores the hash of a new token.
  ///
  /// - Throws: ``StorageError`` `accountDeleted` if the account no longer exists.
  func storeToken(hash: [UInt8], account: UInt64, expiresAt milliseconds: Int64) async throws

  /// A token, by its hash.
  func token(hash: [UInt8]) async throws -> TokenRecord?

  /// The tokens of `hashes` that exist, read at once (one query on a database): what
  /// resynchronizing every live channel checks.
  func tokens(hashes: [[UInt8]]) async throws -> [TokenRecord]

  /// Revokes a token. Returns whether it existed.
  @discardableResult
  func deleteToken(hash: [UInt8]) async throws -> Bool

  /// Stores the pushed events not yet in the account's log, in one transaction, redacts the
  /// replaced changes whose `retention` period has passed, then reads the page after `cursor`:
  /// at most `limit` events and `maximumBytes` of encoded events (but at least one), without
  /// the pushed ones.
  ///
  /// - Throws: ``StorageError`` `invalidCursor` for a cursor past the end of the log; nothing is
  ///   stored then.
  func sync(
    account: UInt64, pushing events: [Event], after cursor: UInt64, limit: Int,
    maximumBytes: Int, retention: (period: Duration?, now: UInt64)
  ) async throws -> SyncOutcome

  /// The ids the account's log holds in the buckets whose digests differ from `client`'s, up
  /// to `limit` ids (whole buckets, but at least one), and whether that is all of them.
  func compare(account: UInt64, with client: EventSetBuckets, limit: Int) async throws
    -> Comparison

  /// The events of the account's log with these ids, in the order asked, as many as fit in
  /// `maximumBytes` of encoded events (at least one); ids the log does not hold are skipped.
  func events(account: UInt64, ids: [Stamp], maximumBytes: Int) async throws -> [Event]

  /// Stores an account's blob. Returns false if it was already stored; a released one then
  /// waits a whole grace period again from `now` (wall-clock milliseconds).
  func storeBlob(_ bytes: [UInt8], hash: BlobHash, account: UInt64, now: UInt64) async throws
    -> Bool

  /// An account's blob.
  func blob(_ hash: BlobHash, account: UInt64) async throws -> [UInt8]?

  /// The hashes among `hashes` whose blobs the account does not hold, or holds released
  /// (no event uses them) since before `releasedBefore`, in the order given.
  func missingBlobs(_ hashes: [BlobHash], account: UInt64, releasedBefore: UInt64) async throws
    -> [BlobHash]

  /// Removes the blobs released before `releasedBefore` (wall-clock milliseconds) that no
  /// event uses again, and keeps, no longer released, those an event uses again.
  ///
  /// - Returns: The number of blobs removed.
  func sweepReleasedBlobs(releasedBefore: UInt64) async throws -> Int

  /// The throttle counters kept under `keys` (``ThrottleKey/stored(secret:)``), of those that
  /// have one.
  func throttleCounts(_ keys: [[UInt8]]) async throws -> [[UInt8]: ThrottleCount]

  /// Counts once more under each key, in one transaction: a key with no counter, or whose
  /// counter's window has passed at `now`, starts again at 1 from `now`.
  func countThrottle(_ keys: [(key: [UInt8], window: UInt64)], now: UInt64) async throws

  /// Forgets the counters under `keys`.
  func clearThrottle(_ keys: [[UInt8]]) async throws

  /// Removes the counters whose window began before `firstBefore`.
  ///
  /// - Returns: The number removed.
  func sweepThrottles(firstBefore: UInt64) async throws -> Int

  /// Redacts, in every account's log, the replaced changes whose retention period has passed
  /// at `now` (wall-clock milliseconds), and removes the blobs that only they used.
  ///
  /// - Returns: The number of changes redacted.
  @discardableResult
  func applyRetention(_ retention: Duration?, now: UInt64) async throws -> Int

  /// Checks every account's event log: checksums and encodings, dense sequence numbers, the
  /// id index, digests, erasure, and with a retention period, that no change replaced longer
  /// ago keeps its values.
  func verify(retention: (period: Duration?, now: UInt64)) async throws -> ServerVerification

  /// The sequence numbers of the accounts' last events, read at once (one query on a
  /// database): 0 for an empty log or no account.
  func heads(of accounts: [UInt64]) async throws -> [UInt64: UInt64]

  /// Where the storage sends a ``LiveSignal`` for each committed write that live channels must
  /// hear of — a log that grew, a session that ended — whichever server made it.
  var liveFeed: LiveFeed { get }

  /// Hears the signals of every server of this storage and sends them to ``liveFeed``, until
  /// cancelled: on PostgreSQL, `LISTEN` on a connection of its own, listening again after the
  /// connection is lost (and then sending ``LiveSignal/resynchronize``); on LMDB, whose one
  /// server sends its own signals, nothing.
  func listenForSignals() async

  /// Whether the storage can serve requests now (the database answers).
  func isReady() async -> Bool

  /// Releases the storage (a database's connections close in the background). Requests after
  /// this fail.
  func close()
}

extension ServerStorage {
  /// Replaces a clear account's password.
  func setPassword(account: UInt64, password: PasswordHash, keeping: [UInt8]?) async throws {
    try await setPassword(account: account, password: password, keeping: keeping, seal: nil)
  }

  /// Creates an account that is not encrypted.
  func createAccount(named name: String, password: PasswordHash) async throws {
    try await createAccount(named: name, password: password, encryption: nil)
  }

  /// The sequence number of the account's last event: 0 for an empty log or no account.
  func head(of account: UInt64) async throws -> UInt64 {
    try await heads(of: [account])[account] ?? 0
  }
}

/// An account as storage keeps it.
struct AccountRecord: Sendable, Equatable {
  /// The account's number: what every key of its data starts with, never given again.
  var number: UInt64
  /// The normalised user name.
  var name: String
  /// The password's scrypt hash.
  var password: PasswordHash
}

/// Object keys read from storage, with the epoch of the content key that wrapped them.
struct ObjectKeyPage: Sendable, Equatable {
  /// The account's epoch when they were read.
  var epoch: UInt64
  /// The keys, by object.
  var keys: [Identifier: [UInt8]]
  /// Whether a listing has more after these.
  var more = false
}

/// A sign-in token as storage keeps it: only its hash.
struct TokenRecord: Sendable, Hashable {
  /// The SHA-256 of the token.
  var hash: [UInt8]
  /// The account it signs in.
  var account: UInt64
  /// When it stops working, in milliseconds since 1970.
  var expiresAt: Int64
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
