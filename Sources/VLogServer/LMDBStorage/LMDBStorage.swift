internal import Foundation
internal import LMDB
internal import VLog
internal import VLogWire

/// The server's data in one LMDB environment: accounts, sign-in tokens, and per account an event
/// log (the engine's ``EventLog``, with the same records, checksums and verification as a
/// store's) and its blobs.
///
/// Every per-account key starts with the account's 8-byte big-endian number, so one account's
/// entries form one key range and no lookup can reach another account's entries: the number comes
/// from the caller's token, never from the request.
///
/// | database | key | value |
/// |---|---|---|
/// | `meta` | `format`, `nextAccount`, `secret` | UInt32 format, UInt64 next account number, the server's secret (32 bytes) |
/// | `accounts` | normalised user name | number, scrypt parameters, salt, hash |
/// | `accountNames` | account | normalised user name |
/// | `accountKeys` | account | an end-to-end encrypted account's keys (``EncryptionRecord``) |
/// | `accountKeys` | account + `due` | nothing: a rotation of the account's content key is due |
/// | `objectKeys` | account + note or attachment id | its key, wrapped by the account's content key |
/// | `keyLinks` | account + epoch | the epoch's content key sealed by the one before |
/// | `tokens` | SHA-256 of the token | account number, expiry (ms) |
/// | `accountTokens` | account + SHA-256 of the token | nothing: each account's tokens |
/// | `log` | account + sequence | the log record: checksum + the event in the engine's encoding |
/// | `eventIDs` | account + stamp (24 bytes) | sequence |
/// | `heads` | account + `logState` | the log's state: its event-set digest, clock and counters |
/// | `objects` | account + note or attachment id + sequence | the log's object index (erasure) |
/// | `blobReferences` | account + SHA-256 + sequence | the attachments, not erased, that use a blob |
/// | `fields`, `superseded` | account + … | each note field's newest change, and replaced changes awaiting redaction (retention) |
/// | `blobs` | account + SHA-256 | the bytes |
/// | `releasedBlobs` | account + SHA-256 | when the last event using the blob was erased (8 bytes of milliseconds): the blob waits out the grace period for an undo |
/// | `throttle` | ``ThrottleKey`` (16 bytes) | count, first and last time (8 bytes each) |
///
/// Format 1 stored events without checksums and heads as sequence and digest alone; format 2
/// had no object index and kept deleted notes' content; format 3 keyed the object index by
/// object first; format 4 had no `accountNames` and `accountTokens`; format 5 kept deleted
/// tags' names. Opening such a directory migrates it to format 6 in one transaction, erasing
/// what was deleted.
///
/// Deleted means gone here too: storing a note's or attachment's deletion redacts the object's
/// events in the same transaction, and removes the blobs no event that is not redacted uses.
///
/// Writes run one at a time on a serial queue, off the server's event loops; reads run on the
/// caller's task in their own read transactions.
final class LMDBStorage: ServerStorage {
  static let formatVersion: UInt32 = 6

  let environment: Environment
  let meta: Database
  let accounts: Database
  let accountNames: Database
  let accountKeys: Database
  let objectKeys: Database
  let keyLinks: Database
  let tokens: Database
  let accountTokens: Database
  let log: Database
  let eventIDs: Database
  let heads: Database
  let objects: Database
  let blobReferences: Database
  let fields: Database
  let superseded: Database
  let blobs: Database
  let releasedBlobs: Database
  /// Throttle counters (``LMDBStorage/throttleCounts(_:)``).
  let throttle: Database
  /// The rules the accounts' logs follow: ``LogRules/standard`` but in tests.
  let logRules: LogRules
  /// Where the signals of committed writes go, to the server's live channels: sent once
  /// `write` has returned, so a channel never hears of what a reader cannot see.
  let liveFeed = LiveFeed()
  /// Pushes that arrive while a commit is in flight share the next one, and its sync.
  let pushes: GroupCommit

  private init(
    environment: Environment, logRules: LogRules, acknowledgesPushesBeforeCommit: Bool
  ) throws {
    self.environment = environment
    self.logRules = logRules
    pushes = GroupCommit(
      environment, maximumGroup: Self.maximumPushGroup,
      acknowledgesBeforeCommit: acknowledgesPushesBeforeCommit)
    func open(_ name: String) throws -> Database {
      try environment.openDatabase(named: name, flags: .create)
    }
    meta = try open("meta")
    accounts = try open("accounts")
    accountNames = try open("accountNames")
    accountKeys = try open("accountKeys")
    objectKeys = try open("objectKeys")
    keyLinks = try open("keyLinks")
    tokens = try open("tokens")
    accountTokens = try open("accountTokens")
    log = try open("log")
    eventIDs = try open("eventIDs")
    heads = try open("heads")
    objects = try open("objects")
    blobReferences = try open("blobReferences")
    fields = try open("fields")
    superseded = try open("superseded")
    blobs = try open("blobs")
    releasedBlobs = try open("releasedBlobs")
    throttle = try open("throttle")
  }

