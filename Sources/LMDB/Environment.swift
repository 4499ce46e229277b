internal import CLMDB
internal import Dispatch
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
///    processes), enforced by LMDB. From async code, write inside ``onWriterQueue(_:)``, the
///    environment's serial queue, so that waiting for the writer lock never blocks a thread of
///    the cooperative pool.
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
  /// Set once the handle is closed, after `mdb_env_close` and while `lock` is held
  /// exclusively: so a transaction (holding `lock` shared) sees it as it was when it began, and
  /// the registry's checks read it without `lock`, which they must not wait for behind a map
  /// growth.
  let hasClosed = Atomic<Bool>(false)
  /// Whether the handle is closed (``hasClosed``).
  var isClosed: Bool { hasClosed.load(ordering: .acquiring) }
  /// What runs once the environment is closed (``onClose(_:)``); nil once they ran.
  let closeHandlers = Locked<[@Sendable () -> Void]?>([])
  nonisolated(unsafe) var currentMapSize: Int
  /// Where the data file is mapped (``MapBounds/mappedAddress(of:)``): moves when the map
  /// grows. Guarded by `lock`, as `currentMapSize`.
  nonisolated(unsafe) var mapStart: UInt
  /// The environment's page size.
  let pageSize: Int
  /// Runs the writes of ``onWriterQueue(_:)`` one at a time, off the cooperative pool.
  let writerQueue = DispatchQueue(label: "LMDB.Environment.writer")
  /// Serialises `mdb_dbi_open`, which LMDB forbids from concurrent transactions.
  let databaseOpening = Locked<Void>(())

  /// Held while the environment is open, so that no compaction replaces its file.
  let openLock: FileLock?

  init(
    path: String, configuration: Configuration, handle: OpaquePointer, mapSize: Int,
    openLock: FileLock? = nil
  ) {
    self.path = path
    self.configuration = configuration
    self.handle = handle
    self.currentMapSize = mapSize
    self.openLock = openLock
    self.mapStart = MapBounds.mappedAddress(of: handle)
    maximumKeySize = Int(mdb_env_get_maxkeysize(handle))
    var stat = MDB_stat()
    pageSize = mdb_env_stat(handle, &stat) == MDB_SUCCESS ? Int(stat.ms_psize) : 4096
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
      openLock?.release()
    }
  }

  /// Closes the environment now, for every holder of this instance.
  ///
  /// Waits for open transactions to end. Afterwards every call on this instance throws
  /// ``LMDBError/Code/environmentClosed``, and the path can be opened again. Closing twice
  /// does nothing.
  public func close() {
    Registry.environments.withLock { environments in
      lock.withExclusive { closeHandle() }
      if environments[path]?.environment === self {
        environments[path] = nil
      }
    }
    runCloseHandlers()
  }

  /// Closes the handle, with `lock` held exclusively.
  func closeHandle() {
    guard !isClosed else { return }
    mdb_env_close(handle)
    hasClosed.store(true, ordering: .releasing)
    openLock?.release()
  }

  /// Whether the environment is open: false once ``close()`` or a failed growth of the map
  /// closed it.
  public var isOpen: Bool { !isClosed }

  /// Runs `handler` once the environment is closed — by ``close()``, or because a grown map
  /// could not be made — on the thread that closed it, after the close; at once if it is
  /// closed already. For holders that must stop what waits on the environment (streams of
  /// changes, background work).
  public func onClose(_ handler: @escaping @Sendable () -> Void) {
    let pending = closeHandlers.withLock { handlers -> Bool in
      guard handlers != nil else { return false }
      handlers?.append(handler)
      return true
    }
    if !pending { handler() }
  }

  /// Runs the close handlers, once.
  func runCloseHandlers() {
    let handlers = closeHandlers.withLock { handlers in
      defer { handlers = nil }
      return handlers ?? []
    }
    for handler in handlers { handler() }
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
    // Before the opening lock: its holder may be growing the map, waiting for this thread.
    try TransactionDepth.refuseInside("open database '\(name ?? "main")'", path: path)
    return try databaseOpening.withLock { _ in
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

  /// The largest key, in bytes, that a database of this environment accepts (511 with
  /// Debian's LMDB build).
  public let maximumKeySize: Int
}

extension Environment.Configuration {
  /// A short description for error messages.
  var summary: String {
    "durability \(durability), maximum map size \(formattedBytes(maximumMapSize)), "
      + "\(maximumDatabases) databases, \(maximumReaders) readers"
      + (isReadOnly ? ", read-only" : "")
  }
}
