internal import CLMDB

#if canImport(FoundationEssentials)
  public import FoundationEssentials
#else
  public import Foundation
#endif

/// The operations of every transaction: reads of keys, counts, cursors and range iteration.
///
/// ``ReadTransaction`` and ``WriteTransaction`` conform, so code that only reads can take
/// `borrowing some Transaction & ~Copyable` and run inside either:
///
/// ```swift
/// func noteCount(_ transaction: borrowing some Transaction & ~Copyable) throws -> Int {
///   try transaction.count(in: notes)
/// }
/// ```
///
/// Transactions are non-copyable and lent to the closures of ``Environment/read(_:)`` and
/// ``Environment/write(_:)``: they cannot outlive those closures or move to another task.
/// Bytes a transaction lends to a closure point into the memory map and are valid only inside
/// that closure; copy them (`Array(bytes)`) to keep them.
public protocol Transaction: ~Copyable {
  /// The underlying LMDB transaction. Opaque: use the protocol's methods.
  var handle: TransactionHandle { get }
}

/// The underlying LMDB transaction of a ``Transaction``; opaque outside this module.
public struct TransactionHandle {
  let pointer: OpaquePointer
  let state: TransactionState

  /// Throws the recorded failure, so a failed transaction is not used again.
  @inline(__always)
  func ensureUsable(_ operation: @autoclosure () -> String) throws(LMDBError) {
    if let failure = state.failure {
      throw LMDBError(
        code: .transactionFailed, operation: operation(), path: state.path,
        message: "the transaction had an earlier failure and can only be aborted (\(failure))")
    }
  }

  /// The bytes of a key or value LMDB handed back, after checking that they lie within the
  /// pages in use: a damaged page can claim a size past the end of the file.
  @inline(__always)
  func bytes(_ value: MDB_val, _ operation: @autoclosure () -> String) throws(LMDBError)
    -> UnsafeRawBufferPointer
  {
    guard state.bounds.contains(value) else {
      throw LMDBError(
        code: .corrupted, operation: operation(), path: state.path,
        message:
          "a stored size (\(value.mv_size) bytes) runs past the end of the data: the file is "
          + "damaged")
    }
    return value.buffer
  }

  /// Converts a result code into an error; in a write transaction, records failures after
  /// which LMDB requires the transaction to be aborted.
  @inline(__always)
  func check(
    _ rc: Int32, _ operation: @autoclosure () -> String, hint: @autoclosure () -> String? = nil
  ) throws(LMDBError) {
    guard rc != MDB_SUCCESS else { return }
    let error = makeError(rc, operation(), path: state.path, hint: hint())
    if state.isWrite && rc != MDB_KEYEXIST && rc != MDB_NOTFOUND && rc != MDB_BAD_VALSIZE {
      state.failure = error
    }
    throw error
  }
}

/// The mutable part of a transaction: its first fatal failure.
final class TransactionState {
  let path: String
  let isWrite: Bool
  var failure: LMDBError?
  /// Where the keys and values LMDB hands back must lie.
  let bounds: MapBounds

  init(path: String, isWrite: Bool, bounds: MapBounds) {
    self.path = path
    self.isWrite = isWrite
    self.bounds = bounds
  }
}

/// A read-only transaction: a consistent snapshot of the environment.
///
/// Lent to the closure of ``Environment/read(_:)``; see ``Transaction`` for its operations.
public struct ReadTransaction: Transaction, ~Copyable {
  /// The underlying LMDB transaction.
  public let handle: TransactionHandle

  // Not inlined: Swift 6.3.1's generic specializer crashes ("Cannot initialize a nonCopyable
  // type with a guaranteed value") when it inlines this into a specialized `write(_:)`.
  @inline(never)
  init(_ handle: TransactionHandle) { self.handle = handle }
}