  /// Opens or creates the server's data directory.
  static func open(
    at path: String, durability: Environment.Durability, logRules: LogRules = .standard,
    acknowledgesPushesBeforeCommit: Bool = false
  ) throws -> LMDBStorage {
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    let environment = try Environment.open(
      at: path, configuration: configuration(durability: durability))
    do {
      let store = try LMDBStorage(
        environment: environment, logRules: logRules,
        acknowledgesPushesBeforeCommit: acknowledgesPushesBeforeCommit)
      try store.checkFormat()
      return store
    } catch {
      environment.close()
      throw error
    }
  }

  func close() { environment.close() }

  /// Takes the lock that lets one server at a time serve the directory (`serve.lock`), held
  /// until it is released or the process ends. Reading the directory (`vlog verify`) takes
  /// no such lock: LMDB lets other processes read while one writes.
  ///
  /// - Throws: ``StorageError`` `unusable` when another server serves it.
  func lockForServing() throws -> FileLock? {
    let directory = environment.path
    let busy = LMDBError(
      code: .alreadyOpen, operation: "serve", path: directory,
      message: "another server is serving '\(directory)'; stop it, or serve another directory")
    let lock: FileLock?
    do {
      lock = try FileLock(directory: directory, fileName: "serve.lock", exclusive: true, busy: busy)
    } catch {
      guard error.code == .alreadyOpen else { throw error }
      throw StorageError.unusable(busy.message)
    }
    return lock
  }

  /// Ready while the environment is open: it closes itself when a grown map cannot be made
  /// (the address space is exhausted), and only a restart of the server opens it again.
  func isReady() async -> Bool { environment.isOpen }

  var backend: String { "lmdb" }

  /// The LMDB configuration of a data directory.
  static func configuration(durability: Environment.Durability) -> Environment.Configuration {
    .init(
      mapSize: 64 << 20, maximumMapSize: 1 << 40, maximumDatabases: 32, durability: durability)
  }

  /// What brings a data directory of each older format to ``formatVersion``.
  static var migrations: Migrations<(LMDBStorage, borrowing WriteTransaction) throws -> Void> {
    var migrations = Migrations<(LMDBStorage, borrowing WriteTransaction) throws -> Void>(
      current: formatVersion)
    migrations.register("checksums of events, heads with their clocks", formats: 1..<2) {
      try $0.migrateFromFormat1(in: $1)
    }
    migrations.register("accounts indexed by number, tokens by account", below: 5) {
      try $0.buildAccountIndexes(in: $1)
    }
    migrations.register("erasure indexes: objects, blobs, fields", below: 3) {
      try $0.buildErasureIndexes(in: $1)
    }
    migrations.register("the object index in buckets of sequence numbers", formats: 3..<4) {
      storage, transaction in
      for account in try storage.logAccounts(in: transaction) {
        try storage.eventLog(of: account).rebuildObjectIndex(in: transaction)
      }
    }
    migrations.register("deleted tags' names erased", below: 6) { storage, transaction in
      for account in try storage.logAccounts(in: transaction) {
        _ = try storage.eventLog(of: account).eraseDeletedTagNames(in: transaction)
      }
    }
    return migrations
  }

  func checkFormat() throws {
    try write { transaction in
      let key = Array("format".utf8)
      guard let format = try transaction.value(forKey: key, in: meta) else {
        try transaction.put(BigEndian.bytes(Self.formatVersion), forKey: key, in: meta)
        return
      }
      let version = format.count == 4 ? BigEndian.read(UInt32.self, from: format) ?? 0 : .max
      guard let pending = Self.migrations.pending(from: version) else {
        throw StorageError.unusable(
          "the data directory has format \(version); this server reads up to "
            + "\(Self.formatVersion)")
      }
      guard version < Self.formatVersion else { return }
      for migration in pending { try migration.step(self, transaction) }
      try transaction.put(BigEndian.bytes(Self.formatVersion), forKey: key, in: meta)
    }
  }

  /// Adds a checksum to every stored event and recomputes every account's log state from its
  /// index.
  func migrateFromFormat1(in transaction: borrowing WriteTransaction) throws {
    try EventLog.rewriteValues(in: log, transaction: transaction) { _, event in
      var record = [UInt8](repeating: 0, count: LogRecord.headerSize + event.count)
      record.withUnsafeMutableBytes { LogRecord.write(event, into: $0) }
      return record
    }
    var accounts: [UInt64] = []
    try transaction.forEach(in: heads) { key, _ in
      if key.count == 8, let account = BigEndian.read(UInt64.self, from: key) {
        accounts.append(account)
      }
    }
    for account in accounts {
      try transaction.delete(forKey: BigEndian.bytes(account), in: heads)
      try eventLog(of: account).recoverState(in: transaction)
    }
  }

