internal import CLMDB
internal import Dispatch

#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Darwin)
  internal import Darwin
#endif

extension Environment {
  /// Runs `body` in a read transaction: a consistent snapshot of the environment as of the
  /// transaction's start, unaffected by writes that commit while it runs.
  ///
  /// Read transactions run concurrently with each other and with the writer. Keep them short:
  /// while one is open, the pages of its snapshot cannot be reused, and growing the map waits
  /// for it to end.
  ///
  /// - Parameter body: Reads through the transaction. Bytes lent inside are valid only there.
  /// - Returns: What `body` returns.
  /// - Throws: What `body` throws, ``LMDBError/Code/readersFull`` when all reader slots are in
  ///   use, ``LMDBError/Code/nestedTransaction``, or ``LMDBError/Code/environmentClosed``.
  public func read<R>(_ body: (borrowing ReadTransaction) throws -> R) throws -> R {
    try withTransaction(write: false) { handle in
      try body(ReadTransaction(handle))
    }
  }

  /// Runs `body` in a write transaction and commits it when `body` returns.
  ///
  /// If `body` throws, or any operation inside it failed, the transaction is aborted and
  /// nothing it wrote is kept. When the map fills up, the transaction is aborted, the map is
  /// doubled (up to ``Configuration/maximumMapSize``) while no transaction is open in the
  /// process, and `body` runs again from the start in a new transaction: `body` must therefore
  /// have no effects outside the transaction that a second run would repeat.
  ///
  /// Only one write transaction runs at a time; others wait for it.
  ///
  /// - Parameter body: Reads and writes through the transaction.
  /// - Returns: What `body` returns.
  /// - Throws: What `body` throws, or ``LMDBError`` for a failed operation or commit
  ///   (``LMDBError/Code/mapFull`` once the map cannot grow further). When the grown map cannot
  ///   be made (the process's address space has no room for it), the error says so and the
  ///   environment is closed: open the path again, at the map size the file records.
  public func write<R>(_ body: (borrowing WriteTransaction) throws -> R) throws -> R {
    while true {
      var observedMapSize = 0
      var failure: LMDBError?
      do {
        return try withTransaction(write: true) { handle in
          observedMapSize = currentMapSize
          defer { failure = handle.state.failure }
          let result = try body(WriteTransaction(handle))
          if let failure = handle.state.failure { throw failure }
          return result
        }
      } catch {
        // The body may have caught the map-full error and thrown its own: the transaction's
        // recorded failure tells.
        let committed = error as? LMDBError
        guard let cause = [failure, committed].first(where: { $0?.code == .mapFull }) ?? nil
        else { throw error }
        try growMap(from: observedMapSize, cause: cause)
      }
    }
  }

  /// Runs `body` on the environment's serial writer queue and resumes with its result.
  ///
  /// For async code that writes: waiting for LMDB's writer lock blocks a thread, and this
  /// blocks one of the queue's, never one of Swift's cooperative pool. Bodies run one at a time
  /// in the order they were submitted. `body` typically calls ``write(_:)`` and then does what
  /// must follow the commit (telling observers) before the next write begins.
  ///
  /// - Parameter body: The work, run synchronously on the queue.
  /// - Returns: What `body` returns.
  /// - Throws: What `body` throws.
  public func onWriterQueue<R: Sendable>(_ body: @escaping @Sendable () throws -> R)
    async throws -> R
  {
    try await withCheckedThrowingContinuation { continuation in
      writerQueue.async { continuation.resume(with: Result { try body() }) }
    }
  }

  /// Begins a transaction under the shared lock, runs `body`, and commits a write transaction
  /// or ends a read one. A read transaction that opened a database must commit
  /// (`commitRead`), or LMDB closes the new handle again.
  func withTransaction<R>(
    write: Bool, commitRead: Bool = false, _ body: (TransactionHandle) throws -> R
  ) throws -> R {
    let operation = write ? "begin write transaction" : "begin read transaction"
    while true {
      let outcome: R? = try TransactionDepth.enter(operation, path: path) {
        try lock.withShared { () throws -> R? in
          guard !isClosed else { throw closedError(operation) }
          var pointer: OpaquePointer?
          let flags = write ? 0 : UInt32(MDB_RDONLY)
          let rc = mdb_txn_begin(handle, nil, flags, &pointer)
          if rc == MDB_MAP_RESIZED { return nil }
          try check(rc, operation, path: path, hint: beginHint(rc))
          guard let pointer else {
            throw LMDBError(
              code: .badTransaction, operation: operation, path: path,
              message: "mdb_txn_begin returned no transaction")
          }
          let handle = TransactionHandle(
            pointer: pointer,
            state: TransactionState(
              path: path, isWrite: write,
              bounds: MapBounds(
                handle: self.handle, start: mapStart, pageSize: pageSize, isWrite: write)))
          let result: R
          do {
            result = try body(handle)
          } catch {
            mdb_txn_abort(pointer)
            throw error
          }
          if write || commitRead {
            // mdb_txn_commit frees the transaction whether or not it succeeds.
            let rc = mdb_txn_commit(pointer)
            if rc != MDB_SUCCESS {
              throw Self.commitError(rc, path: path, freeBytes: Self.freeBytes(at: path))
            }
          } else {
            mdb_txn_abort(pointer)
          }
          return result
        }
      }
      if let outcome { return outcome }
      try adoptMapSizeOfOtherProcess()
    }
  }

  func beginHint(_ rc: Int32) -> String? {
    rc == MDB_READERS_FULL
      ? "raise maximumReaders (now \(configuration.maximumReaders)) or end read transactions sooner"
      : nil
  }

  func commitHint() -> String? {
    "the transaction was not committed"
  }

  /// Below this many free bytes on the store's file system, a failed write is put down to a
  /// full disk.
  static let fullDiskBytes: UInt64 = 4 << 20

  /// The error of a commit that failed with `rc`. A full disk shows as `ENOSPC`, or — when the
  /// file system found out only at the flush — as `EIO`; with less than ``fullDiskBytes`` free
  /// (`freeBytes`), either is reported as a full disk, which is what the user can act on.
  static func commitError(_ rc: Int32, path: String, freeBytes: UInt64?) -> LMDBError {
    if rc == ENOSPC || (rc == EIO && (freeBytes ?? .max) < fullDiskBytes) {
      let free = freeBytes.map { " (\(formattedBytes(Int(clamping: $0))) free)" } ?? ""
      return LMDBError(
        code: .noSpace, operation: "commit", path: path,
        message: "the disk is full\(free); the transaction was not committed: free some space "
          + "and try again")
    }
    return makeError(rc, "commit", path: path, hint: "the transaction was not committed")
  }

  /// The bytes free to this process on the file system that holds `path`; nil if unknown.
  static func freeBytes(at path: String) -> UInt64? {
    var info = statvfs()
    guard statvfs(path, &info) == 0 else { return nil }
    return UInt64(info.f_bavail) &* UInt64(info.f_frsize)
  }

  func closedError(_ operation: String) -> LMDBError {
    LMDBError(
      code: .environmentClosed, operation: operation, path: path,
      message: "the environment was closed; open it again")
  }
}
