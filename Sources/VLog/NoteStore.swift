public import Foundation
package import LMDB
internal import Synchronization

/// An event-sourced store of notes: what an app embeds.
///
/// Every user change is appended to an LMDB log as an immutable ``Event``, and the projections
/// (notes, tags, attachments, tombstones and the indexes the queries use) are updated in the
/// same transaction, so that after any commit the state and the log agree.
///
/// ```swift
/// let store = try NoteStore.open(at: "/path/to/store")
/// let id = try store.write { edits in
///   edits.createNote(text: "Buy bread", tags: ["Errands"])
/// }
/// try store.write { $0.setArchived(true, of: id) }
/// let timeline = try store.timeline()
/// ```
///
/// ## Concurrency
///
/// 1. The store is `Sendable`; share one instance. A path is open at most once per process.
/// 2. Writes — ``write(_:)-7uv98``, ``ingest(_:acknowledgingThrough:deferringProjections:)-4bo9v`` — are serialised: one transaction at a time. The
///    `async` overloads run the transaction on the store's own serial queue, never on the
///    cooperative thread pool; the synchronous ones run on the caller's thread.
/// 3. Reads run concurrently with each other and with the writer, each on its own snapshot.
/// 4. Observers (``changes()``) receive a ``ChangeSet`` after each commit, whatever its source.
public final class NoteStore: Sendable {
  /// How a store is opened.
  public struct Options: Sendable {
    /// What a commit survives (default: ``Durability/durable``).
    public var durability: Durability
    /// The initial map size in bytes (default 64 MiB); it doubles as needed. When the process
    /// has no address space left for the doubled map, the write that needed it throws and the
    /// store is closed: open it again (every committed change is there).
    public var mapSize: Int
    /// The largest map size in bytes (default 1 TiB of address space).
    public var maximumMapSize: Int
    /// The sources of time and ids (default: the system clock and random ids).
    public var dependencies: Dependencies
    /// How far ahead of the wall clock an ingested stamp may move this replica's clock
    /// (default 10 minutes, the sync server's bound). An event stamped further ahead is stored
    /// and merged as it is, but the clock stops at the bound, so later local changes are
    /// stamped near the wall clock and the server accepts them.
    public var maximumClockSkew: Duration = .seconds(600)
    /// How long a change replaced by a newer change to the same field keeps its values before
    /// they are redacted: a setting kept in the store. Nil (the default) keeps the store's
    /// setting — ``Retention/standard`` for a new store — so that tools opening the store do
    /// not change it; a value replaces it. The replaced change can never win again, so state
    /// and digests do not change; only ``NoteStore/history(of:)`` loses the old values.
    /// Applied at each commit.
    public var retention: Retention?
    /// How many change groups of this process ``NoteStore/undo()`` can undo (default 100;
    /// 0 turns undo off).
    public var undoLevels = 100
    /// Opens the store without writing anything, for reading only: a store on read-only
    /// media (a mounted backup), or a copy that must stay as it is. Nothing is migrated,
    /// retained or swept at the open; every write throws (`accessDenied`). A store of an
    /// older format must be opened writable once first.
    public var isReadOnly = false
    /// How changes merge; only tests change it, to show that they catch a wrong rule.
    var mergePolicy: any MergePolicy = StandardMerge()
    /// Whether opening brings projections that lag the log up to date; only the crash
    /// harness turns it off, to show that it catches a store left behind by a crash.
    package var bringsProjectionsUpToDateOnOpen = true
    /// The most events a deferred ingest leaves unprojected: past it, the ingest projects, so
    /// that a long first sync shows its progress. Tests lower it.
    package var projectionLagLimit: UInt64 = 100_000

    /// Creates options.
    public init(
      durability: Durability = .durable, mapSize: Int = 64 << 20,
      maximumMapSize: Int = 1 << 40, dependencies: Dependencies = .live
    ) {
      self.durability = durability
      self.mapSize = mapSize
      self.maximumMapSize = maximumMapSize
      self.dependencies = dependencies
    }
  }

