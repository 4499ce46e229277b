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
  private let meta: Database
  private let accounts: Database
  private let accountNames: Database
  private let accountKeys: Database
  private let objectKeys: Database
  private let keyLinks: Database
  private let tokens: Database
  private let accountTokens: Database
  private let log: Database
  private let eventIDs: Database
  private let heads: Database
  private let objects: Database
  private let blobReferences: Database
  private let fields: Database
  private let superseded: Database
  private let blobs: Database
  private let releasedBlobs: Database
  /// Throttle counters (``LMDBStorage/throttleCounts(_:)``).
  let throttle: Database
  /// The rules the accounts' logs follow: ``LogRules/standard`` but in tests.
  private let logRules: LogRules
  /// Where the signals of committed writes go, to the server's live channels: sent once
  /// `write` has returned, so a channel never hears of what a reader cannot see.
  let liveFeed = LiveFeed()
  /// Pushes that arrive while a commit is in flight share the next one, and its sync.
  private let pushes: GroupCommit

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

  func isReady() async -> Bool { true }

  var backend: String { "lmdb" }

  /// The LMDB configuration of a data directory.
  static func configuration(durability: Environment.Durability) -> Environment.Configuration {
    .init(
      mapSize: 64 << 20, maximumMapSize: 1 << 40, maximumDatabases: 32, durability: durability)
  }

  private func checkFormat() throws {
    try environment.write { transaction in
      let key = Array("format".utf8)
      guard let format = try transaction.value(forKey: key, in: meta) else {
        try transaction.put(BigEndian.bytes(Self.formatVersion), forKey: key, in: meta)
        return
      }
      let version = format.count == 4 ? BigEndian.read(UInt32.self, from: format) ?? 0 : .max
      guard version <= Self.formatVersion else {
        throw StorageError.unusable(
          "the data directory has format \(version); this server reads up to "
            + "\(Self.formatVersion)")
      }
      guard version < Self.formatVersion else { return }
      if version == 1 { try migrateFromFormat1(in: transaction) }
      if version < 5 { try buildAccountIndexes(in: transaction) }
      if version < 3 {
        try buildErasureIndexes(in: transaction)
      } else if version < 4 {
        for account in try logAccounts(in: transaction) {
          try eventLog(of: account).rebuildObjectIndex(in: transaction)
        }
      }
      if version < 6 {
        for account in try logAccounts(in: transaction) {
          _ = try eventLog(of: account).eraseDeletedTagNames(in: transaction)
        }
      }
      try transaction.put(BigEndian.bytes(Self.formatVersion), forKey: key, in: meta)
    }
  }

  /// Adds a checksum to every stored event and recomputes every account's log state from its
  /// index.
  private func migrateFromFormat1(in transaction: borrowing WriteTransaction) throws {
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
  private func buildAccountIndexes(in transaction: borrowing WriteTransaction) throws {
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
  private func buildErasureIndexes(in transaction: borrowing WriteTransaction) throws {
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
  private func logAccounts(in transaction: borrowing some Transaction & ~Copyable) throws
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
  private func accountNumbers(in transaction: borrowing some Transaction & ~Copyable) throws
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
  func applyRetention(_ retention: Duration?, now: UInt64) throws -> Int {
    guard retention != nil else { return 0 }
    return try environment.write { transaction in
      var redacted = 0
      for account in try accountNumbers(in: transaction) {
        var appender = try eventLog(of: account).appender(in: transaction)
        redacted += try appender.applyRetention(retention, now: now, in: transaction)
        try appender.commit(in: transaction)
      }
      return redacted
    }
  }

  /// Checks every account's event log (see ``EventLog``): checksums, index, digests, erasure,
  /// and with a retention period, that no change replaced longer ago keeps its values.
  func verify(retention: (period: Duration?, now: UInt64) = (nil, 0)) throws
    -> ServerVerification
  {
    try environment.read { transaction in
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

  /// Runs `body` on the environment's writer queue.
  func onWriter<R: Sendable>(_ body: @escaping @Sendable () throws -> R) async throws -> R {
    try await environment.onWriterQueue(body)
  }

  // MARK: - Accounts and tokens

  /// Creates an account.
  ///
  /// - Throws: ``StorageError`` `accountExists` if the name is taken.
  func createAccount(named name: String, password: PasswordHash, encryption: EncryptionRecord?)
    async throws
  {
    try await onWriter { [self] in
      try environment.write { transaction in
        let key = Array(name.utf8)
        guard try !transaction.containsValue(forKey: key, in: accounts) else {
          throw StorageError.accountExists(name)
        }
        let counterKey = Array("nextAccount".utf8)
        let number =
          try transaction.value(forKey: counterKey, in: meta).flatMap {
            BigEndian.read(UInt64.self, from: $0)
          } ?? 1
        try transaction.put(BigEndian.bytes(number + 1), forKey: counterKey, in: meta)
        try transaction.put(
          BigEndian.bytes(number) + password.encoded, forKey: key, in: accounts)
        try transaction.put(key, forKey: BigEndian.bytes(number), in: accountNames)
        if let encryption {
          try transaction.put(encryption.encoded, forKey: BigEndian.bytes(number), in: accountKeys)
        }
      }
    }
  }

  func encryption(of account: UInt64) async throws -> EncryptionRecord? {
    try environment.read { transaction in try encryption(of: account, in: transaction) }
  }

  private func encryption(
    of account: UInt64, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> EncryptionRecord? {
    guard let bytes = try transaction.value(forKey: BigEndian.bytes(account), in: accountKeys)
    else { return nil }
    guard var record = EncryptionRecord(decoding: bytes) else {
      throw StorageError.damaged("account \(account)'s keys are not a record of keys")
    }
    record.rotationDue = try transaction.containsValue(
      forKey: Self.rotationDueKey(account), in: accountKeys)
    return record
  }

  private static func rotationDueKey(_ account: UInt64) -> [UInt8] {
    BigEndian.bytes(account) + Array("due".utf8)
  }

  /// The current epoch of an encrypted account.
  ///
  /// - Throws: ``StorageError`` `keysChanged` if it is not `expected` (or the account is not
  ///   encrypted).
  private func checkEpoch(
    _ expected: UInt64, of account: UInt64, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> EncryptionRecord {
    guard let record = try encryption(of: account, in: transaction) else {
      throw StorageError.keysChanged("the account is not end-to-end encrypted")
    }
    guard record.epoch == expected else {
      throw StorageError.keysChanged(
        "the account's keys are at epoch \(record.epoch), not \(expected)")
    }
    return record
  }

  func storeObjectKeys(_ keys: [Identifier: [UInt8]], account: UInt64, epoch: UInt64)
    async throws -> Int
  {
    let log = eventLog(of: account)
    return try await onWriter { [self] in
      try environment.write { transaction in
        _ = try checkEpoch(epoch, of: account, in: transaction)
        var stored = 0
        for (object, wrapped) in keys {
          let key = BigEndian.bytes(account) + object.bytes
          guard try !transaction.containsValue(forKey: key, in: objectKeys),
            try log.deletion(of: object, in: transaction) == nil
          else { continue }
          try transaction.put(wrapped, forKey: key, in: objectKeys)
          stored += 1
        }
        return stored
      }
    }
  }

  func objectKeys(of objects: [Identifier], account: UInt64) async throws -> ObjectKeyPage {
    try environment.read { transaction in
      var page = ObjectKeyPage(
        epoch: try encryption(of: account, in: transaction)?.epoch ?? 0, keys: [:])
      for object in objects {
        if let wrapped = try transaction.value(
          forKey: BigEndian.bytes(account) + object.bytes, in: objectKeys)
        {
          page.keys[object] = wrapped
        }
      }
      return page
    }
  }

  func objectKeys(account: UInt64, after: Identifier?, limit: Int) async throws -> ObjectKeyPage {
    try environment.read { transaction in
      var page = ObjectKeyPage(
        epoch: try encryption(of: account, in: transaction)?.epoch ?? 0, keys: [:])
      let prefix = BigEndian.bytes(account)
      let start = after.map { prefix + $0.bytes + [0] } ?? prefix
      try transaction.withEntries(in: objectKeys, range: .from(start)) { entries in
        while let (object, wrapped) = try entries.next({ key, value in
          (Self.object(ofKey: key, account: account), Array(value))
        }) {
          guard let object else { break }
          guard page.keys.count < limit else {
            page.more = true
            break
          }
          page.keys[object] = wrapped
        }
      }
      return page
    }
  }

  /// The object an `objectKeys` key names, nil past the account's keys.
  private static func object(ofKey key: UnsafeRawBufferPointer, account: UInt64)
    -> Identifier?
  {
    guard key.count == 24, key.loadUnaligned(as: UInt64.self).bigEndian == account else {
      return nil
    }
    return Identifier(bytes: key, at: 8)
  }

  func rotateKeys(
    account: UInt64, by rotation: KeyRotation.Checked, recoverySecret: PasswordHash?,
    keeping: [UInt8]?
  ) async throws
    -> EncryptionRecord
  {
    let record = try await onWriter { [self] in
      try environment.write { transaction in
        let record = try checkEpoch(rotation.epoch, of: account, in: transaction)
        let prefix = BigEndian.bytes(account)
        var held: [Identifier] = []
        try transaction.forEach(in: objectKeys, range: .prefix(prefix)) { key, _ in
          if let object = Self.object(ofKey: key, account: account) { held.append(object) }
        }
        for object in held {
          guard let wrapped = rotation.keys[object] else {
            throw StorageError.keysChanged(
              "the rotation lacks the key of object \(object), which the account holds")
          }
          try transaction.put(wrapped, forKey: prefix + object.bytes, in: objectKeys)
        }
        let next = record.rotated(by: rotation, recoverySecret: recoverySecret)
        // A re-keying has no link: nothing leads to its keys from the epochs before.
        if let link = rotation.link {
          try transaction.put(link, forKey: prefix + BigEndian.bytes(next.epoch), in: keyLinks)
        }
        try transaction.put(next.encoded, forKey: prefix, in: accountKeys)
        _ = try transaction.delete(forKey: Self.rotationDueKey(account), in: accountKeys)
        if rotation.link == nil {
          for hash in try tokenHashes(of: account, in: transaction) where hash != keeping {
            _ = try transaction.delete(forKey: hash, in: tokens)
            _ = try transaction.delete(forKey: prefix + hash, in: accountTokens)
          }
        }
        return next
      }
    }
    if rotation.link == nil {
      liveFeed.send(.passwordChanged(account: account, keeping: keeping))
    }
    return record
  }

  func links(account: UInt64, after epoch: UInt64) async throws -> [[UInt8]] {
    try environment.read { transaction in
      var links: [[UInt8]] = []
      let prefix = BigEndian.bytes(account)
      guard epoch < .max else { return [] }
      try transaction.forEach(
        in: keyLinks,
        range: .from(prefix + BigEndian.bytes(epoch + 1), to: BigEndian.bytes(account + 1))
      ) { _, value in links.append(Array(value)) }
      return links
    }
  }

  /// The name and password of an account, by number.
  func account(number: UInt64) async throws -> AccountRecord? {
    try environment.read { transaction in
      guard let name = try transaction.value(forKey: BigEndian.bytes(number), in: accountNames),
        let record = try transaction.value(forKey: name, in: accounts), record.count > 8,
        let password = PasswordHash(decoding: record[8...])
      else { return nil }
      return AccountRecord(
        number: number, name: String(decoding: name, as: UTF8.self), password: password)
    }
  }

  /// An account's tokens.
  func tokens(of account: UInt64) async throws -> [TokenRecord] {
    try environment.read { transaction in
      try tokenHashes(of: account, in: transaction).compactMap { hash in
        guard let record = try transaction.value(forKey: hash, in: tokens), record.count == 16,
          let expiry = BigEndian.read(Int64.self, from: record, at: 8)
        else { return nil }
        return TokenRecord(hash: hash, account: account, expiresAt: expiry)
      }
    }
  }

  /// Replaces an account's password and revokes every token of it but `keeping`.
  func setPassword(
    account: UInt64, password: PasswordHash, keeping: [UInt8]?, seal: PasswordSeal.Checked?
  ) async throws {
    try await onWriter { [self] in
      try environment.write { transaction in
        let name = try self.name(of: account, in: transaction)
        if let seal {
          let record = try checkEpoch(seal.epoch, of: account, in: transaction)
          try transaction.put(
            record.resealed(by: seal).encoded, forKey: BigEndian.bytes(account), in: accountKeys)
        }
        try transaction.put(
          BigEndian.bytes(account) + password.encoded, forKey: name, in: accounts)
        for hash in try tokenHashes(of: account, in: transaction) where hash != keeping {
          _ = try transaction.delete(forKey: hash, in: tokens)
          _ = try transaction.delete(forKey: BigEndian.bytes(account) + hash, in: accountTokens)
        }
      }
    }
    liveFeed.send(.passwordChanged(account: account, keeping: keeping))
  }

  func serverSecret() async throws -> [UInt8] {
    let key = Array("secret".utf8)
    if let secret = try environment.read({ try $0.value(forKey: key, in: meta) }) {
      return Array(secret)
    }
    return try await onWriter { [self] in
      try environment.write { transaction in
        if let secret = try transaction.value(forKey: key, in: meta) { return Array(secret) }
        var generator = SystemRandomNumberGenerator()
        let secret = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        try transaction.put(secret, forKey: key, in: meta)
        return secret
      }
    }
  }

  func rehashPassword(account: UInt64, from current: PasswordHash, to new: PasswordHash)
    async throws -> Bool
  {
    try await onWriter { [self] in
      try environment.write { transaction in
        let name = try self.name(of: account, in: transaction)
        guard let record = try transaction.value(forKey: name, in: accounts),
          Array(record) == BigEndian.bytes(account) + current.encoded
        else { return false }
        try transaction.put(BigEndian.bytes(account) + new.encoded, forKey: name, in: accounts)
        return true
      }
    }
  }

  /// Deletes an account and everything of it — its log and indexes, blobs, tokens, name — in one
  /// transaction. Its number is never given again.
  func deleteAccount(_ account: UInt64) async throws {
    try await onWriter { [self] in
      try environment.write { transaction in
        let name = try self.name(of: account, in: transaction)
        let prefix = BigEndian.bytes(account)
        for hash in try tokenHashes(of: account, in: transaction) {
          _ = try transaction.delete(forKey: hash, in: tokens)
        }
        for database in [
          accountTokens, log, eventIDs, heads, objects, blobReferences, fields, superseded,
          blobs, releasedBlobs, accountKeys, objectKeys, keyLinks,
        ] {
          var keys: [[UInt8]] = []
          try transaction.forEach(in: database, range: .prefix(prefix)) { key, _ in
            keys.append(Array(key))
          }
          for key in keys { _ = try transaction.delete(forKey: key, in: database) }
        }
        _ = try transaction.delete(forKey: prefix, in: accountNames)
        _ = try transaction.delete(forKey: name, in: accounts)
      }
    }
    liveFeed.send(.accountDeleted(account: account))
  }

  /// The stored name of an account that exists.
  ///
  /// - Throws: ``StorageError`` `accountDeleted` when it does not (deleted by another request
  ///   after this one's token was checked).
  private func name(of account: UInt64, in transaction: borrowing some Transaction & ~Copyable)
    throws -> [UInt8]
  {
    guard let name = try transaction.value(forKey: BigEndian.bytes(account), in: accountNames)
    else { throw StorageError.accountDeleted }
    return name
  }

  private func tokenHashes(
    of account: UInt64, in transaction: borrowing some Transaction & ~Copyable
  )
    throws -> [[UInt8]]
  {
    var hashes: [[UInt8]] = []
    try transaction.forEach(in: accountTokens, range: .prefix(BigEndian.bytes(account))) {
      key, _ in
      if key.count == 40 { hashes.append(Array(key[8...])) }
    }
    return hashes
  }

  /// The account stored under a normalised user name.
  func account(named name: String) async throws -> AccountRecord? {
    try environment.read { transaction in
      guard let record = try transaction.value(forKey: Array(name.utf8), in: accounts),
        record.count > 8, let number = BigEndian.read(UInt64.self, from: record),
        let password = PasswordHash(decoding: record[8...])
      else { return nil }
      return AccountRecord(number: number, name: name, password: password)
    }
  }

  /// Stores the hash of a new token.
  func storeToken(hash: [UInt8], account: UInt64, expiresAt milliseconds: Int64) async throws {
    try await onWriter { [self] in
      try environment.write { transaction in
        _ = try name(of: account, in: transaction)
        try transaction.put(
          BigEndian.bytes(account) + BigEndian.bytes(milliseconds), forKey: hash,
          in: tokens)
        try transaction.put([], forKey: BigEndian.bytes(account) + hash, in: accountTokens)
      }
    }
  }

  /// The account and expiry of a token, by the token's hash.
  func token(hash: [UInt8]) async throws -> TokenRecord? {
    try await tokens(hashes: [hash]).first
  }

  /// The tokens of `hashes` that exist, in one read transaction.
  func tokens(hashes: [[UInt8]]) async throws -> [TokenRecord] {
    try environment.read { transaction in
      try hashes.compactMap { hash in
        guard let record = try transaction.value(forKey: hash, in: tokens), record.count == 16,
          let account = BigEndian.read(UInt64.self, from: record, at: 0),
          let expiry = BigEndian.read(Int64.self, from: record, at: 8)
        else { return nil }
        return TokenRecord(hash: hash, account: account, expiresAt: expiry)
      }
    }
  }

  /// Revokes a token. Returns whether it existed.
  @discardableResult
  func deleteToken(hash: [UInt8]) async throws -> Bool {
    let (existed, account) = try await onWriter { [self] () -> (Bool, UInt64?) in
      try environment.write { transaction in
        guard let record = try transaction.value(forKey: hash, in: tokens) else {
          return (false, nil)
        }
        let account = record.count == 16 ? BigEndian.read(UInt64.self, from: record) : nil
        if let account {
          _ = try transaction.delete(forKey: BigEndian.bytes(account) + hash, in: accountTokens)
        }
        return (try transaction.delete(forKey: hash, in: tokens), account)
      }
    }
    if let account { liveFeed.send(.tokenRevoked(account: account, hash: hash)) }
    return existed
  }

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
    account: UInt64, pushing events: [Event], after cursor: UInt64, limit: Int,
    maximumBytes: Int = .max, retention: (period: Duration?, now: UInt64) = (nil, 0)
  ) async throws -> SyncOutcome {
    let log = eventLog(of: account)
    if events.isEmpty {
      return try environment.read { transaction in
        try page(
          log, state: try log.state(in: transaction), after: cursor,
          limit: (limit, maximumBytes), skipping: [], stored: 0, in: transaction)
      }
    }
    let outcome = try await pushes.write { [self] transaction in
      // An account deleted after the request's token was checked takes nothing more.
      _ = try name(of: account, in: transaction)
      var appender = try log.appender(in: transaction)
      let last = appender.state.lastSequence
      guard cursor <= last else { throw StorageError.invalidCursor(cursor, last) }
      var pushed = Set<Stamp>()
      pushed.reserveCapacity(events.count)
      for event in events {
        guard pushed.insert(event.stamp).inserted,
          try !log.contains(event.stamp, in: transaction)
        else { continue }
        try appender.append(event, local: false, in: transaction)
      }
      try appender.applyRetention(retention.period, now: retention.now, in: transaction)
      try appender.commit(in: transaction)
      // A deleted object's key goes with it; the content key that wrapped it is then due to
      // rotate.
      var erasedKeys = false
      for object in appender.deletedObjects {
        erasedKeys =
          try transaction.delete(forKey: BigEndian.bytes(account) + object.bytes, in: objectKeys)
          || erasedKeys
      }
      if erasedKeys {
        try transaction.put([], forKey: Self.rotationDueKey(account), in: accountKeys)
      }
      // Blobs that only erased events used wait out the grace period (for an undo), then go.
      for hash in appender.releasedBlobs where try !log.references(hash, in: transaction) {
        let key = BigEndian.bytes(account) + hash.bytes
        if try transaction.containsValue(forKey: key, in: blobs) {
          try transaction.put(BigEndian.bytes(retention.now), forKey: key, in: releasedBlobs)
        }
      }
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
    try environment.read { transaction in
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
  private func page(
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
    return try environment.read { transaction in
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
    return try environment.read { transaction in
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

  // MARK: - Blobs

  /// Stores an account's blob. Returns false if it was already stored; a released one then
  /// waits a whole grace period again from `now`.
  func storeBlob(_ bytes: [UInt8], hash: BlobHash, account: UInt64, now: UInt64) async throws
    -> Bool
  {
    try await onWriter { [self] in
      try environment.write { transaction in
        _ = try name(of: account, in: transaction)
        let key = BigEndian.bytes(account) + hash.bytes
        guard try !transaction.containsValue(forKey: key, in: blobs) else {
          if try transaction.containsValue(forKey: key, in: releasedBlobs) {
            try transaction.put(BigEndian.bytes(now), forKey: key, in: releasedBlobs)
          }
          return false
        }
        try transaction.put(bytes, forKey: key, in: blobs)
        return true
      }
    }
  }

  /// An account's blob.
  func blob(_ hash: BlobHash, account: UInt64) async throws -> [UInt8]? {
    try environment.read { transaction in
      try transaction.value(forKey: BigEndian.bytes(account) + hash.bytes, in: blobs)
    }
  }

  /// The hashes whose blobs the account does not hold, or released before `releasedBefore`.
  func missingBlobs(_ hashes: [BlobHash], account: UInt64, releasedBefore: UInt64) async throws
    -> [BlobHash]
  {
    try environment.read { transaction in
      let prefix = BigEndian.bytes(account)
      return try hashes.filter { hash in
        let key = prefix + hash.bytes
        guard try transaction.containsValue(forKey: key, in: blobs) else { return true }
        let released = try transaction.withValue(forKey: key, in: releasedBlobs) {
          $0.flatMap { BigEndian.read(UInt64.self, from: Array($0)) }
        }
        return released.map { $0 < releasedBefore } ?? false
      }
    }
  }

  /// Removes the blobs released before `releasedBefore` that no event uses again, and forgets
  /// the release of those an event uses again.
  ///
  /// - Returns: The number of blobs removed.
  func sweepReleasedBlobs(releasedBefore: UInt64) async throws -> Int {
    try await onWriter { [self] in
      try environment.write { transaction in
        var due: [[UInt8]] = []
        try transaction.forEach(in: releasedBlobs) { key, value in
          guard let released = BigEndian.read(UInt64.self, from: Array(value)),
            released < releasedBefore
          else { return }
          due.append(Array(key))
        }
        var removed = 0
        for key in due {
          _ = try transaction.delete(forKey: key, in: releasedBlobs)
          guard key.count == 40, let account = BigEndian.read(UInt64.self, from: Array(key[..<8])),
            let hash = BlobHash(bytes: Array(key[8...])),
            try !eventLog(of: account).references(hash, in: transaction)
          else { continue }
          if try transaction.delete(forKey: key, in: blobs) { removed += 1 }
        }
        return removed
      }
    }
  }
}
