internal import Foundation
internal import Logging
internal import NIOCore
internal import NIOSSL
internal import PostgresNIO
internal import Synchronization
internal import VLog
internal import VLogWire

/// The server's data in a PostgreSQL database, shared by any number of server processes.
///
/// | table | key | columns |
/// |---|---|---|
/// | `vlog_schema` | one row | the schema's version |
/// | `vlog_accounts` | `number` (bigserial) | `name` (unique, normalised), `password` (scrypt parameters, salt, hash) |
/// | `vlog_tokens` | `hash` (SHA-256 of the token) | `account`, `expires_at` (ms) |
/// | `vlog_heads` | `account` | `last_sequence`, `digest`: the log's head, locked by each push |
/// | `vlog_events` | `account`, `sequence` | `id` (unique per account), `record`: checksum + the event in the engine's encoding |
/// | `vlog_objects` | `account`, `object`, `sequence` | the events that change a note, attachment or tag |
/// | `vlog_deletions` | `account`, `object` | `sequence` of a note's or attachment's first deletion, `stamp` of a tag's latest |
/// | `vlog_blob_references` | `account`, `hash`, `sequence` | the `attachmentAdded` events, not redacted, that name a blob |
/// | `vlog_fields` | `account`, `note`, `field` | `stamp`, `sequence` of the field's newest change |
/// | `vlog_superseded` | `account`, `replaced_at`, `sequence` | replaced changes awaiting redaction |
/// | `vlog_blobs` | `account`, `hash` | `released_at` (when the last event using it was erased; null while one does), `bytes` (bytea: blobs are at most the engine's 64 MiB attachment limit, under bytea's 1 GiB, and go with their account's rows in one transaction and one backup) |
/// | `vlog_account_keys` | `account` | `record` (an encrypted account's ``EncryptionRecord``), `rotation_due` |
/// | `vlog_object_keys` | `account`, `object` | `wrapped`: a note's or attachment's key, wrapped by the content key |
/// | `vlog_key_links` | `account`, `epoch` | `link`: the content key of the epoch after, wrapped by this epoch's |
/// | `vlog_server_secret` | one row | `secret`: what answers about unknown names are drawn from |
/// | `vlog_throttle` | `key` (``ThrottleKey``, 16 bytes) | `count`, `first`, `last` (ms), `span`: the window, in ms |
///
/// Sequence numbers are gapless and in commit order per account: a push locks the account's
/// `vlog_heads` row (`SELECT … FOR UPDATE`), numbers its events after the head and moves the
/// head in the same transaction. Readers read the head first, then only events up to it: every
/// event at or below a committed head is committed, so a cursor never passes an event that
/// commits later. No advisory locks and no sequences are used, so databases that speak
/// PostgreSQL's protocol and row locks can hold the data too.
///
/// The schema is created or migrated when a server opens the database, in one transaction that
/// locks the `vlog_schema` row: servers starting together wait for one another, and a server
/// refuses a database whose schema is newer than it knows.
final class PostgresStorage: ServerStorage {
  /// The schema version this server writes.
  static let schemaVersion: Int32 = 8

  let client: PostgresClient
  let runner: Task<Void, Never>
  let logger: Logger
  /// A description of the database for messages, without the password.
  let location: String
  /// The rules the accounts' logs follow: ``LogRules/standard`` but in tests.
  let logRules: LogRules
  /// How long one call to the database may take, from asking for a connection to its last
  /// answer.
  let databaseTimeout: Duration
  /// How long a call waits for a connection before it fails `unavailable`: at most
  /// ``databaseTimeout``.
  let connectionWait: Duration
  /// Where the signals heard on `LISTEN` go (see ``listenForSignals()``).
  let liveFeed = LiveFeed()

  private init(
    client: PostgresClient, runner: Task<Void, Never>, location: String, logRules: LogRules,
    databaseTimeout: Duration, connectionWait: Duration, logger: Logger
  ) {
    self.databaseTimeout = databaseTimeout
    self.connectionWait = min(connectionWait, databaseTimeout)
    self.logRules = logRules
    self.client = client
    self.runner = runner
    self.location = location
    self.logger = logger
  }

  /// Connects to the database at `url`, then creates or migrates the schema.
  ///
  /// - Throws: ``StorageError`` for a URL that is not a PostgreSQL URL, a database that cannot
  ///   be reached, or a schema newer than this server's.
  static func open(
    url: String, maximumConnections: Int, logRules: LogRules = .standard,
    databaseTimeout: Duration = .seconds(10), connectionWait: Duration = .seconds(5),
    logger: Logger
  ) async throws -> PostgresStorage {
    let location = try DatabaseURL(url)
    var configuration = location.configuration
    // One more for `LISTEN`, which a running server holds (``listenForSignals()``).
    configuration.options.maximumConnections = max(1, maximumConnections) + 1
    configuration.options.connectTimeout = .seconds(5)
    // Every statement of a sync is prepared (``HeadQuery`` and the others), its values in
    // arrays and bound: plan each once per connection. With the default, PostgreSQL plans an
    // array-bound statement again at every call, judging its generic plan too costly, and
    // planning was a fifth of its CPU under load. Every one of them reads by an index that
    // starts with the account, whatever the values.
    configuration.options.additionalStartupParameters.append(
      ("plan_cache_mode", "force_generic_plan"))
    var backgroundLogger = logger
    backgroundLogger.logLevel = max(logger.logLevel, .warning)
    let client = PostgresClient(configuration: configuration, backgroundLogger: backgroundLogger)
    let runner = Task { await client.run() }
    let storage = PostgresStorage(
      client: client, runner: runner, location: location.description, logRules: logRules,
      databaseTimeout: databaseTimeout, connectionWait: connectionWait, logger: logger)
    do {
      try await storage.migrate()
      return storage
    } catch {
      storage.close()
      throw StorageError.unusable(
        "cannot use the database \(location.description): \(Self.describe(error))")
    }
  }

  func close() { runner.cancel() }

  var backend: String { "postgres" }

  func isReady() async -> Bool {
    do {
      // As long as a request waits for a connection before it is answered 503.
      return try await withDeadline(connectionWait) {
        [client, logger] in
        try await client.query("SELECT 1", logger: logger)
        return true
      }
    } catch {
      return false
    }
  }
}
