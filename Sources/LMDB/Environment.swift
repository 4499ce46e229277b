internal import CLMDB
internal import Synchronization

#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Darwin)
  internal import Darwin
#endif

#if canImport(FoundationEssentials)
  internal import FoundationEssentials
#else
  internal import Foundation
#endif

/// An LMDB environment: one memory-mapped data file holding one or more named databases.
///
/// Open an environment with ``open(at:configuration:)``, then read and write through scoped
/// transactions:
///
/// ```swift
/// let environment = try Environment.open(at: "/data/notes")
/// let events = try environment.openDatabase(named: "events", flags: .create)
/// try environment.write { transaction in
///   try transaction.put(payload, forKey: sequenceKey, in: events, options: .append)
/// }
/// let count = try environment.read { try $0.count(in: events) }
/// ```
///
/// ## Concurrency
///
/// 1. An environment is `Sendable`; share one instance between tasks and threads.
/// 2. A path is open at most once per process. Opening it again returns the same instance, so
///    LMDB's file locks are never lost to a second handle (see ``open(at:configuration:)``).
/// 3. Writes are serialised: one write transaction at a time in the whole process (and across
///    processes), enforced by LMDB. Call ``write(_:)`` from one serial executor to avoid blocking
///    threads of the cooperative pool while waiting for the writer lock.
/// 4. Reads run concurrently, each on its own snapshot, and never block the writer or each other.
/// 5. Transaction bodies are synchronous: there is no `await` inside a transaction, and a
///    transaction cannot be sent to another task.
/// 6. Transactions don't nest: beginning one on a thread that already has one open throws
///    ``LMDBError/Code/nestedTransaction``.
/// 7. Growing the map waits until no transaction of this process is open, as LMDB requires.
///    Transactions that begin meanwhile wait for the growth to finish, then proceed.
///
/// The environment is closed by ``close()`` or when the last reference to it goes away.
public final class Environment: Sendable {
  /// How an environment is opened.
  public struct Configuration: Sendable, Hashable {
    /// The initial size of the memory map, in bytes, rounded up to a multiple of 64 KiB. The
    /// map grows by doubling when a write fills it, up to ``maximumMapSize``. An existing file
    /// larger than this keeps its size.
    public var mapSize: Int
    /// The largest size the map may grow to, in bytes. A write that needs more fails with
    /// ``LMDBError/Code/mapFull``.
    public var maximumMapSize: Int
    /// How many named databases the environment can hold.
    public var maximumDatabases: Int
    /// How many read transactions can be open at once, across all processes.
    public var maximumReaders: Int
    /// What a committed write survives; see ``Durability``.
    public var durability: Durability
    /// Whether the environment is opened read-only. A read-only open never creates the
    /// directory or file, and every write fails with ``LMDBError/Code/accessDenied``.
    public var isReadOnly: Bool

    /// Creates a configuration.
    ///
    /// - Parameters:
    ///   - mapSize: Initial map size in bytes (default 64 MiB).
    ///   - maximumMapSize: Largest map size in bytes (default 1 TiB). The map is virtual
    ///     address space, not disk: the file grows only as pages are written.
    ///   - maximumDatabases: Number of named databases (default 32).
    ///   - maximumReaders: Number of concurrent read transactions (default 126).
    ///   - durability: What a commit survives (default ``Durability/durable``).
    ///   - isReadOnly: Open without writing (default `false`).
    public init(
      mapSize: Int = 64 << 20,
      maximumMapSize: Int = 1 << 40,
      maximumDatabases: Int = 32,
      maximumReaders: Int = 126,
      durability: Durability = .durable,
      isReadOnly: Bool = false
    ) {
      self.mapSize = mapSize
      self.maximumMapSize = maximumMapSize
      self.maximumDatabases = maximumDatabases
      self.maximumReaders = maximumReaders
      self.durability = durability
      self.isReadOnly = isReadOnly
    }

    /// Whether an environment opened with `self` can serve a request for `other`: everything
    /// but the map size (which grows) must match.
    func isCompatible(with other: Configuration) -> Bool {
      maximumMapSize == other.maximumMapSize && maximumDatabases == other.maximumDatabases
        && maximumReaders == other.maximumReaders && durability == other.durability
        && isReadOnly == other.isReadOnly
    }
  }