/// A read-write transaction. At most one is open at a time.
///
/// Lent to the closure of ``Environment/write(_:)``, which commits it when the closure returns.
/// After an operation fails with an error other than ``LMDBError/Code/keyExists``,
/// ``LMDBError/Code/notFound`` or ``LMDBError/Code/badValueSize``, LMDB requires the
/// transaction to be aborted: every later operation throws
/// ``LMDBError/Code/transactionFailed``, and the transaction is aborted even if the closure
/// catches the error and returns.
public struct WriteTransaction: Transaction, ~Copyable {
  /// The underlying LMDB transaction.
  public let handle: TransactionHandle

  // Not inlined: Swift 6.3.1's generic specializer crashes ("Cannot initialize a nonCopyable
  // type with a guaranteed value") when it inlines this into a specialized `write(_:)`.
  @inline(never)
  init(_ handle: TransactionHandle) { self.handle = handle }
}

extension MDB_val {
  @inline(__always)
  init(_ buffer: UnsafeRawBufferPointer) {
    self.init(mv_size: buffer.count, mv_data: UnsafeMutableRawPointer(mutating: buffer.baseAddress))
  }

  @inline(__always)
  var buffer: UnsafeRawBufferPointer {
    UnsafeRawBufferPointer(start: mv_data, count: mv_size)
  }
}

// MARK: - Reads

extension Transaction where Self: ~Copyable {
  /// The id of this transaction's snapshot: the number of the last transaction committed
  /// before it began (for a write transaction, the number it will have).
  public var id: Int { mdb_txn_id(handle.pointer) }

  /// Lends the value stored under `key` to `body`, or nil if there is none.
  ///
  /// - Parameters:
  ///   - key: The key's bytes.
  ///   - database: Where to look.
  ///   - body: Receives the value's bytes, valid only inside `body`, or nil.
  /// - Returns: What `body` returns.
  /// - Throws: ``LMDBError`` (``LMDBError/Code/badValueSize`` for an empty or too long key).
  public func withValue<R>(
    forKey key: some ContiguousBytes, in database: Database,
    _ body: (UnsafeRawBufferPointer?) throws -> R
  ) throws -> R {
    try key.withUnsafeBytes { key in try withValue(forKey: key, in: database, body) }
  }

  /// Lends the value stored under `key` to `body`, or nil if there is none. The same as the
  /// generic form, without its indirection, for hot paths that already hold raw bytes.
  public func withValue<R>(
    forKey key: UnsafeRawBufferPointer, in database: Database,
    _ body: (UnsafeRawBufferPointer?) throws -> R
  ) throws -> R {
    try handle.ensureUsable("read from \(database)")
    var data = MDB_val()
    var keyValue = MDB_val(key)
    let rc = mdb_get(handle.pointer, database.dbi, &keyValue, &data)
    if rc == MDB_NOTFOUND { return try body(nil) }
    try handle.check(rc, "read from \(database)")
    return try body(try handle.bytes(data, "read from \(database)"))
  }

  /// The value stored under `key`, copied out of the map, or nil if there is none.
  ///
  /// - Throws: ``LMDBError`` (``LMDBError/Code/badValueSize`` for an empty or too long key).
  public func value(forKey key: some ContiguousBytes, in database: Database) throws -> [UInt8]? {
    try withValue(forKey: key, in: database) { $0.map(Array.init) }
  }

  /// Whether a value is stored under `key`.
  public func containsValue(forKey key: some ContiguousBytes, in database: Database) throws
    -> Bool
  {
    try key.withUnsafeBytes { key in try containsValue(forKey: key, in: database) }
  }

  /// Whether a value is stored under `key`, for hot paths that already hold raw bytes.
  public func containsValue(forKey key: UnsafeRawBufferPointer, in database: Database) throws
    -> Bool
  {
    try withValue(forKey: key, in: database) { $0 != nil }
  }

  /// The number of entries in a database, read from its B-tree header (no scan).
  public func count(in database: Database) throws -> Int {
    try statistics(of: database).entries
  }

  /// Page and entry counts of a database.
  public func statistics(of database: Database) throws -> DatabaseStatistics {
    try handle.ensureUsable("read statistics of \(database)")
    var stat = MDB_stat()
    try handle.check(
      mdb_stat(handle.pointer, database.dbi, &stat), "read statistics of \(database)")
    return DatabaseStatistics(stat)
  }

