internal import Dispatch
internal import Foundation
internal import LMDB
internal import VLog

/// The server's data in one LMDB environment: accounts, sign-in tokens, and per account an event
/// log, an index of its event ids, its head (last sequence and event-set digest) and its blobs.
///
/// Every per-account key starts with the account's 8-byte big-endian number, so one account's
/// entries form one key range and no lookup can reach another account's entries: the number comes
/// from the caller's token, never from the request.
///
/// | database | key | value |
/// |---|---|---|
/// | `meta` | `format`, `nextAccount` | UInt32 format, UInt64 next account number |
/// | `accounts` | normalised user name | number, scrypt parameters, salt, hash |
/// | `tokens` | SHA-256 of the token | account number, expiry (ms) |
/// | `log` | account + sequence | the event, in the engine's binary encoding |
/// | `eventIDs` | account + stamp (24 bytes) | sequence |
/// | `heads` | account | last sequence, event-set digest |
/// | `blobs` | account + SHA-256 | the bytes |
///
/// Writes run one at a time on a serial queue, off the server's event loops; reads run on the
/// caller's task in their own read transactions.
final class ServerStore: Sendable {
  static let formatVersion: UInt32 = 1

  let environment: Environment
  private let meta: Database
  private let accounts: Database
  private let tokens: Database
  private let log: Database
  private let eventIDs: Database
  private let heads: Database
  private let blobs: Database
  private let writer = DispatchQueue(label: "VLogServer.ServerStore.writer")

  private init(environment: Environment) throws {
    self.environment = environment
    func open(_ name: String) throws -> Database {
      try environment.openDatabase(named: name, flags: .create)
    }
    meta = try open("meta")
    accounts = try open("accounts")
    tokens = try open("tokens")
    log = try open("log")
    eventIDs = try open("eventIDs")
    heads = try open("heads")
    blobs = try open("blobs")
  }

  /// Opens or creates the server's data directory.
  static func open(at path: String, durability: Environment.Durability) throws -> ServerStore {
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    let environment = try Environment.open(
      at: path,
      configuration: .init(
        mapSize: 64 << 20, maximumMapSize: 1 << 40, maximumDatabases: 8,
        durability: durability))
    do {
      let store = try ServerStore(environment: environment)
      try store.checkFormat()
      return store
    } catch {
      environment.close()
      throw error
    }
  }

  func close() { environment.close() }

  private func checkFormat() throws {
    try environment.write { transaction in
      let key = Array("format".utf8)
      if let format = try transaction.value(forKey: key, in: meta) {
        let version = format.count == 4 ? Self.uint32(format) : .max
        guard version <= Self.formatVersion else {
          throw ServerError.storage(
            "the data directory has format \(version); this server reads up to "
              + "\(Self.formatVersion)")
        }
      } else {
        try transaction.put(Self.bytes(Self.formatVersion), forKey: key, in: meta)
      }
    }
  }

  /// Runs `body` on the writer queue.
  private func onWriter<R: Sendable>(_ body: @escaping @Sendable () throws -> R) async throws -> R {
    try await withCheckedThrowingContinuation { continuation in
      writer.async { continuation.resume(with: Result { try body() }) }
    }
  }

  // MARK: - Accounts and tokens

  /// Creates an account.
  ///
  /// - Throws: ``ServerError`` `accountExists` if the name is taken.
  func createAccount(named name: String, password: PasswordHash) async throws {
    try await onWriter { [self] in
      try environment.write { transaction in
        let key = Array(name.utf8)
        guard try !transaction.containsValue(forKey: key, in: accounts) else {
          throw ServerError.accountExists(name)
        }
        let counterKey = Array("nextAccount".utf8)
        let number = try transaction.value(forKey: counterKey, in: meta).map(Self.uint64) ?? 1
        try transaction.put(Self.bytes(number + 1), forKey: counterKey, in: meta)
        try transaction.put(
          Self.bytes(number) + password.encoded, forKey: key, in: accounts)
      }
    }
  }

  /// The account stored under a normalised user name.
  func account(named name: String) throws -> (number: UInt64, password: PasswordHash)? {
    try environment.read { transaction in
      guard let record = try transaction.value(forKey: Array(name.utf8), in: accounts),
        record.count > 8, let password = PasswordHash(decoding: record[8...])
      else { return nil }
      return (Self.uint64(record[..<8]), password)
    }
  }

  /// Stores the hash of a new token.
  func storeToken(hash: [UInt8], account: UInt64, expiresAt milliseconds: Int64) async throws {
    try await onWriter { [self] in
      try environment.write { transaction in
        try transaction.put(
          Self.bytes(account) + Self.bytes(UInt64(bitPattern: milliseconds)), forKey: hash,
          in: tokens)
      }
    }
  }

  /// The account and expiry of a token, by the token's hash.
  func token(hash: [UInt8]) throws -> (account: UInt64, expiresAt: Int64)? {
    try environment.read { transaction in
      guard let record = try transaction.value(forKey: hash, in: tokens), record.count == 16
      else { return nil }
      return (Self.uint64(record[..<8]), Int64(bitPattern: Self.uint64(record[8...])))
    }
  }