  /// What a committed write transaction survives.
  public enum Durability: Sendable, Hashable, CustomStringConvertible {
    /// A commit returns after the data and the meta page are flushed to disk: it survives a
    /// process crash and a power loss. The default.
    case durable
    /// The meta page is not flushed at commit (`MDB_NOMETASYNC`): a power loss may undo the
    /// last committed transaction, but the database stays intact. A process crash loses nothing.
    case noMetaSync
    /// Nothing is flushed at commit (`MDB_NOSYNC`): a process crash loses nothing, but a power
    /// loss may undo any transactions since the last ``Environment/sync()``, and on file systems
    /// that reorder writes may corrupt the database. For bulk loads and tests.
    case noSync

    /// The name of the mode: `durable`, `noMetaSync` or `noSync`.
    public var description: String {
      switch self {
      case .durable: "durable"
      case .noMetaSync: "noMetaSync"
      case .noSync: "noSync"
      }
    }

    var flags: UInt32 {
      switch self {
      case .durable: 0
      case .noMetaSync: UInt32(MDB_NOMETASYNC)
      case .noSync: UInt32(MDB_NOSYNC)
      }
    }
  }

  /// The canonical path of the environment's directory.
  public let path: String
  /// The configuration the environment was opened with.
  public let configuration: Configuration

  // Safe to share: LMDB's environment handle is thread-safe when opened with `MDB_NOTLS`, and
  // it is closed only while `lock` is held exclusively, when no other use can be in progress.
  nonisolated(unsafe) let handle: OpaquePointer
  let lock = AccessLock()
  // Guarded by `lock`: written only while it is held exclusively, read while it is held.
  private nonisolated(unsafe) var isClosed = false
  private nonisolated(unsafe) var currentMapSize: Int
  /// Serialises `mdb_dbi_open`, which LMDB forbids from concurrent transactions.
  private let databaseOpening = Mutex<Void>(())

  private init(path: String, configuration: Configuration, handle: OpaquePointer, mapSize: Int) {
    self.path = path
    self.configuration = configuration
    self.handle = handle
    self.currentMapSize = mapSize
  }

  deinit {
    // The registry's entry is weak and already reads nil; closing under the registry's lock
    // keeps a concurrent open of the same path from creating a second handle before this one
    // is gone.
    Registry.environments.withLock { environments in
      if environments[path].map({ $0.environment == nil }) ?? false {
        environments[path] = nil
      }
      if !isClosed { mdb_env_close(handle) }
    }
  }

  /// Opens the environment at a directory, creating the directory if needed.
  ///
  /// A path is open at most once per process, because LMDB loses its file locks when a second
  /// handle to the same file is closed. If this process already has the path open, the
  /// existing instance is returned when its configuration matches in everything but
  /// ``Configuration/mapSize``; otherwise the call throws ``LMDBError/Code/alreadyOpen``.
  /// Stale reader slots left by dead processes are cleared on open.
  ///
  /// - Parameters:
  ///   - path: The directory holding `data.mdb` and `lock.mdb`.
  ///   - configuration: Map size, limits and durability.
  /// - Returns: The open environment.
  /// - Throws: ``LMDBError`` when the directory cannot be created, the file is not an LMDB file
  ///   (``LMDBError/Code/invalidFile``), or the path is open with another configuration.
  public static func open(at path: String, configuration: Configuration = Configuration()) throws
    -> Environment
  {
    let canonical = try canonicalDirectory(path, creating: !configuration.isReadOnly)
    let (environment, isExisting) = try Registry.environments.withLock {
      environments throws(LMDBError) -> (Environment, Bool) in
      if let existing = environments[canonical]?.environment {
        return (existing, true)
      }
      let opened = try openHandle(at: canonical, configuration: configuration)
      environments[canonical] = WeakEnvironment(environment: opened)
      return (opened, false)
    }
    if isExisting && !environment.configuration.isCompatible(with: configuration) {
      throw LMDBError(
        code: .alreadyOpen, operation: "open environment", path: canonical,
        message:
          "this process already has it open with another configuration "
          + "(\(environment.configuration.summary)); use the open instance, or close it first")
    }
    return environment
  }

