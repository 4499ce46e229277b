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

extension Environment {
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
      // A closed instance still held is not open: `isOpen` reads a flag, not the lock, which
      // a map growth may hold while it waits for a reader that waits for the registry.
      if let existing = environments[canonical]?.environment, existing.isOpen {
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

  /// Opens a handle; with `takingOpenLock`, first takes the shared lock that keeps a
  /// compaction from replacing the file while it is open (waiting for one that runs).
  static func openHandle(
    at path: String, configuration: Configuration, takingOpenLock: Bool = true
  ) throws(LMDBError) -> Environment {
    let openLock = takingOpenLock ? try OpenLock.take(directory: path, exclusive: false) : nil
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
      if configuration.isReadOnly {
        flags |= UInt32(MDB_RDONLY)
        // Read-only media, or an environment another user owns: no lock file this process can
        // write, so none to keep its reader table in. It reads without one; a writer elsewhere
        // meanwhile is not seen to wait for its readers.
        if !canWriteLockFile(in: path) { flags |= UInt32(MDB_NOLOCK) }
      }
      try check(
        mdb_env_open(handle, path, flags, 0o644), "open environment", path: path,
        hint: openHint(configuration))
      var deadReaders: Int32 = 0
      try check(mdb_reader_check(handle, &deadReaders), "clear stale readers", path: path)
      var info = MDB_envinfo()
      try check(mdb_env_info(handle, &info), "read environment info", path: path)
      return Environment(
        path: path, configuration: configuration, handle: handle, mapSize: info.me_mapsize,
        openLock: openLock)
    } catch {
      mdb_env_close(handle)
      throw error
    }
  }

  /// Whether this process can write the lock file of the environment in `path`, or create it.
  static func canWriteLockFile(in path: String) -> Bool {
    let lockFile = path + "/lock.mdb"
    if access(lockFile, F_OK) == 0 { return access(lockFile, W_OK) == 0 }
    return access(path, W_OK) == 0
  }

  static func openHint(_ configuration: Configuration) -> String? {
    configuration.isReadOnly ? "a read-only open needs an existing environment" : nil
  }

  static func roundedMapSize(_ size: Int) -> Int {
    let granule = 64 << 10
    return max(granule, (size + granule - 1) / granule * granule)
  }

  static func canonicalDirectory(_ path: String, creating: Bool) throws(LMDBError)
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
}