  /// Compares two keys in a database's key order.
  ///
  /// - Returns: A negative number if `a` sorts before `b`, zero if they are equal, a positive
  ///   number if `a` sorts after `b`.
  public func compareKeys(
    _ a: some ContiguousBytes, _ b: some ContiguousBytes, in database: Database
  ) -> Int {
    a.withUnsafeBytes { a in
      b.withUnsafeBytes { b in
        var a = MDB_val(a)
        var b = MDB_val(b)
        return Int(mdb_cmp(handle.pointer, database.dbi, &a, &b))
      }
    }
  }

  /// Opens a cursor on a database for the duration of `body`.
  ///
  /// - Parameters:
  ///   - database: The database to move through.
  ///   - body: Positions the cursor and reads through it.
  /// - Returns: What `body` returns.
  public func withCursor<R>(on database: Database, _ body: (borrowing Cursor) throws -> R)
    throws -> R
  {
    let cursor = try openCursor(on: database)
    defer { mdb_cursor_close(cursor) }
    return try body(Cursor(pointer: cursor, handle: handle, database: database))
  }

  /// Iterates over a range of keys with a throwing iterator, for the duration of `body`.
  ///
  /// ```swift
  /// try transaction.withEntries(in: events, range: .from(start)) { entries in
  ///   while let sequence = try entries.next({ key, _ in key.loadUnaligned(as: UInt64.self) }) {
  ///     …
  ///   }
  /// }
  /// ```
  ///
  /// - Parameters:
  ///   - database: The database to iterate over.
  ///   - range: The keys to visit (default: all).
  ///   - reverse: Whether to visit them from the last to the first.
  ///   - body: Receives the iterator.
  /// - Returns: What `body` returns.
  public func withEntries<R>(
    in database: Database, range: KeyRange = .all, reverse: Bool = false,
    _ body: (inout Entries) throws -> R
  ) throws -> R {
    let cursor = try openCursor(on: database)
    defer { mdb_cursor_close(cursor) }
    var entries = Entries(
      cursor: Cursor(pointer: cursor, handle: handle, database: database), range: range,
      reverse: reverse)
    return try body(&entries)
  }

  /// Calls `body` with every entry in a range of keys, in key order (or reversed).
  ///
  /// - Parameters:
  ///   - database: The database to iterate over.
  ///   - range: The keys to visit (default: all).
  ///   - reverse: Whether to visit them from the last to the first.
  ///   - body: Receives each key and value, valid only inside `body`. Throw to stop early.
  public func forEach(
    in database: Database, range: KeyRange = .all, reverse: Bool = false,
    _ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> Void
  ) throws {
    try withEntries(in: database, range: range, reverse: reverse) { entries in
      while try entries.next(body) != nil {}
    }
  }

  func openCursor(on database: Database) throws(LMDBError) -> OpaquePointer {
    try handle.ensureUsable("open a cursor on \(database)")
    var cursor: OpaquePointer?
    try handle.check(
      mdb_cursor_open(handle.pointer, database.dbi, &cursor), "open a cursor on \(database)")
    guard let cursor else {
      throw LMDBError(
        code: .outOfMemory, operation: "open a cursor on \(database)", path: handle.state.path,
        message: "mdb_cursor_open returned no cursor")
    }
    return cursor
  }
}

// MARK: - Writes

extension WriteTransaction {
  /// Stores a value under a key.
  ///
  /// - Parameters:
  ///   - value: The value's bytes (may be empty).
  ///   - key: The key's bytes: 1 to ``Environment/maximumKeySize`` bytes.
  ///   - database: Where to store it.
  ///   - options: ``PutOptions/append`` for keys that sort last, ``PutOptions/noOverwrite`` to
  ///     keep an existing value.
  /// - Throws: ``LMDBError/Code/keyExists`` when `noOverwrite` finds the key, or `append` is
  ///   given a key that does not sort last; ``LMDBError/Code/badValueSize`` for an empty or too
  ///   long key; ``LMDBError/Code/mapFull`` (which ``Environment/write(_:)`` handles by
  ///   growing the map and running the transaction again).
  public func put(
    _ value: some ContiguousBytes, forKey key: some ContiguousBytes, in database: Database,
    options: PutOptions = []
  ) throws {
    try key.withUnsafeBytes { key in
      try value.withUnsafeBytes { value in
        try put(value, forKey: key, in: database, options: options)
      }
    }
  }