  /// What a committed write survives.
  public enum Durability: Sendable, Hashable {
    /// A commit returns once the change is on disk: it survives a crash and a power loss.
    case durable
    /// A power loss may undo the last commit; the store stays intact. A crash loses nothing.
    case noMetaSync
    /// A power loss may undo commits since the last sync, and on file systems that reorder
    /// writes may damage the store; a crash of the process loses nothing. For bulk loads and
    /// tests.
    case noSync

    /// The LMDB mode with the same guarantees.
    package var environment: Environment.Durability {
      switch self {
      case .durable: .durable
      case .noMetaSync: .noMetaSync
      case .noSync: .noSync
      }
    }
  }

  /// The store's sources of time and randomness, injected so that tests control them.
  public struct Dependencies: Sendable {
    /// The wall clock.
    public var now: @Sendable () -> Date
    /// A new random 128-bit identifier, for notes, attachments and the replica.
    public var makeIdentifier: @Sendable () -> Identifier

    /// Creates dependencies.
    public init(
      now: @escaping @Sendable () -> Date,
      makeIdentifier: @escaping @Sendable () -> Identifier
    ) {
      self.now = now
      self.makeIdentifier = makeIdentifier
    }

    /// The system clock and the system's random number generator.
    public static let live = Dependencies(
      now: { Date() },
      makeIdentifier: {
        var generator = SystemRandomNumberGenerator()
        return Identifier.random(using: &generator)
      })
  }

  /// The version of the store's layout this build writes. A store with a higher version is
  /// refused; one with a lower version is migrated when opened (format 1 kept XXH64
  /// checksums and digests; format 2 had no object index, and kept deleted notes' content:
  /// opening it erases that content; format 3 copied each note's text into its record and
  /// keyed the object index by object first; format 4 kept a note's text stamp in its record;
  /// format 5 kept one text per note, without its conflicts; format 6 kept a note's tags as
  /// one list, and deleted tags' names in its log; format 7 filed a tag typed in Unicode's
  /// decomposed form apart from its composed form; format 8 did not keep which notes have
  /// changes the server has not stored; format 9 kept the projections in step with the log
  /// at every commit, and a version that reads it would not bring lagging ones up to date;
  /// the projections are rebuilt whenever the format changes).
  public static let formatVersion: UInt32 = 10

  /// The LMDB environment holding the store.
  package let environment: Environment
  /// This replica's id: the tie-break in every stamp this store issues. A store takes a new one
  /// when it finds it was copied (see `renewReplica()`).
  public var replicaID: ReplicaID { currentReplica.withLock { $0 } }
  /// The replica id as last read from the store.
  let currentReplica: Locked<ReplicaID>
  /// The server's clock minus this device's, in milliseconds, as a sync last recorded it
  /// (see `recordServerClock(offset:)`).
  let serverClock: Locked<Int64?>
  /// The store's directory.
  public var path: String { environment.path }
  /// Whether the store was opened without writing (``Options/isReadOnly``): every write throws.
  public var isReadOnly: Bool { environment.configuration.isReadOnly }
  /// The wall clock the store stamps events with (``Dependencies/now``): what a sync client
  /// compares with the server's clock to report skew.
  public var wallClock: @Sendable () -> Date { dependencies.now }

  let schema: Schema
  /// The store's event log.
  var eventLog: EventLog { schema.eventLog }
  let dependencies: Dependencies
  let merge: NoteMerge
  /// How far ahead of the wall clock a stamp from elsewhere may move this store's clock (see
  /// ``Options/maximumClockSkew``).
  public let maximumClockSkew: Duration
  /// See ``Options/projectionLagLimit``.
  let projectionLagLimit: UInt64
  /// How long replaced values are kept (see ``Options/retention``): nil for ever.
  public let retention: Duration?
  let observers = Observers()
  let undoHistory: UndoHistory
  /// The async writes and ingests: those that arrive while a commit is in flight share the
  /// next one, each in a transaction nested in it.
  let commits: GroupCommit

