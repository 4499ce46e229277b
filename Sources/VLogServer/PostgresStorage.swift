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
/// | `vlog_blobs` | `account`, `hash` | `bytes` (bytea: blobs are at most the engine's 64 MiB attachment limit, under bytea's 1 GiB, and go with their account's rows in one transaction and one backup) |
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
  static let schemaVersion: Int32 = 2

  let client: PostgresClient
  private let runner: Task<Void, Never>
  private let logger: Logger
  /// A description of the database for messages, without the password.
  let location: String
  /// The rules the accounts' logs follow: ``LogRules/standard`` but in tests.
  private let logRules: LogRules

  private init(
    client: PostgresClient, runner: Task<Void, Never>, location: String, logRules: LogRules,
    logger: Logger
  ) {
    self.logRules = logRules
    self.client = client
    self.runner = runner
    self.location = location
    self.logger = logger
  }

  /// Connects to the database at `url`, then creates or migrates the schema.
  ///
  /// - Throws: ``ServerError`` for a URL that is not a PostgreSQL URL, a database that cannot
  ///   be reached, or a schema newer than this server's.
  static func open(
    url: String, maximumConnections: Int, logRules: LogRules = .standard, logger: Logger
  ) async throws -> PostgresStorage {
    let location = try DatabaseURL(url)
    var configuration = location.configuration
    configuration.options.maximumConnections = max(1, maximumConnections)
    configuration.options.connectTimeout = .seconds(5)
    var backgroundLogger = logger
    backgroundLogger.logLevel = max(logger.logLevel, .warning)
    let client = PostgresClient(configuration: configuration, backgroundLogger: backgroundLogger)
    let runner = Task { await client.run() }
    let storage = PostgresStorage(
      client: client, runner: runner, location: location.description, logRules: logRules,
      logger: logger)
    do {
      try await storage.migrate()
      return storage
    } catch {
      storage.close()
      throw ServerError.storage(
        "cannot use the database \(location.description): \(Self.describe(error))")
    }
  }

  func close() { runner.cancel() }

  var backend: String { "postgres" }

  func isReady() async -> Bool {
    do {
      return try await withDeadline(.seconds(2)) { [client, logger] in
        try await client.query("SELECT 1", logger: logger)
        return true
      }
    } catch {
      return false
    }
  }

  // MARK: - Schema

  /// Each version's statements, applied in order to a database below it.
  static let migrations: [Int32: [String]] = [
    1: [
      """
      CREATE TABLE vlog_accounts (
        number bigserial PRIMARY KEY, name text NOT NULL UNIQUE, password bytea NOT NULL)
      """,
      """
      CREATE TABLE vlog_tokens (
        hash bytea PRIMARY KEY,
        account bigint NOT NULL REFERENCES vlog_accounts ON DELETE CASCADE,
        expires_at bigint NOT NULL)
      """,
      """
      CREATE TABLE vlog_heads (
        account bigint PRIMARY KEY REFERENCES vlog_accounts ON DELETE CASCADE,
        last_sequence bigint NOT NULL, digest bytea NOT NULL)
      """,
      """
      CREATE TABLE vlog_events (
        account bigint NOT NULL, sequence bigint NOT NULL, id bytea NOT NULL,
        record bytea NOT NULL,
        PRIMARY KEY (account, sequence), UNIQUE (account, id))
      """,
      """
      CREATE TABLE vlog_objects (
        account bigint NOT NULL, object bytea NOT NULL, sequence bigint NOT NULL,
        PRIMARY KEY (account, object, sequence))
      """,
      """
      CREATE TABLE vlog_deletions (
        account bigint NOT NULL, object bytea NOT NULL, sequence bigint, stamp bytea,
        PRIMARY KEY (account, object))
      """,
      """
      CREATE TABLE vlog_blob_references (
        account bigint NOT NULL, hash bytea NOT NULL, sequence bigint NOT NULL,
        PRIMARY KEY (account, hash, sequence))
      """,
      """
      CREATE TABLE vlog_fields (
        account bigint NOT NULL, note bytea NOT NULL, field smallint NOT NULL,
        stamp bytea NOT NULL, sequence bigint NOT NULL,
        PRIMARY KEY (account, note, field))
      """,
      """
      CREATE TABLE vlog_superseded (
        account bigint NOT NULL, replaced_at bigint NOT NULL, sequence bigint NOT NULL,
        PRIMARY KEY (account, replaced_at, sequence))
      """,
      """
      CREATE TABLE vlog_blobs (
        account bigint NOT NULL, hash bytea NOT NULL, bytes bytea NOT NULL,
        PRIMARY KEY (account, hash))
      """,
    ],
    // Account deletion: an account's tokens by account, and no blob stored for an account
    // being deleted (the key-share lock of the reference waits for the deletion).
    2: [
      "CREATE INDEX vlog_tokens_account ON vlog_tokens (account)",
      """
      ALTER TABLE vlog_blobs ADD CONSTRAINT vlog_blobs_account
        FOREIGN KEY (account) REFERENCES vlog_accounts ON DELETE CASCADE
      """,
    ],
  ]

  /// Creates the schema, or brings it to ``schemaVersion``, in one transaction.
  private func migrate() async throws {
    // Servers starting at once may race to create the version table; the loser's error is
    // harmless, and the row lock below orders the rest.
    for attempt in 0..<3 {
      do {
        try await client.query(
          """
          CREATE TABLE IF NOT EXISTS vlog_schema (
            singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
            version integer NOT NULL)
          """, logger: logger)
        try await client.query(
          "INSERT INTO vlog_schema (version) VALUES (0) ON CONFLICT DO NOTHING", logger: logger)
        break
      } catch let error as PSQLError where error.serverInfo?[.sqlState] == "23505" && attempt < 2 {
        continue
      }
    }
    try await transaction { [self] connection in
      let rows = try await connection.query(
        "SELECT version FROM vlog_schema FOR UPDATE", logger: logger)
      var version: Int32 = 0
      for try await value in rows.decode(Int32.self) { version = value }
      guard version <= Self.schemaVersion else {
        throw ServerError.storage(
          "the database has schema version \(version); this server knows up to "
            + "\(Self.schemaVersion)")
      }
      guard version < Self.schemaVersion else { return }
      for next in (version + 1)...Self.schemaVersion {
        for statement in Self.migrations[next] ?? [] {
          try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
        }
      }
      try await connection.query(
        "UPDATE vlog_schema SET version = \(Self.schemaVersion)", logger: logger)
      logger.info(
        "database schema migrated",
        metadata: ["from": "\(version)", "to": "\(Self.schemaVersion)", "database": "\(location)"])
    }
  }

  /// Runs `body` in a transaction on one connection: committed if it returns, rolled back if
  /// it throws (its error is what this throws).
  private func transaction<R: Sendable>(
    _ body: @escaping @Sendable (PostgresConnection) async throws -> R
  ) async throws -> R {
    try await withConnection { [self] connection in
      try await connection.query("BEGIN", logger: logger)
      do {
        let result = try await body(connection)
        try await connection.query("COMMIT", logger: logger)
        return result
      } catch {
        // The body's error is the one to report; a connection whose rollback fails is closed
        // by the pool, which ends the transaction as well.
        _ = try? await connection.query("ROLLBACK", logger: logger)
        throw error
      }
    }
  }

  /// How long a request waits for a connection before it is answered 503 `unavailable`.
  static let acquireTimeout: Duration = .seconds(5)

  /// Runs `body` on a connection of the pool. Fails with ``ServerError`` `unavailable` when no
  /// connection can be had within ``acquireTimeout`` (the database is down or unreachable) or
  /// the connection fails, so that a request during an outage is answered at once and
  /// retried, instead of waiting for the pool's reconnection backoff.
  private func withConnection<R: Sendable>(
    _ body: @escaping @Sendable (PostgresConnection) async throws -> R
  ) async throws -> R {
    let acquired = Flag()
    do {
      return try await withThrowingTaskGroup(of: R?.self) { [client] group in
        group.addTask {
          try await client.withConnection { connection in
            acquired.set()
            return try await body(connection)
          }
        }
        group.addTask {
          // Cancelled (not an error) when the body finishes first.
          try? await Task.sleep(for: Self.acquireTimeout)
          guard Task.isCancelled || acquired.isSet else {
            throw ServerError.unavailable(
              "the database did not answer within \(Self.acquireTimeout)")
          }
          return nil
        }
        while let result = try await group.next() {
          if let value = result {
            group.cancelAll()
            return value
          }
        }
        throw ServerError.unavailable("the database did not answer")
      }
    } catch {
      throw Self.availability(error)
    }
  }

  /// A foreign-key violation (SQLSTATE 23503) means the account was deleted after the
  /// request's token was checked: answered like a revoked token.
  static func deletedAccount(_ error: any Error) -> any Error {
    guard let psql = error as? PSQLError, psql.serverInfo?[.sqlState] == "23503" else {
      return error
    }
    return ServerError.unauthorized
  }

  /// `error`, or ``ServerError`` `unavailable` if it says the database cannot be reached:
  /// a connection that failed or closed, or PostgreSQL's connection, operator-intervention and
  /// resource errors (SQLSTATE classes 08, 57, 53) and an unknown or closed database.
  static func availability(_ error: any Error) -> any Error {
    guard let psql = error as? PSQLError else { return error }
    switch psql.code {
    case .connectionError, .serverClosedConnection, .clientClosedConnection, .poolClosed,
      .uncleanShutdown:
      return ServerError.unavailable("the database connection failed: \(psql.code)")
    default:
      break
    }
    if let state = psql.serverInfo?[.sqlState],
      ["08", "57", "53"].contains(String(state.prefix(2))) || state == "3D000"
        || state == "55000"
    {
      return ServerError.unavailable(
        "the database refused: \(psql.serverInfo?[.message] ?? state)")
    }
    return error
  }

  // MARK: - Accounts and tokens

  func createAccount(named name: String, password: PasswordHash) async throws {
    try await transaction { [self] connection in
      let rows = try await connection.query(
        """
        INSERT INTO vlog_accounts (name, password)
        VALUES (\(name), \(ByteBuffer(bytes: password.encoded)))
        ON CONFLICT (name) DO NOTHING RETURNING number
        """, logger: logger)
      var number: Int64?
      for try await value in rows.decode(Int64.self) { number = value }
      guard let number else { throw ServerError.accountExists(name) }
      try await connection.query(
        """
        INSERT INTO vlog_heads (account, last_sequence, digest)
        VALUES (\(number), 0, \(ByteBuffer(bytes: EventSetDigest.empty.bytes)))
        """, logger: logger)
    }
  }

  func account(named name: String) async throws -> (number: UInt64, password: PasswordHash)? {
    try await withConnection { [self] connection in
      let rows = try await connection.query(
        "SELECT number, password FROM vlog_accounts WHERE name = \(name)", logger: logger)
      for try await (number, password) in rows.decode((Int64, ByteBuffer).self) {
        guard let number = UInt64(exactly: number),
          let hash = PasswordHash(decoding: Array(password.readableBytesView))
        else { return nil }
        return (number, hash)
      }
      return nil
    }
  }

  func storeToken(hash: [UInt8], account: UInt64, expiresAt milliseconds: Int64) async throws {
    _ = try await withConnection { [self] connection in
      do {
        let rows = try await connection.query(
          """
          INSERT INTO vlog_tokens (hash, account, expires_at)
          VALUES (\(ByteBuffer(bytes: hash)), \(Int64(clamping: account)), \(milliseconds))
          ON CONFLICT (hash) DO UPDATE SET account = EXCLUDED.account, expires_at = EXCLUDED.expires_at
          """, logger: logger)
        for try await _ in rows {}
      } catch {
        throw Self.deletedAccount(error)
      }
    }
  }

  func token(hash: [UInt8]) async throws -> (account: UInt64, expiresAt: Int64)? {
    try await withConnection { [self] connection in
      let rows = try await connection.query(
        "SELECT account, expires_at FROM vlog_tokens WHERE hash = \(ByteBuffer(bytes: hash))",
        logger: logger)
      for try await (account, expiry) in rows.decode((Int64, Int64).self) {
        guard let account = UInt64(exactly: account) else { return nil }
        return (account, expiry)
      }
      return nil
    }
  }

  func account(number: UInt64) async throws -> (name: String, password: PasswordHash)? {
    try await withConnection { [self] connection in
      let rows = try await connection.query(
        "SELECT name, password FROM vlog_accounts WHERE number = \(Int64(clamping: number))",
        logger: logger)
      for try await (name, password) in rows.decode((String, ByteBuffer).self) {
        guard let hash = PasswordHash(decoding: Array(password.readableBytesView)) else {
          return nil
        }
        return (name, hash)
      }
      return nil
    }
  }

  func tokens(of account: UInt64) async throws -> [(hash: [UInt8], expiresAt: Int64)] {
    try await withConnection { [self] connection in
      let rows = try await connection.query(
        "SELECT hash, expires_at FROM vlog_tokens WHERE account = \(Int64(clamping: account))",
        logger: logger)
      var tokens: [(hash: [UInt8], expiresAt: Int64)] = []
      for try await (hash, expiry) in rows.decode((ByteBuffer, Int64).self) {
        tokens.append((Array(hash.readableBytesView), expiry))
      }
      return tokens
    }
  }

  func setPassword(account: UInt64, password: PasswordHash, keeping: [UInt8]?) async throws {
    let number = Int64(clamping: account)
    try await transaction { [self] connection in
      let rows = try await connection.query(
        """
        UPDATE vlog_accounts SET password = \(ByteBuffer(bytes: password.encoded))
        WHERE number = \(number) RETURNING number
        """, logger: logger)
      var updated = false
      for try await _ in rows { updated = true }
      guard updated else { throw ServerError.unauthorized }
      try await connection.query(
        """
        DELETE FROM vlog_tokens
        WHERE account = \(number) AND hash IS DISTINCT FROM \(keeping.map { ByteBuffer(bytes: $0) })
        """, logger: logger)
    }
  }

  func deleteAccount(_ account: UInt64) async throws {
    let number = Int64(clamping: account)
    try await transaction { [self] connection in
      // The head row's lock waits for a push in progress and makes the next one find no
      // account; the account row's, for a blob being stored.
      try await connection.query(
        "SELECT 1 FROM vlog_heads WHERE account = \(number) FOR UPDATE", logger: logger)
      for table in [
        "vlog_events", "vlog_objects", "vlog_deletions", "vlog_blob_references", "vlog_fields",
        "vlog_superseded", "vlog_blobs",
      ] {
        try await connection.query(
          PostgresQuery(
            unsafeSQL: "DELETE FROM \(table) WHERE account = $1",
            binds: {
              var binds = PostgresBindings()
              binds.append(number)
              return binds
            }()), logger: logger)
      }
      // Tokens and the head go with the account row (ON DELETE CASCADE).
      let rows = try await connection.query(
        "DELETE FROM vlog_accounts WHERE number = \(number) RETURNING number", logger: logger)
      var deleted = false
      for try await _ in rows { deleted = true }
      guard deleted else { throw ServerError.unauthorized }
    }
  }

  @discardableResult
  func deleteToken(hash: [UInt8]) async throws -> Bool {
    try await withConnection { [self] connection in
      let rows = try await connection.query(
        "DELETE FROM vlog_tokens WHERE hash = \(ByteBuffer(bytes: hash)) RETURNING account",
        logger: logger)
      var deleted = false
      for try await _ in rows { deleted = true }
      return deleted
    }
  }

  // MARK: - Event logs

  func sync(
    account: UInt64, pushing events: [Event], after cursor: UInt64, limit: Int,
    maximumBytes: Int, retention: (period: Duration?, now: UInt64)
  ) async throws -> SyncOutcome {
    let number = Int64(clamping: account)
    guard !events.isEmpty else {
      return try await withConnection { [self] connection in
        let head = try await self.head(of: number, on: connection, locking: false)
        return try await page(
          number, head: head, after: cursor, limit: (limit, maximumBytes), skipping: [],
          stored: 0, on: connection)
      }
    }
    return try await transaction { [self] connection in
      let head = try await self.head(of: number, on: connection, locking: true)
      guard cursor <= head.sequence else {
        throw ServerError.invalidCursor(cursor, head.sequence)
      }
      var pushed = Set<Stamp>()
      var fresh: [Event] = []
      for event in events where pushed.insert(event.stamp).inserted { fresh.append(event) }
      let known = try await storedIDs(of: number, among: fresh.map(\.stamp), on: connection)
      fresh.removeAll { known.contains($0.stamp) }
      var writer = PostgresLogWriter(
        account: number, head: head, rules: logRules, connection: connection, logger: logger)
      try await writer.prefetch(for: fresh)
      for event in fresh { try await writer.append(event) }
      try await writer.applyRetention(retention.period, now: retention.now)
      _ = try await writer.commit()
      return try await page(
        number, head: writer.head, after: cursor, limit: (limit, maximumBytes),
        skipping: pushed, stored: writer.appended, on: connection)
    }
  }

  /// The account's head; with `locking`, locks its row until the transaction ends (creating
  /// the row of an account that has none).
  private func head(of account: Int64, on connection: PostgresConnection, locking: Bool)
    async throws -> Head
  {
    for _ in 0..<2 {
      let rows = try await connection.query(
        locking
          ? "SELECT last_sequence, digest FROM vlog_heads WHERE account = \(account) FOR UPDATE"
          : "SELECT last_sequence, digest FROM vlog_heads WHERE account = \(account)",
        logger: logger)
      for try await (sequence, digest) in rows.decode((Int64, ByteBuffer).self) {
        guard let digest = EventSetDigest(bytes: Array(digest.readableBytesView)) else {
          throw ServerError.storage("account \(account): the head's digest is malformed")
        }
        return Head(sequence: try PostgresLogWriter.sequence(sequence), digest: digest)
      }
      guard locking else { return Head() }
      let created = try await connection.query(
        """
        INSERT INTO vlog_heads (account, last_sequence, digest)
        SELECT number, 0, \(ByteBuffer(bytes: EventSetDigest.empty.bytes))
        FROM vlog_accounts WHERE number = \(account)
        ON CONFLICT DO NOTHING RETURNING account
        """, logger: logger)
      var exists = false
      for try await _ in created { exists = true }
      // Deleted after the request's token was checked: it takes nothing more.
      guard exists else { throw ServerError.unauthorized }
    }
    throw ServerError.storage("account \(account) has no head")
  }

  /// The ids among `ids` that the account's log holds.
  private func storedIDs(of account: Int64, among ids: [Stamp], on connection: PostgresConnection)
    async throws -> Set<Stamp>
  {
    guard !ids.isEmpty else { return [] }
    let rows = try await connection.query(
      """
      SELECT id FROM vlog_events
      WHERE account = \(account) AND id = ANY(\(ids.map { ByteBuffer(bytes: $0.bytes) })::bytea[])
      """, logger: logger)
    var found = Set<Stamp>()
    for try await id in rows.decode(ByteBuffer.self) {
      found.insert(try PostgresLogWriter.stamp(id))
    }
    return found
  }

  /// The events after `cursor` up to the head: at most `limit.events` of them, and as many as
  /// fit in `limit.bytes` of encoded events, but at least one.
  private func page(
    _ account: Int64, head: Head, after cursor: UInt64, limit: (events: Int, bytes: Int),
    skipping pushed: Set<Stamp>, stored: Int, on connection: PostgresConnection
  ) async throws -> SyncOutcome {
    guard cursor <= head.sequence else { throw ServerError.invalidCursor(cursor, head.sequence) }
    var events: [Event] = []
    var bytes = 0
    var last = cursor
    // Rows come in batches, so a page of small events takes one round trip and a page of
    // large ones stops reading where the byte limit falls.
    var from = cursor
    let batch = max(1, min(limit.events, 5000))
    scan: while from < head.sequence, limit.events > 0 {
      let rows = try await connection.query(
        """
        SELECT sequence, record FROM vlog_events
        WHERE account = \(account) AND sequence > \(Int64(clamping: from))
          AND sequence <= \(Int64(clamping: head.sequence))
        ORDER BY sequence LIMIT \(Int64(batch + pushed.count))
        """, logger: logger)
      var read = 0
      for try await (sequence, record) in rows.decode((Int64, ByteBuffer).self) {
        read += 1
        let sequence = try PostgresLogWriter.sequence(sequence)
        guard sequence == from + 1 else {
          throw ServerError.storage(
            "account \(account): event \(from + 1) is missing from the log")
        }
        from = sequence
        let event = try PostgresLogWriter.event(record: record, sequence: sequence)
        if !pushed.contains(event.stamp) {
          let size = record.readableBytes - LogRecord.headerSize
          guard events.isEmpty || bytes + size <= limit.bytes else { break scan }
          bytes += size
          events.append(event)
        }
        last = sequence
        guard events.count < limit.events, bytes < limit.bytes else { break scan }
      }
      guard read > 0 else {
        throw ServerError.storage("account \(account): event \(from + 1) is missing from the log")
      }
    }
    return SyncOutcome(
      events: events, cursor: last, more: last < head.sequence, stored: stored,
      head: head)
  }

  // MARK: - Repair

  func compare(account: UInt64, with client: EventSetBuckets, limit: Int) async throws
    -> Comparison
  {
    let number = Int64(clamping: account)
    return try await transaction { [self] connection in
      try await connection.query(
        "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", logger: logger)
      let head = try await self.head(of: number, on: connection, locking: false)
      let rows = try await connection.query(
        "SELECT id FROM vlog_events WHERE account = \(number) ORDER BY id", logger: logger)
      var ids: [Stamp] = []
      var buckets = EventSetBuckets()
      for try await id in rows.decode(ByteBuffer.self) {
        let stamp = try PostgresLogWriter.stamp(id)
        ids.append(stamp)
        buckets.add(stamp)
      }
      let differing = buckets.differing(from: client)
      guard !differing.isEmpty else {
        return Comparison(ids: [:], complete: true, eventSetDigest: head.digest)
      }
      let wanted = Set(differing)
      var byBucket: [Int: [Stamp]] = [:]
      for id in ids where wanted.contains(EventSetBuckets.bucket(of: id)) {
        byBucket[EventSetBuckets.bucket(of: id), default: []].append(id)
      }
      var kept: [Int: [Stamp]] = [:]
      var count = 0
      for bucket in differing {
        let bucketIDs = byBucket[bucket, default: []]
        guard kept.isEmpty || count + bucketIDs.count <= limit else {
          return Comparison(ids: kept, complete: false, eventSetDigest: head.digest)
        }
        kept[bucket] = bucketIDs
        count += bucketIDs.count
      }
      return Comparison(ids: kept, complete: true, eventSetDigest: head.digest)
    }
  }

  func events(account: UInt64, ids: [Stamp], maximumBytes: Int) async throws -> [Event] {
    try await withConnection { [self] connection in
      guard !ids.isEmpty else { return [] }
      let number = Int64(clamping: account)
      let rows = try await connection.query(
        """
        SELECT sequence, record FROM vlog_events
        WHERE account = \(number) AND id = ANY(\(ids.map { ByteBuffer(bytes: $0.bytes) })::bytea[])
        """, logger: logger)
      var found: [Stamp: Event] = [:]
      for try await (sequence, record) in rows.decode((Int64, ByteBuffer).self) {
        let event = try PostgresLogWriter.event(
          record: record, sequence: try PostgresLogWriter.sequence(sequence))
        found[event.stamp] = event
      }
      var events: [Event] = []
      var bytes = 0
      for id in ids {
        guard let event = found[id] else { continue }
        let size = event.encoded().count
        guard events.isEmpty || bytes + size <= maximumBytes else { break }
        bytes += size
        events.append(event)
      }
      return events
    }
  }

  // MARK: - Blobs

  func storeBlob(_ bytes: [UInt8], hash: BlobHash, account: UInt64) async throws -> Bool {
    try await withConnection { [self] connection in
      do {
        let rows = try await connection.query(
          """
          INSERT INTO vlog_blobs (account, hash, bytes)
          VALUES (\(Int64(clamping: account)), \(ByteBuffer(bytes: hash.bytes)), \(ByteBuffer(bytes: bytes)))
          ON CONFLICT DO NOTHING RETURNING account
          """, logger: logger)
        var stored = false
        for try await _ in rows { stored = true }
        return stored
      } catch {
        throw Self.deletedAccount(error)
      }
    }
  }

  func blob(_ hash: BlobHash, account: UInt64) async throws -> [UInt8]? {
    try await withConnection { [self] connection in
      let rows = try await connection.query(
        """
        SELECT bytes FROM vlog_blobs
        WHERE account = \(Int64(clamping: account)) AND hash = \(ByteBuffer(bytes: hash.bytes))
        """, logger: logger)
      for try await bytes in rows.decode(ByteBuffer.self) { return Array(bytes.readableBytesView) }
      return nil
    }
  }

  // MARK: - Maintenance

  /// The numbers of every account with a log.
  private func accountNumbers() async throws -> [Int64] {
    try await withConnection { [self] connection in
      let rows = try await connection.query(
        "SELECT account FROM vlog_heads ORDER BY account", logger: logger)
      var numbers: [Int64] = []
      for try await number in rows.decode(Int64.self) { numbers.append(number) }
      return numbers
    }
  }

  @discardableResult
  func applyRetention(_ retention: Duration?, now: UInt64) async throws -> Int {
    guard retention != nil else { return 0 }
    var redacted = 0
    for account in try await accountNumbers() {
      redacted += try await transaction { [self] connection in
        let head = try await self.head(of: account, on: connection, locking: true)
        var writer = PostgresLogWriter(
          account: account, head: head, rules: logRules, connection: connection, logger: logger)
        let count = try await writer.applyRetention(retention, now: now)
        _ = try await writer.commit()
        return count
      }
    }
    return redacted
  }

  func verify(retention: (period: Duration?, now: UInt64)) async throws -> ServerVerification {
    let accounts = try await accountNumbers()
    var faults: [VerificationFault] = []
    var events = 0
    for account in accounts {
      let (checked, found) = try await transaction { [self] connection in
        try await connection.query(
          "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", logger: logger)
        return try await PostgresVerifier(account: account, connection: connection, logger: logger)
          .verify(retention: retention)
      }
      events += checked
      faults += found.map {
        VerificationFault(kind: $0.kind, message: "account \(account): \($0.message)")
      }
    }
    return ServerVerification(accounts: accounts.count, events: events, faults: faults)
  }

  // MARK: - Errors

  /// What went wrong talking to the database, for a message: PostgreSQL's own message when it
  /// sent one.
  static func describe(_ error: any Error) -> String {
    if let error = error as? ServerError { return error.body.message }
    if let error = error as? PSQLError {
      if let message = error.serverInfo?[.message] { return message }
      return "\(error.code)"
    }
    return "\(error)"
  }
}