  /// Stores a value under a key: the same as the generic form, without its indirection, for
  /// hot paths that already hold raw bytes.
  public func put(
    _ value: UnsafeRawBufferPointer, forKey key: UnsafeRawBufferPointer, in database: Database,
    options: PutOptions = []
  ) throws {
    try handle.ensureUsable("put into \(database)")
    var keyValue = MDB_val(key)
    var dataValue = MDB_val(value)
    let rc = mdb_put(handle.pointer, database.dbi, &keyValue, &dataValue, options.rawValue)
    try handle.check(rc, "put into \(database)", hint: Self.putHint(rc, options))
  }

  /// Stores a value of `count` bytes under a key, letting `body` write the bytes straight into
  /// the map (`MDB_RESERVE`), which saves a copy for large values.
  ///
  /// Not available for ``Database/Flags/duplicateSort`` databases.
  ///
  /// - Parameters:
  ///   - key: The key's bytes.
  ///   - count: The value's size in bytes.
  ///   - database: Where to store it.
  ///   - options: As for ``put(_:forKey:in:options:)-(ContiguousBytes,_,_,_)``.
  ///   - body: Writes exactly `count` bytes into the buffer it receives, which is valid only
  ///     inside `body`. If it throws, the transaction must be aborted.
  public func put(
    forKey key: some ContiguousBytes, reservingCount count: Int, in database: Database,
    options: PutOptions = [], _ body: (UnsafeMutableRawBufferPointer) throws -> Void
  ) throws {
    try key.withUnsafeBytes { key in
      try put(forKey: key, reservingCount: count, in: database, options: options, body)
    }
  }

  /// Stores a value of `count` bytes written in place by `body`, for hot paths that already
  /// hold the key's raw bytes. See the generic form.
  public func put(
    forKey key: UnsafeRawBufferPointer, reservingCount count: Int, in database: Database,
    options: PutOptions = [], _ body: (UnsafeMutableRawBufferPointer) throws -> Void
  ) throws {
    try handle.ensureUsable("put into \(database)")
    var value = MDB_val(mv_size: count, mv_data: nil)
    var keyValue = MDB_val(key)
    let rc = mdb_put(
      handle.pointer, database.dbi, &keyValue, &value, options.rawValue | UInt32(MDB_RESERVE))
    try handle.check(rc, "put into \(database)", hint: Self.putHint(rc, options))
    do {
      try body(UnsafeMutableRawBufferPointer(start: value.mv_data, count: count))
    } catch {
      // The reserved bytes are uninitialised: this transaction must not commit.
      handle.state.failure = LMDBError(
        code: .transactionFailed, operation: "fill a reserved value in \(database)",
        path: handle.state.path, message: "\(error)")
      throw error
    }
  }

  static func putHint(_ rc: Int32, _ options: PutOptions) -> String? {
    switch rc {
    case MDB_KEYEXIST where options.contains(.append) || options.contains(.appendDuplicate):
      "an append must use a key that sorts after every key in the database"
    case MDB_BAD_VALSIZE:
      "keys must be 1 to 511 bytes"
    case MDB_MAP_FULL:
      "the map is full"
    default:
      nil
    }
  }

  /// Deletes the value under a key (every value, in a ``Database/Flags/duplicateSort``
  /// database).
  ///
  /// - Returns: Whether there was a value to delete.
  @discardableResult
  public func delete(forKey key: some ContiguousBytes, in database: Database) throws -> Bool {
    try handle.ensureUsable("delete from \(database)")
    let rc = key.withUnsafeBytes { key in
      var key = MDB_val(key)
      return mdb_del(handle.pointer, database.dbi, &key, nil)
    }
    if rc == MDB_NOTFOUND { return false }
    try handle.check(rc, "delete from \(database)")
    return true
  }