  /// Revokes a token. Returns whether it existed.
  @discardableResult
  func deleteToken(hash: [UInt8]) async throws -> Bool {
    try await onWriter { [self] in
      try environment.write { transaction in try transaction.delete(forKey: hash, in: tokens) }
    }
  }

  // MARK: - Event logs

  /// The last sequence number and event-set digest of an account's log.
  struct Head: Sendable {
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

  /// Stores the pushed events not yet in the account's log, in one transaction, then reads the
  /// page after `cursor`.
  ///
  /// - Throws: ``ServerError`` `invalidCursor` for a cursor past the end of the log; nothing is
  ///   stored then.
  func sync(account: UInt64, pushing events: [Event], after cursor: UInt64, limit: Int)
    async throws -> SyncOutcome
  {
    if events.isEmpty {
      return try environment.read { transaction in
        let head = try self.head(of: account, in: transaction)
        return try page(
          account: account, head: head, after: cursor, limit: limit, skipping: [],
          stored: 0, in: transaction)
      }
    }
    return try await onWriter { [self] in
      try environment.write { transaction in
        var head = try self.head(of: account, in: transaction)
        guard cursor <= head.sequence else {
          throw ServerError.invalidCursor(cursor, head.sequence)
        }
        var stored = 0
        var pushed = Set<Stamp>()
        pushed.reserveCapacity(events.count)
        var key = Self.bytes(account)
        for event in events {
          guard pushed.insert(event.stamp).inserted else { continue }
          key.removeSubrange(8...)
          event.stamp.withKey { key.append(contentsOf: $0) }
          guard try !transaction.containsValue(forKey: key, in: eventIDs) else { continue }
          head.sequence += 1
          head.digest.add(event.stamp)
          stored += 1
          try transaction.put(Self.bytes(head.sequence), forKey: key, in: eventIDs)
          try transaction.put(
            EventCodec.encode(event), forKey: Self.bytes(account) + Self.bytes(head.sequence),
            in: log)
        }
        if stored > 0 {
          try transaction.put(
            Self.bytes(head.sequence) + Self.bytes(head.digest.high)
              + Self.bytes(head.digest.low), forKey: Self.bytes(account), in: heads)
        }
        return try page(
          account: account, head: head, after: cursor, limit: limit, skipping: pushed,
          stored: stored, in: transaction)
      }
    }
  }

  private func head(of account: UInt64, in transaction: borrowing some Transaction & ~Copyable)
    throws -> Head
  {
    guard let record = try transaction.value(forKey: Self.bytes(account), in: heads) else {
      return Head()
    }
    guard record.count == 24 else {
      throw ServerError.storage("account \(account)'s head is malformed")
    }
    return Head(
      sequence: Self.uint64(record[0..<8]),
      digest: EventSetDigest(high: Self.uint64(record[8..<16]), low: Self.uint64(record[16..<24])))
  }

  private func page(
    account: UInt64, head: Head, after cursor: UInt64, limit: Int, skipping pushed: Set<Stamp>,
    stored: Int, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> SyncOutcome {
    guard cursor <= head.sequence else { throw ServerError.invalidCursor(cursor, head.sequence) }
    var events: [Event] = []
    var last = cursor
    let range = KeyRange.from(
      Self.bytes(account) + Self.bytes(cursor + 1),
      through: Self.bytes(account) + Self.bytes(head.sequence))
    if cursor < head.sequence {
      try transaction.withEntries(in: log, range: range) { entries in
        while events.count < limit {
          let next = try entries.next { key, value -> (UInt64, Event) in
            (
              UInt64(bigEndian: key.loadUnaligned(fromByteOffset: 8, as: UInt64.self)),
              try EventCodec.decode(value)
            )
          }
          guard let (sequence, event) = next else { break }
          last = sequence
          if !pushed.contains(event.stamp) { events.append(event) }
        }
      }
    }
    return SyncOutcome(
      events: events, cursor: last, more: last < head.sequence, stored: stored, head: head)
  }

  // MARK: - Blobs

  /// Stores an account's blob. Returns false if it was already stored.
  func storeBlob(_ bytes: [UInt8], hash: BlobHash, account: UInt64) async throws -> Bool {
    try await onWriter { [self] in
      try environment.write { transaction in
        let key = Self.bytes(account) + hash.bytes
        guard try !transaction.containsValue(forKey: key, in: blobs) else { return false }
        try transaction.put(bytes, forKey: key, in: blobs)
        return true
      }
    }
  }

  /// An account's blob.
  func blob(_ hash: BlobHash, account: UInt64) throws -> [UInt8]? {
    try environment.read { transaction in
      try transaction.value(forKey: Self.bytes(account) + hash.bytes, in: blobs)
    }
  }

  // MARK: - Integers

  static func bytes(_ value: UInt64) -> [UInt8] {
    withUnsafeBytes(of: value.bigEndian) { Array($0) }
  }

  static func bytes(_ value: UInt32) -> [UInt8] {
    withUnsafeBytes(of: value.bigEndian) { Array($0) }
  }

  static func uint64(_ bytes: some Collection<UInt8>) -> UInt64 {
    bytes.prefix(8).reduce(0) { $0 << 8 | UInt64($1) }
  }

  static func uint32(_ bytes: some Collection<UInt8>) -> UInt32 {
    bytes.prefix(4).reduce(0) { $0 << 8 | UInt32($1) }
  }
}