/// Runs `body`, failing with a timeout if it has not finished after `limit`.
func withDeadline<R: Sendable>(
  _ limit: Duration, _ body: @escaping @Sendable () async throws -> R
) async throws -> R {
  try await withThrowingTaskGroup(of: R?.self) { group in
    group.addTask { try await body() }
    group.addTask {
      try await Task.sleep(for: limit)
      return nil
    }
    defer { group.cancelAll() }
    guard let first = try await group.next(), let value = first else {
      throw ServerError.storage("the database did not answer within \(limit)")
    }
    return value
  }
}

/// A PostgreSQL URL: `postgres://user:password@host:port/database?sslmode=disable`, or with a
/// Unix socket, `postgres://user@/database?host=/path/to/socket-directory`.
struct DatabaseURL: CustomStringConvertible {
  let configuration: PostgresClient.Configuration
  let description: String

  init(_ string: String) throws {
    guard let components = URLComponents(string: string),
      let scheme = components.scheme, scheme == "postgres" || scheme == "postgresql"
    else {
      throw ServerError.storage(
        "'\(Self.redacted(string))' is not a PostgreSQL URL; expected "
          + "postgres://user:password@host:5432/database or postgres://user@/database?host=/socket/dir"
      )
    }
    let query = Dictionary(
      (components.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { $1 })
    let user = components.user.flatMap { $0.removingPercentEncoding } ?? "postgres"
    let password = components.password.flatMap { $0.removingPercentEncoding }
    let path =
      components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
    let database = path.isEmpty ? user : path.removingPercentEncoding ?? path
    let port = components.port ?? Int(query["port"] ?? "") ?? 5432
    let socketDirectory = query["host"].flatMap { $0.hasPrefix("/") ? $0 : nil }
    if let socketDirectory {
      configuration = .init(
        unixSocketPath: "\(socketDirectory)/.s.PGSQL.\(port)", username: user,
        password: password, database: database)
      description = "postgres://\(user)@/\(database)?host=\(socketDirectory)"
      return
    }
    let host = components.host.flatMap { $0.isEmpty ? nil : $0 } ?? "localhost"
    let tls: PostgresClient.Configuration.TLS
    switch query["sslmode"] ?? "disable" {
    case "disable": tls = .disable
    case "prefer": tls = .prefer(.makeClientConfiguration())
    case "require": tls = .require(.makeClientConfiguration())
    case let mode:
      throw ServerError.storage(
        "sslmode '\(mode)' is not one of disable, prefer, require (in \(Self.redacted(string)))")
    }
    configuration = .init(
      host: host, port: port, username: user, password: password, database: database, tls: tls)
    description = "postgres://\(user)@\(host):\(port)/\(database)"
  }

  /// The URL with its password replaced, for messages and logs.
  static func redacted(_ string: String) -> String {
    guard var components = URLComponents(string: string), components.password != nil else {
      return string
    }
    components.password = "…"
    return components.string ?? "(a URL)"
  }
}

/// A flag set once, read from other tasks.
final class Flag: Sendable {
  private let value = Atomic<Bool>(false)
  func set() { value.store(true, ordering: .releasing) }
  var isSet: Bool { value.load(ordering: .acquiring) }
}