  private init(
    environment: Environment, schema: Schema, replicaID: ReplicaID, options: Options,
    retention: Duration?, serverClock: Int64?
  ) {
    self.environment = environment
    self.schema = schema
    self.currentReplica = Locked(replicaID)
    self.serverClock = Locked(serverClock)
    self.dependencies = options.dependencies
    self.merge = NoteMerge(policy: options.mergePolicy)
    self.maximumClockSkew = options.maximumClockSkew
    self.projectionLagLimit = options.projectionLagLimit
    self.retention = retention
    self.undoHistory = UndoHistory(limit: options.undoLevels)
    self.commits = GroupCommit(environment)
    // The environment closes itself when a grown map cannot be made: the streams of changes
    // end then too, as on ``close()``, rather than wait for commits that cannot come.
    environment.onClose { [observers] in observers.finish() }
  }

  /// Opens the store at a directory, creating it if needed.
  ///
  /// Opening reads a few facts (format, replica id); it replays only the log's events that a
  /// pull cut short left unprojected (see ``ingest(_:acknowledgingThrough:deferringProjections:)-4bo9v``).
  ///
  /// - Parameters:
  ///   - path: The store's directory.
  ///   - options: Durability, map size and dependencies.
  /// - Throws: ``VLogError`` with ``VLogError/Code/unsupportedFormat`` for a store written by a
  ///   newer version, ``VLogError/Code/corruptStore`` for one this version cannot read, and
  ///   ``VLogError/Code/storage`` when LMDB cannot open it.
  public static func open(at path: String, options: Options = Options()) throws -> NoteStore {
    if options.isReadOnly { return try openReadOnly(at: path, options: options) }
    return try open(at: path, options: options, adoptingFile: false)
  }

  /// Opens the store for writing; with `adoptingFile`, takes its file as its own, as after
  /// compaction, rather than as a copy.
  static func open(at path: String, options: Options, adoptingFile: Bool) throws -> NoteStore {
    try VLogError.wrapping {
      let environment = try Environment.open(
        at: path,
        configuration: .init(
          mapSize: options.mapSize, maximumMapSize: options.maximumMapSize,
          maximumDatabases: Schema.databaseCount + 4,
          durability: options.durability.environment))
      let schema = try Schema(environment: environment, create: true)
      let (replicaID, retention, serverClock) = try environment.write {
        transaction throws -> (ReplicaID, Duration?, Int64?) in
        let (stored, migrated) = try initializeMeta(
          schema: schema, dependencies: options.dependencies, in: transaction)
        let replicaID = try checkedReplica(
          stored, path: path, schema: schema, dependencies: options.dependencies,
          adopting: adoptingFile, in: transaction)
        let retention = try Retention.setting(options.retention, in: schema, transaction)
        if migrated {
          // The note records now hold each field's newest change: the retention queue is
          // built from them (format 3 kept them in `fields`).
          try transaction.removeAll(in: schema.fields)
          _ = try replayLog(
            schema: schema, merge: NoteMerge(policy: options.mergePolicy), into: transaction,
            progress: nil,
            tracksReplacements: true)
        }
        // No undo outlives a process: blobs that only erased attachments used can go (all
        // of them after a migration, else those released since the last open).
        if migrated {
          try removeUnusedBlobs(schema: schema, in: transaction)
        } else {
          try removeReleasedBlobs(schema: schema, in: transaction)
        }
        var log = try schema.eventLog.appender(in: transaction)
        let now = Milliseconds(options.dependencies.now())
        if try log.applyRetention(retention, now: now, in: transaction) > 0 {
          try log.commit(in: transaction)
        }
        return (replicaID, retention, try storedServerClock(schema: schema, in: transaction))
      }
      let store = NoteStore(
        environment: environment, schema: schema, replicaID: replicaID, options: options,
        retention: retention, serverClock: serverClock)
      // A pull that a crash or a failure cut short left projections behind the log. If they
      // cannot be brought up to date (a damaged record), they are rebuilt from the log; if the
      // log itself is damaged, the store opens as it is: verify names the damage, and salvage
      // recovers what the log holds.
      if options.bringsProjectionsUpToDateOnOpen {
        do {
          try store.bringProjectionsUpToDate()
        } catch let error as VLogError where error.code == .corruptStore {
          do {
            try store.rebuildProjections()
          } catch let error as VLogError where error.code == .corruptStore {}
        }
      }
      return store
    }
  }

