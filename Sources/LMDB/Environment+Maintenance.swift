internal import CLMDB

extension Environment {
  /// Clears reader slots left by processes that died with a read transaction open, so their
  /// snapshots no longer hold pages. Done automatically on open.
  ///
  /// - Returns: How many slots were cleared.
  @discardableResult
  public func clearStaleReaders() throws -> Int {
    try TransactionDepth.refuseInside("clear stale readers", path: path)
    return try lock.withShared { () throws(LMDBError) -> Int in
      guard !isClosed else { throw closedError("clear stale readers") }
      var dead: Int32 = 0
      try check(mdb_reader_check(handle, &dead), "clear stale readers", path: path)
      return Int(dead)
    }
  }

  /// Flushes committed transactions to disk. Needed only with ``Durability/noSync`` or
  /// ``Durability/noMetaSync``, to make everything committed so far durable.
  public func sync() throws {
    try TransactionDepth.refuseInside("sync", path: path)
    try lock.withShared { () throws(LMDBError) in
      guard !isClosed else { throw closedError("sync") }
      try check(mdb_env_sync(handle, 1), "sync", path: path)
    }
  }

  /// Writes a consistent copy of the environment to a new directory, for backups.
  ///
  /// The copy is a snapshot taken in a read transaction, so writers continue meanwhile.
  ///
  /// - Parameters:
  ///   - destination: A directory that does not exist or is empty; it is created if needed.
  ///   - compacting: Whether to omit free pages and renumber the rest, which makes a smaller
  ///     copy at the cost of more CPU.
  /// - Throws: ``LMDBError`` if the destination cannot be written or already holds a data file.
  public func copy(to destination: String, compacting: Bool = false) throws {
    let directory = try Self.canonicalDirectory(destination, creating: true)
    guard directory != path else {
      throw LMDBError(
        code: .invalidArgument, operation: "copy environment", path: path,
        message: "the destination is the environment itself")
    }
    try TransactionDepth.enter("copy environment", path: path) {
      try lock.withShared {
        guard !isClosed else { throw closedError("copy environment") }
        let flags = compacting ? UInt32(MDB_CP_COMPACT) : 0
        try check(
          mdb_env_copy2(handle, directory, flags), "copy environment to '\(directory)'",
          path: path, hint: "the destination must be empty")
      }
    }
  }
}