  /// Deletes one value of a key in a ``Database/Flags/duplicateSort`` database.
  ///
  /// - Returns: Whether the pair existed.
  @discardableResult
  public func delete(
    _ value: some ContiguousBytes, forKey key: some ContiguousBytes, in database: Database
  ) throws -> Bool {
    try handle.ensureUsable("delete from \(database)")
    let rc = key.withUnsafeBytes { key in
      value.withUnsafeBytes { value in
        var key = MDB_val(key)
        var value = MDB_val(value)
        return mdb_del(handle.pointer, database.dbi, &key, &value)
      }
    }
    if rc == MDB_NOTFOUND { return false }
    try handle.check(rc, "delete from \(database)")
    return true
  }

  /// Deletes every entry of a database, keeping the database.
  public func removeAll(in database: Database) throws {
    try handle.ensureUsable("empty \(database)")
    try handle.check(mdb_drop(handle.pointer, database.dbi, 0), "empty \(database)")
  }

  /// Deletes a named database from the environment. When the transaction commits, the
  /// ``Database`` value becomes invalid; open the database again (with ``Database/Flags/create``)
  /// to use the name afresh.
  public func drop(_ database: Database) throws {
    try handle.ensureUsable("drop \(database)")
    try handle.check(mdb_drop(handle.pointer, database.dbi, 1), "drop \(database)")
  }

  /// Runs `body` in a transaction nested in this one, and returns how it went: what `body`
  /// returned, its writes now this transaction's (kept when this one commits); or what it
  /// threw, its writes undone and this transaction as it was before.
  ///
  /// Several units of work can so share one commit, and its sync, while each fails alone: a
  /// unit that throws takes back only its own writes.
  ///
  /// - Parameter body: Reads (this transaction's writes included) and writes through the
  ///   nested transaction. This transaction must not be used until `body` returns.
  /// - Returns: `body`'s result, or the error it threw.
  /// - Throws: ``LMDBError`` when this transaction cannot go on: an operation of the nested
  ///   one failed in a way after which LMDB requires an abort (``LMDBError/Code/mapFull``
  ///   among them). This transaction then fails as if its own operation had, and
  ///   ``Environment/write(_:)`` handles it as it does its own (growing the map and running
  ///   again, for example).
  public func nested<R>(_ body: (borrowing WriteTransaction) throws -> R) throws -> Result<
    R, any Error
  > {
    try handle.ensureUsable("begin nested transaction")
    var pointer: OpaquePointer?
    try handle.check(
      mdb_txn_begin(mdb_txn_env(handle.pointer), handle.pointer, 0, &pointer),
      "begin nested transaction")
    guard let pointer else {
      throw LMDBError(
        code: .badTransaction, operation: "begin nested transaction", path: handle.state.path,
        message: "mdb_txn_begin returned no transaction")
    }
    let child = TransactionHandle(
      pointer: pointer,
      state: TransactionState(path: handle.state.path, isWrite: true, bounds: handle.state.bounds))
    let outcome = Result { try body(WriteTransaction(child)) }
    if let failure = child.state.failure {
      mdb_txn_abort(pointer)
      handle.state.failure = failure
      throw failure
    }
    guard case .success = outcome else {
      mdb_txn_abort(pointer)
      return outcome
    }
    // mdb_txn_commit frees the nested transaction whether or not it succeeds; when it fails,
    // this one is failed too.
    try handle.check(mdb_txn_commit(pointer), "commit nested transaction")
    return outcome
  }
}

/// The reads of an open transaction as a copyable value, for code that must keep them in a
/// value rather than take the transaction as a parameter (the engine's log rules look facts up
/// through a protocol whose conformers are values).
///
/// Valid only while the transaction it was made from is open, on the task that holds it: make
/// one inside the closure the transaction is lent to, and let it go before the closure
/// returns. It has no writes, and ending it ends nothing.
package struct TransactionReads: Transaction {
  /// The underlying LMDB transaction.
  package let handle: TransactionHandle

  /// The reads of `transaction`, valid while it is open.
  package init(_ transaction: borrowing some Transaction & ~Copyable) {
    handle = transaction.handle
  }
}