  /// Opens an existing store without writing (``Options/isReadOnly``).
  private static func openReadOnly(at path: String, options: Options) throws -> NoteStore {
    try VLogError.wrapping {
      let environment = try Environment.open(
        at: path,
        configuration: .init(
          mapSize: options.mapSize, maximumMapSize: options.maximumMapSize,
          maximumDatabases: Schema.databaseCount + 4,
          durability: options.durability.environment, isReadOnly: true))
      // The format first: an older one may lack a database this version opens.
      let meta = try environment.openDatabase(named: "meta", flags: [])
      let format = try environment.read { transaction in
        try transaction.value(forKey: Keys.Meta.format, in: meta)
      }
      if let format, format.count == 4, let version = BigEndian.read(UInt32.self, from: format),
        version < formatVersion
      {
        throw VLogError(
          .unsupportedFormat,
          "the store has format \(version), and this version of VLog reads format "
            + "\(formatVersion) without writing; open it writable once to migrate it")
      }
      let schema = try Schema(environment: environment, create: false)
      let (replicaID, retention, serverClock) = try environment.read { transaction in
        guard let facts = try storedFacts(schema: schema, in: transaction) else {
          throw VLogError(.corruptStore, "the store's format marker is missing")
        }
        guard facts.version == formatVersion else {
          throw VLogError(
            .unsupportedFormat,
            "the store has format \(facts.version), and this version of VLog reads format "
              + "\(formatVersion) without writing; open it writable once to migrate it")
        }
        return (
          facts.replica, try Retention.stored(in: schema, transaction),
          try storedServerClock(schema: schema, in: transaction)
        )
      }
      return NoteStore(
        environment: environment, schema: schema, replicaID: replicaID, options: options,
        retention: retention, serverClock: serverClock)
    }
  }

  /// How long a store keeps the values of changes that newer changes to the same field
  /// replaced (see ``Options/retention``).
  public struct Retention: Sendable, Hashable, CustomStringConvertible {
    /// The period; nil for ever.
    public let period: Duration?

    /// Keeps replaced values for `period` after they were replaced (zero: redacts them at the
    /// commit that replaces them).
    public static func period(_ period: Duration) -> Retention {
      Retention(period: max(period, .zero))
    }
    /// Keeps every value for ever.
    public static let forever = Retention(period: nil)
    /// 30 days: what a new store keeps.
    public static let standard = Retention.period(.seconds(30 * 86400))

    /// `30 days`, `0 s`, `forever`.
    public var description: String {
      guard let period else { return "forever" }
      let seconds = period.wholeMilliseconds / 1000
      return seconds % 86400 == 0 && seconds > 0 ? "\(seconds / 86400) days" : "\(seconds) s"
    }

    /// The setting a store keeps in `meta` (`retention`: 8 bytes of milliseconds, or none
    /// for ever), replaced by `requested` if given.
    static func setting(
      _ requested: Retention?, in schema: Schema, _ transaction: borrowing WriteTransaction
    ) throws -> Duration? {
      let key = Array("retention".utf8)
      if let requested {
        let value = requested.period.map { BigEndian.bytes($0.wholeMilliseconds) } ?? []
        try transaction.put(value, forKey: key, in: schema.meta)
        return requested.period
      }
      guard try transaction.value(forKey: key, in: schema.meta) != nil else {
        try transaction.put(
          BigEndian.bytes(standard.period!.wholeMilliseconds), forKey: key, in: schema.meta)
        return standard.period
      }
      return try stored(in: schema, transaction)
    }