  private static func openHandle(at path: String, configuration: Configuration) throws(LMDBError)
    -> Environment
  {
    var pointer: OpaquePointer?
    try check(mdb_env_create(&pointer), "create environment", path: path)
    guard let handle = pointer else {
      throw LMDBError(
        code: .outOfMemory, operation: "create environment", path: path,
        message: "mdb_env_create returned no handle")
    }
    do throws(LMDBError) {
      let mapSize = roundedMapSize(configuration.mapSize)
      try check(mdb_env_set_mapsize(handle, mapSize), "set map size", path: path)
      try check(
        mdb_env_set_maxdbs(handle, MDB_dbi(configuration.maximumDatabases)),
        "set maximum databases", path: path)
      try check(
        mdb_env_set_maxreaders(handle, UInt32(configuration.maximumReaders)),
        "set maximum readers", path: path)
      var flags = UInt32(MDB_NOTLS) | configuration.durability.flags
      if configuration.isReadOnly { flags |= UInt32(MDB_RDONLY) }
      try check(
        mdb_env_open(handle, path, flags, 0o644), "open environment", path: path,
        hint: openHint(configuration))
      var deadReaders: Int32 = 0
      try check(mdb_reader_check(handle, &deadReaders), "clear stale readers", path: path)
      var info = MDB_envinfo()
      try check(mdb_env_info(handle, &info), "read environment info", path: path)
      return Environment(
        path: path, configuration: configuration, handle: handle, mapSize: info.me_mapsize)
    } catch {
      mdb_env_close(handle)
      throw error
    }
  }

  private static func openHint(_ configuration: Configuration) -> String? {
    configuration.isReadOnly ? "a read-only open needs an existing environment" : nil
  }

  private static func roundedMapSize(_ size: Int) -> Int {
    let granule = 64 << 10
    return max(granule, (size + granule - 1) / granule * granule)
  }

  private static func canonicalDirectory(_ path: String, creating: Bool) throws(LMDBError)
    -> String
  {
    var status = stat()
    if stat(path, &status) == 0 {
      guard (status.st_mode & S_IFMT) == S_IFDIR else {
        throw LMDBError(
          code: .invalidArgument, operation: "open environment", path: path,
          message: "the path is a file, not a directory; an environment is a directory")
      }
    } else if creating {
      do {
        try FileManager.default.createDirectory(
          atPath: path, withIntermediateDirectories: true)
      } catch {
        throw LMDBError(
          code: .accessDenied, operation: "create environment directory", path: path,
          message: "\(error)")
      }
    } else {
      throw LMDBError(
        code: .noSuchFile, operation: "open environment", path: path,
        message: "no such directory")
    }
    guard let resolved = realpath(path, nil) else {
      throw makeError(errno, "resolve the environment's path", path: path)
    }
    defer { free(resolved) }
    return String(cString: resolved)
  }

  /// Closes the environment now, for every holder of this instance.
  ///
  /// Waits for open transactions to end. Afterwards every call on this instance throws
  /// ``LMDBError/Code/environmentClosed``, and the path can be opened again. Closing twice
  /// does nothing.
  public func close() {
    Registry.environments.withLock { environments in
      lock.withExclusive {
        guard !isClosed else { return }
        isClosed = true
        mdb_env_close(handle)
      }
      if environments[path]?.environment === self {
        environments[path] = nil
      }
    }
  }

  /// Whether the environment is open: false after ``close()``.
  public var isOpen: Bool {
    lock.withShared { !isClosed }
  }

  /// Whether the environment is open, for callers that already hold `lock`.
  func isOpen(unlocked: Void) -> Bool { !isClosed }

  // MARK: - Transactions

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
  ///   (``LMDBError/Code/mapFull`` once the map cannot grow further).
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