  /// Indexes accounts by number and tokens by account.
  func buildAccountIndexes(in transaction: borrowing WriteTransaction) throws {
    var names: [(UInt64, [UInt8])] = []
    try transaction.forEach(in: accounts) { key, record in
      if let number = BigEndian.read(UInt64.self, from: record) {
        names.append((number, Array(key)))
      }
    }
    for (number, name) in names {
      try transaction.put(name, forKey: BigEndian.bytes(number), in: accountNames)
    }
    var owned: [[UInt8]] = []
    try transaction.forEach(in: tokens) { key, record in
      if record.count == 16, let account = BigEndian.read(UInt64.self, from: record) {
        owned.append(BigEndian.bytes(account) + Array(key))
      }
    }
    for key in owned { try transaction.put([], forKey: key, in: accountTokens) }
  }

  /// Indexes every account's log by object and blob, erasing the content of what was deleted
  /// and removing the blobs only erased events used.
  func buildErasureIndexes(in transaction: borrowing WriteTransaction) throws {
    for account in try logAccounts(in: transaction) {
      let log = eventLog(of: account)
      _ = try log.buildErasureIndexes(in: transaction)
      var unused: [[UInt8]] = []
      try transaction.forEach(in: blobs, range: .prefix(BigEndian.bytes(account))) { key, _ in
        guard key.count == 40, let hash = BlobHash(bytes: Array(key[8...])) else { return }
        if try !log.references(hash, in: transaction) { unused.append(Array(key)) }
      }
      for key in unused { _ = try transaction.delete(forKey: key, in: blobs) }
    }
  }

  /// The accounts that have a log: every one with a state record (format 1's are rebuilt
  /// before this is read), and every account.
  func logAccounts(in transaction: borrowing some Transaction & ~Copyable) throws
    -> [UInt64]
  {
    var logs = Set(try accountNumbers(in: transaction))
    try transaction.forEach(in: heads) { key, _ in
      if key.count == 16, let account = BigEndian.read(UInt64.self, from: key) {
        logs.insert(account)
      }
    }
    return logs.sorted()
  }

  /// The numbers of every account.
  func accountNumbers(in transaction: borrowing some Transaction & ~Copyable) throws
    -> [UInt64]
  {
    var numbers: [UInt64] = []
    try transaction.forEach(in: accounts) { _, record in
      if let number = BigEndian.read(UInt64.self, from: record) { numbers.append(number) }
    }
    return numbers.sorted()
  }

  /// The event log of an account.
  func eventLog(of account: UInt64) -> EventLog {
    var log = EventLog(
      entries: log, index: eventIDs, state: heads, objects: objects,
      blobReferences: blobReferences, fields: fields, superseded: superseded,
      prefix: BigEndian.bytes(account))
    log.rules = logRules
    return log
  }

  /// Redacts, in every account's log, the replaced changes whose retention period has passed
  /// at `now` (wall-clock milliseconds), and removes the blobs that only they used.
  ///
  /// - Returns: The number of changes redacted.
  @discardableResult
  func applyRetention(_ retention: Duration?, now: Milliseconds) throws -> Int {
    guard retention != nil else { return 0 }
    return try write { transaction in
      var redacted = 0
      for account in try accountNumbers(in: transaction) {
        var appender = try eventLog(of: account).appender(in: transaction)
        redacted += try appender.applyRetention(retention, now: now, in: transaction)
        try commit(&appender, account: account, now: now, in: transaction)
      }
      return redacted
    }
  }

  /// Checks every account's event log (see ``EventLog``): checksums, index, digests, erasure,
  /// and with a retention period, that no change replaced longer ago keeps its values.
  func verify(retention: (period: Duration?, now: Milliseconds) = (nil, .zero)) throws
    -> ServerVerification
  {
    try read { transaction in
      let accounts = try accountNumbers(in: transaction)
      var faults: [VerificationFault] = []
      var events = 0
      for account in accounts {
        let log = eventLog(of: account)
        for fault in try log.verify(in: transaction, retention: retention) {
          faults.append(
            VerificationFault(kind: fault.kind, message: "account \(account): \(fault.message)"))
        }
        events += Int(clamping: try log.lastSequence(in: transaction))
      }
      return ServerVerification(accounts: accounts.count, events: events, faults: faults)
    }
  }

  // MARK: - Transactions

  // LMDB's failures, and the engine's, leave the storage as `StorageError`s: these are the
  // only ways into the environment.

  /// Runs `body` on the environment's writer queue.
  func onWriter<R: Sendable>(_ body: @escaping @Sendable () throws -> R) async throws -> R {
    try await StorageError.converting { try await environment.onWriterQueue(body) }
  }

  /// Runs a read transaction.
  func read<R>(_ body: (borrowing ReadTransaction) throws -> R) throws -> R {
    try StorageError.converting { try environment.read(body) }
  }

  /// Runs a write transaction (on the writer queue: see ``onWriter(_:)``).
  func write<R>(_ body: (borrowing WriteTransaction) throws -> R) throws -> R {
    try StorageError.converting { try environment.write(body) }
  }

  /// Runs a push in the next group commit (``GroupCommit/write(_:)``).
  func groupWrite<R: Sendable>(
    _ body: @escaping @Sendable (borrowing WriteTransaction) throws -> R
  ) async throws -> R {
    try await StorageError.converting { try await pushes.write(body) }
  }
}