    /// The setting the store keeps: its period, nil for ever; ``standard``'s when it keeps
    /// none.
    static func stored(in schema: Schema, _ transaction: borrowing some Transaction & ~Copyable)
      throws -> Duration?
    {
      guard let value = try transaction.value(forKey: Array("retention".utf8), in: schema.meta)
      else { return standard.period }
      guard !value.isEmpty else { return nil }
      guard value.count == 8, let milliseconds = BigEndian.read(UInt64.self, from: value) else {
        throw VLogError(.corruptStore, "the store's retention setting is malformed")
      }
      return .milliseconds(Int64(clamping: milliseconds))
    }
  }

  /// What brings the log of each older format to ``formatVersion``; the projections are then
  /// rebuilt from it.
  static var migrations: Migrations<(EventLog, borrowing WriteTransaction) throws -> Void> {
    var migrations = Migrations<(EventLog, borrowing WriteTransaction) throws -> Void>(
      current: formatVersion)
    migrations.register("checksums and digests: XXH64 to XXH3", formats: 1..<2) {
      try $0.migrateFromXXH64(in: $1)
    }
    migrations.register("erasure indexes: objects, blobs, fields", below: 3) {
      _ = try $0.buildErasureIndexes(in: $1)
    }
    migrations.register("the object index in buckets of sequence numbers", formats: 3..<4) {
      try $0.rebuildObjectIndex(in: $1)
    }
    migrations.register("tags filed by their composed names", formats: 4..<8) {
      try $0.reindexObjects(in: $1)
    }
    migrations.register("deleted tags' names erased", below: 7) {
      _ = try $0.eraseDeletedTagNames(in: $1)
    }
    return migrations
  }

  /// Reads or writes the store's facts; migrates an older format's log.
  ///
  /// - Returns: The replica id, and whether the log was migrated (the projections are then
  ///   rebuilt in the same transaction).
  private static func initializeMeta(
    schema: Schema, dependencies: Dependencies, in transaction: borrowing WriteTransaction
  ) throws -> (ReplicaID, migrated: Bool) {
    if let (version, replica) = try storedFacts(schema: schema, in: transaction) {
      if version < formatVersion {
        for migration in migrations.pending(from: version) ?? [] {
          try migration.step(schema.eventLog, transaction)
        }
        try transaction.put(
          BigEndian.bytes(formatVersion), forKey: Keys.Meta.format, in: schema.meta)
      }
      return (replica, version < formatVersion)
    }
    let replicaID = ReplicaID(dependencies.makeIdentifier())
    try transaction.put(
      BigEndian.bytes(formatVersion), forKey: Keys.Meta.format,
      in: schema.meta)
    try transaction.put(replicaID.identifier.bytes, forKey: Keys.Meta.replica, in: schema.meta)
    return (replicaID, false)
  }

  /// The store's format and replica id, as its meta database keeps them; nil for a store not
  /// made yet.
  ///
  /// - Throws: ``VLogError`` for a format newer than this version's, or facts malformed.
  static func storedFacts(
    schema: Schema, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> (version: UInt32, replica: ReplicaID)? {
    guard let format = try transaction.value(forKey: Keys.Meta.format, in: schema.meta) else {
      return nil
    }
    guard format.count == 4 else {
      throw VLogError(.corruptStore, "the store's format marker is malformed")
    }
    let version = BigEndian.read(UInt32.self, from: format) ?? 0
    guard version <= formatVersion else {
      throw VLogError(
        .unsupportedFormat,
        "the store has format \(version), and this version of VLog reads up to "
          + "\(formatVersion); open it with a newer VLog")
    }
    return (version, try storedReplica(schema: schema, in: transaction))
  }

  /// Closes the store: ends observers' streams and closes the LMDB environment. Later calls
  /// throw.
  public func close() {
    observers.finish()
    environment.close()
  }

  /// A stream of what each committed transaction changes, from now on.
  ///
  /// Each call returns a new stream; it ends when the store closes or the consumer stops.
  public func changes() -> AsyncStream<ChangeSet> {
    observers.stream()
  }

  /// Runs `body` on the environment's serial writer queue and resumes with its result.
  func onWriter<R: Sendable>(_ body: @escaping @Sendable () throws -> R) async throws -> R {
    try await environment.onWriterQueue(body)
  }
}