  /// Begins a transaction under the shared lock, runs `body`, and commits a write transaction
  /// or ends a read one. A read transaction that opened a database must commit
  /// (`commitRead`), or LMDB closes the new handle again.
  private func withTransaction<R>(
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
            pointer: pointer, state: TransactionState(path: path, isWrite: write))
          let result: R
          do {
            result = try body(handle)
          } catch {
            mdb_txn_abort(pointer)
            throw error
          }
          if write || commitRead {
            // mdb_txn_commit frees the transaction whether or not it succeeds.
            try check(mdb_txn_commit(pointer), "commit", path: path, hint: commitHint())
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

  private func beginHint(_ rc: Int32) -> String? {
    rc == MDB_READERS_FULL
      ? "raise maximumReaders (now \(configuration.maximumReaders)) or end read transactions sooner"
      : nil
  }

  private func commitHint() -> String? {
    "the transaction was not committed"
  }

  func closedError(_ operation: String) -> LMDBError {
    LMDBError(
      code: .environmentClosed, operation: operation, path: path,
      message: "the environment was closed; open it again")
  }

  /// Doubles the map after a write failed with a full map, unless another writer already grew
  /// it since `observed` was read.
  private func growMap(from observed: Int, cause: LMDBError) throws {
    try lock.withExclusive { () throws(LMDBError) in
      guard !isClosed else { throw closedError("grow the map") }
      guard currentMapSize <= observed else { return }
      guard currentMapSize < configuration.maximumMapSize else {
        throw LMDBError(
          code: .mapFull, operation: cause.operation, path: path,
          message:
            "the map is full at its maximum size; raise maximumMapSize (now "
            + "\(formattedBytes(configuration.maximumMapSize)))")
      }
      let grown = min(currentMapSize * 2, configuration.maximumMapSize)
      try check(mdb_env_set_mapsize(handle, grown), "grow the map", path: path)
      var info = MDB_envinfo()
      try check(mdb_env_info(handle, &info), "read environment info", path: path)
      currentMapSize = info.me_mapsize
    }
  }

  /// Adopts the larger map that another process set (`MDB_MAP_RESIZED`).
  private func adoptMapSizeOfOtherProcess() throws {
    try lock.withExclusive { () throws(LMDBError) in
      guard !isClosed else { throw closedError("adopt the map size") }
      try check(mdb_env_set_mapsize(handle, 0), "adopt the map size", path: path)
      var info = MDB_envinfo()
      try check(mdb_env_info(handle, &info), "read environment info", path: path)
      currentMapSize = info.me_mapsize
    }
  }

  // MARK: - Databases

  /// Opens a named database, or the environment's main (unnamed) database when `name` is nil.
  ///
  /// Open databases once, when setting up, and keep the returned values: they are valid for the
  /// life of the environment and can be used from any transaction.
  ///
  /// - Parameters:
  ///   - name: The database's name, or nil for the main database.
  ///   - flags: Key ordering and duplicate handling; include ``Database/Flags/create`` to create
  ///     the database if it does not exist. Flags other than `create` must match the flags the
  ///     database was created with.
  /// - Returns: The database.
  /// - Throws: ``LMDBError/Code/notFound`` if it does not exist and `create` was not given,
  ///   ``LMDBError/Code/databasesFull`` past ``Configuration/maximumDatabases``,
  ///   ``LMDBError/Code/incompatible`` for mismatched flags.
  public func openDatabase(named name: String?, flags: Database.Flags = []) throws -> Database {
    try databaseOpening.withLock { _ in
      let open = { (handle: TransactionHandle) throws -> Database in
        var dbi = MDB_dbi()
        try check(
          mdb_dbi_open(handle.pointer, name, flags.rawValue, &dbi),
          "open database '\(name ?? "main")'", path: self.path,
          hint: flags.contains(.create) ? nil : "pass the create flag to create it")
        return Database(name: name, flags: flags.subtracting(.create), dbi: dbi)
      }
      if configuration.isReadOnly || !flags.contains(.create) {
        return try withTransaction(write: false, commitRead: true, open)
      }
      return try write { try open($0.handle) }
    }
  }

  // MARK: - Maintenance

  /// Clears reader slots left by processes that died with a read transaction open, so their
  /// snapshots no longer hold pages. Done automatically on open.
  ///
  /// - Returns: How many slots were cleared.
  @discardableResult
  public func clearStaleReaders() throws -> Int {
    try lock.withShared { () throws(LMDBError) -> Int in
      guard !isClosed else { throw closedError("clear stale readers") }
      var dead: Int32 = 0
      try check(mdb_reader_check(handle, &dead), "clear stale readers", path: path)
      return Int(dead)
    }
  }

  /// Flushes committed transactions to disk. Needed only with ``Durability/noSync`` or
  /// ``Durability/noMetaSync``, to make everything committed so far durable.
  public func sync() throws {
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

  /// The largest key, in bytes, that a database of this environment accepts (511 with
  /// Debian's LMDB build).
  public var maximumKeySize: Int {
    Int(mdb_env_get_maxkeysize(handle))
  }
}

/// The process's open environments, by canonical path.
enum Registry {
  static let environments = Mutex<[String: WeakEnvironment]>([:])
}

struct WeakEnvironment {
  weak var environment: Environment?
}

extension Environment.Configuration {
  /// A short description for error messages.
  var summary: String {
    "durability \(durability), maximum map size \(formattedBytes(maximumMapSize)), "
      + "\(maximumDatabases) databases, \(maximumReaders) readers"
      + (isReadOnly ? ", read-only" : "")
  }
}

/// A byte count in binary units, for messages: `64 MiB`, `1 TiB`, `1.5 GiB`.
func formattedBytes(_ bytes: Int) -> String {
  let units = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"]
  var value = Double(bytes)
  var unit = 0
  while value >= 1024 && unit < units.count - 1 {
    value /= 1024
    unit += 1
  }
  if unit == 0 { return "\(bytes) bytes" }
  let rounded = (value * 10).rounded() / 10
  return rounded == rounded.rounded()
    ? "\(Int(rounded)) \(units[unit])" : "\(rounded) \(units[unit])"
}
