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
///
/// Each area of the server takes only its slice: ``AccountStorage``, ``SessionStorage``,
/// ``KeyStorage``, ``LogStorage``, ``BlobStorage``, ``ThrottleStorage`` and ``SignalStorage``.
protocol ServerStorage: AccountStorage, SessionStorage, KeyStorage, LogStorage, BlobStorage,
  ThrottleStorage, SignalStorage
{
  /// `lmdb` or `postgres`, for the health answer and logs.
  var backend: String { get }

  /// Whether the storage can serve requests now (the database answers).
  func isReady() async -> Bool

  /// Releases the storage (a database's connections close in the background). Requests after
  /// this fail.
  func close()
}
