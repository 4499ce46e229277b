internal import CLMDB

#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Darwin)
  internal import Darwin
#endif

#if canImport(FoundationEssentials)
  public import FoundationEssentials
#else
  public import Foundation
#endif

/// A position in a database, moved by key order.
///
/// Lent to the closure of ``Transaction/withCursor(on:_:)``. Each move returns whether the
/// cursor found an entry; ``withCurrent(_:)`` lends the entry it is on.
///
/// ```swift
/// try transaction.withCursor(on: events) { cursor in
///   if try cursor.last() {
///     lastKey = try cursor.currentKey()
///   }
/// }
/// ```
public struct Cursor: ~Copyable {
  let pointer: OpaquePointer
  let handle: TransactionHandle
  let database: Database

  // Not inlined, for the same Swift 6.3.1 specializer crash as `WriteTransaction.init`.
  @inline(never)
  init(pointer: OpaquePointer, handle: TransactionHandle, database: Database) {
    self.pointer = pointer
    self.handle = handle
    self.database = database
  }

  /// Moves to the first entry. Returns false if the database is empty.
  public func first() throws -> Bool { try move(MDB_FIRST) }

  /// Moves to the last entry. Returns false if the database is empty.
  public func last() throws -> Bool { try move(MDB_LAST) }

  /// Moves to the next entry. Returns false past the last one.
  public func next() throws -> Bool { try move(MDB_NEXT) }

  /// Moves to the previous entry. Returns false before the first one.
  public func previous() throws -> Bool { try move(MDB_PREV) }

  /// Moves to the first entry whose key is equal to or sorts after `key`. Returns false if
  /// every key sorts before it.
  public func seek(to key: some ContiguousBytes) throws -> Bool {
    try key.withUnsafeBytes { key in
      var key = MDB_val(key)
      var value = MDB_val()
      return try move(MDB_SET_RANGE, &key, &value)
    }
  }

  /// Moves to the entry whose key is `key`. Returns false, leaving the position unspecified,
  /// if there is none.
  public func seek(exactly key: some ContiguousBytes) throws -> Bool {
    try key.withUnsafeBytes { key in
      var key = MDB_val(key)
      var value = MDB_val()
      return try move(MDB_SET_KEY, &key, &value)
    }
  }

  /// Lends the current entry's key and value to `body`; they are valid only inside it.
  ///
  /// - Throws: ``LMDBError`` if the cursor is not on an entry.
  public func withCurrent<R>(
    _ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> R
  ) throws -> R {
    var key = MDB_val()
    var value = MDB_val()
    guard try move(MDB_GET_CURRENT, &key, &value) else {
      throw LMDBError(
        code: .notFound, operation: "read the cursor's entry in \(database)",
        path: handle.state.path, message: "the cursor is not on an entry")
    }
    return try body(
      try handle.bytes(key, "read a key of \(database)"),
      try handle.bytes(value, "read a value of \(database)"))
  }

  /// The current entry's key, copied.
  public func currentKey() throws -> [UInt8] {
    try withCurrent { key, _ in Array(key) }
  }

  /// The current entry's value, copied.
  public func currentValue() throws -> [UInt8] {
    try withCurrent { _, value in Array(value) }
  }

  /// Deletes the current entry; the cursor then stands on the entry after it. Needs a write
  /// transaction.
  public func deleteCurrent() throws {
    try handle.ensureUsable("delete through a cursor on \(database)")
    try handle.check(
      mdb_cursor_del(pointer, 0), "delete through a cursor on \(database)",
      hint: handle.state.isWrite ? nil : "deleting needs a write transaction")
  }

  func move(_ operation: MDB_cursor_op) throws(LMDBError) -> Bool {
    var key = MDB_val()
    var value = MDB_val()
    return try move(operation, &key, &value)
  }

  @inline(__always)
  func move(_ operation: MDB_cursor_op, _ key: inout MDB_val, _ value: inout MDB_val)
    throws(LMDBError) -> Bool
  {
    try handle.ensureUsable("move a cursor on \(database)")
    let rc = mdb_cursor_get(pointer, &key, &value, operation)
    // EINVAL here means the cursor is not positioned (for example GET_CURRENT on a fresh one).
    if rc == MDB_NOTFOUND || (rc == EINVAL && operation == MDB_GET_CURRENT) { return false }
    try handle.check(rc, "move a cursor on \(database)")
    return true
  }
}

/// A throwing iterator over a range of keys, lent to the closure of
/// ``Transaction/withEntries(in:range:reverse:_:)``.
///
/// Each call to ``next(_:)`` lends the next entry to a closure and returns what it returns, or
/// nil after the last entry of the range. Errors are thrown, never turned into the end.
public struct Entries: ~Copyable {
  let cursor: Cursor
  let range: KeyRange
  let reverse: Bool
  private var started = false
  private var finished = false

  init(cursor: consuming Cursor, range: KeyRange, reverse: Bool) {
    self.cursor = cursor
    self.range = range
    self.reverse = reverse
  }

  /// Moves to the next entry of the range and lends it to `body`.
  ///
  /// - Parameter body: Receives the key and value, valid only inside `body`.
  /// - Returns: What `body` returns, or nil when the range is exhausted.
  public mutating func next<R>(
    _ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) throws -> R
  ) throws -> R? {
    guard !finished else { return nil }
    var key = MDB_val()
    var value = MDB_val()
    let found: Bool
    if started {
      found = try cursor.move(reverse ? MDB_PREV : MDB_NEXT, &key, &value)
    } else {
      started = true
      found = try reverse ? startAtEnd(&key, &value) : startAtBeginning(&key, &value)
    }
    guard found else {
      finished = true
      return nil
    }
    let handle = cursor.handle
    let keyBytes = try handle.bytes(key, "read a key of \(cursor.database)")
    guard isInRange(&key) else {
      finished = true
      return nil
    }
    return try body(keyBytes, try handle.bytes(value, "read a value of \(cursor.database)"))
  }

  private func startAtBeginning(_ key: inout MDB_val, _ value: inout MDB_val) throws -> Bool {
    guard let lower = range.lowerBound else { return try cursor.move(MDB_FIRST, &key, &value) }
    return try lower.withUnsafeBytes { lower in
      key = MDB_val(lower)
      return try cursor.move(MDB_SET_RANGE, &key, &value)
    }
  }

  private func startAtEnd(_ key: inout MDB_val, _ value: inout MDB_val) throws -> Bool {
    guard let upper = range.upperBound else { return try cursor.move(MDB_LAST, &key, &value) }
    let atOrAfter = try upper.withUnsafeBytes { upper in
      key = MDB_val(upper)
      return try cursor.move(MDB_SET_RANGE, &key, &value)
    }
    guard atOrAfter else { return try cursor.move(MDB_LAST, &key, &value) }
    if range.includesUpperBound && compare(&key, upper) == 0 { return true }
    return try cursor.move(MDB_PREV, &key, &value)
  }

  private func isInRange(_ key: inout MDB_val) -> Bool {
    if reverse {
      guard let lower = range.lowerBound else { return true }
      return compare(&key, lower) >= 0
    }
    guard let upper = range.upperBound else { return true }
    let order = compare(&key, upper)
    return range.includesUpperBound ? order <= 0 : order < 0
  }

  private func compare(_ key: inout MDB_val, _ bound: [UInt8]) -> Int32 {
    bound.withUnsafeBytes { bound in
      var bound = MDB_val(bound)
      return mdb_cmp(cursor.handle.pointer, cursor.database.dbi, &key, &bound)
    }
  }
}
