internal import Foundation
internal import Logging
internal import NIOCore
internal import PostgresNIO
internal import VLog

/// The schema: its versions and the migration a server runs when it opens the database.
extension PostgresStorage {
  /// A step of the schema's migration.
  enum MigrationStep {
    /// Statements to run in order.
    case statements([String])
    /// Erases deleted tags' names (``eraseDeletedTagNames(on:)``).
    case eraseDeletedTagNames
  }

  /// What brings a database of each older schema version to ``schemaVersion``: each version's
  /// statements, then what rewrites stored data (after every table it may write exists).
  static var migrations: Migrations<MigrationStep> {
    var migrations = Migrations<MigrationStep>(current: UInt32(schemaVersion))
    let names: [Int32: String] = [
      1: "accounts, tokens, event logs and their indexes, blobs",
      2: "tokens by account; no blob stored for an account being deleted",
      3: "released blobs wait out a grace period",
      4: "tags deleted by key",
      5: "end-to-end encrypted accounts' records of keys",
      6: "crypto-shredding: object keys, epoch links, rotations due",
      7: "the server's secret",
      8: "throttle counters",
    ]
    for version in 1...schemaVersion {
      migrations.register(
        names[version] ?? "schema version \(version)", below: UInt32(version),
        .statements(statements[version] ?? []))
    }
    migrations.register("deleted tags' names erased", below: 4, .eraseDeletedTagNames)
    return migrations
  }

  /// Each version's statements, applied in order to a database below it.
  private static let statements: [Int32: [String]] = [
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
    // Released blobs wait out a grace period (for an undo): when the last event using one was
    // erased, in milliseconds since 1970; null while an event uses it.
    3: [
      "ALTER TABLE vlog_blobs ADD COLUMN released_at bigint",
      """
      CREATE INDEX vlog_blobs_released ON vlog_blobs (released_at)
        WHERE released_at IS NOT NULL
      """,
    ],
    // Tags deleted by key: no statement, but the migration erases the names of the tags that
    // version 3 deleted by name (``eraseDeletedTagNames(on:)``).
    4: [],
    // End-to-end encrypted accounts: each one's record of its keys (``EncryptionRecord``).
    // (If not there already: a database whose version was set back runs this again.)
    5: [
      """
      CREATE TABLE IF NOT EXISTS vlog_account_keys (
        account bigint PRIMARY KEY REFERENCES vlog_accounts ON DELETE CASCADE,
        record bytea NOT NULL)
      """
    ],
    // Crypto-shredding: an encrypted account's keys of its notes and attachments (erased with
    // them), the links between its content key's epochs, and whether a rotation is due. (If
    // not there already, as version 5.)
    6: [
      """
      CREATE TABLE IF NOT EXISTS vlog_object_keys (
        account bigint NOT NULL REFERENCES vlog_accounts ON DELETE CASCADE,
        object bytea NOT NULL, wrapped bytea NOT NULL,
        PRIMARY KEY (account, object))
      """,
      """
      CREATE TABLE IF NOT EXISTS vlog_key_links (
        account bigint NOT NULL REFERENCES vlog_accounts ON DELETE CASCADE,
        epoch bigint NOT NULL, link bytea NOT NULL,
        PRIMARY KEY (account, epoch))
      """,
      "ALTER TABLE vlog_account_keys ADD COLUMN IF NOT EXISTS rotation_due boolean NOT NULL DEFAULT false",
    ],
    // The server's secret (``AccountStorage/serverSecret()``), made by the first server that
    // asks for it.
    7: [
      """
      CREATE TABLE IF NOT EXISTS vlog_server_secret (
        singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
        secret bytea NOT NULL)
      """
    ],
    // Throttle counters (``ThrottleKey``), shared by every server of the database.
    8: [
      """
      CREATE TABLE IF NOT EXISTS vlog_throttle (
        key bytea PRIMARY KEY, count bigint NOT NULL, first bigint NOT NULL,
        last bigint NOT NULL, span bigint NOT NULL)
      """
    ],
  ]

  /// Erases the names of deleted tags from logs written before deletions named tags by key,
  /// account by account (``LogBatch/refileTagDeletion(_:facts:)``): a deletion by name is
  /// stored by key, and what each tag's latest deletion erases is erased.
  private func eraseDeletedTagNames(on connection: PostgresConnection) async throws {
    let rows = try await connection.query(
      "SELECT account FROM vlog_heads ORDER BY account", logger: logger)
    var accounts: [Int64] = []
    for try await account in rows.decode(Int64.self) { accounts.append(account) }
    for account in accounts {
      var deletions: [LoggedEvent] = []
      let events = try await connection.query(
        "SELECT sequence, record FROM vlog_events WHERE account = \(account) ORDER BY sequence",
        logger: logger)
      for try await (sequence, record) in events.decode((Int64, ByteBuffer).self) {
        let number = try PostgresLogWriter.sequence(sequence)
        let event = try PostgresLogWriter.event(record: record, sequence: number)
        if event.change.deletedTag != nil {
          deletions.append(LoggedEvent(sequence: number, event: event))
        }
      }
      guard !deletions.isEmpty else { continue }
      let head = try await self.head(of: account, on: connection, locking: true)
      var writer = PostgresLogWriter(
        account: account, head: head, rules: logRules,
        now: Milliseconds(Date()), connection: connection, logger: logger)
      for logged in deletions { try await writer.refileTagDeletion(logged) }
      _ = try await writer.commit()
    }
  }

  /// How long a migration may take before it is given up (and rolled back).
  static let migrationTimeout: Duration = .seconds(24 * 3600)

  /// Creates the schema, or brings it to ``schemaVersion``, in one transaction.
  func migrate() async throws {
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
    // Not bound by the database timeout: a migration rewrites what older versions stored,
    // which takes as long as the data takes to read.
    try await transaction(timeout: Self.migrationTimeout) { [self] connection in
      let rows = try await connection.query(
        "SELECT version FROM vlog_schema FOR UPDATE", logger: logger)
      var version: Int32 = 0
      for try await value in rows.decode(Int32.self) { version = value }
      guard version >= 0, let pending = Self.migrations.pending(from: UInt32(version)) else {
        throw StorageError.unusable(
          "the database has schema version \(version); this server knows up to "
            + "\(Self.schemaVersion)")
      }
      guard version < Self.schemaVersion else { return }
      for migration in pending {
        switch migration.step {
        case .statements(let statements):
          for statement in statements {
            try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
          }
        case .eraseDeletedTagNames:
          try await eraseDeletedTagNames(on: connection)
        }
      }
      try await connection.query(
        "UPDATE vlog_schema SET version = \(Self.schemaVersion)", logger: logger)
      logger.info(
        "database schema migrated",
        metadata: [
          "from": "\(version)", "to": "\(Self.schemaVersion)", "database": "\(location)",
          "steps": "\(pending.map(\.name).joined(separator: "; "))",
        ])
    }
  }
}
