internal import CLMDB

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

/// What a compaction did: the data file's size before and after.
public struct CompactionResult: Sendable, Hashable {
  /// Bytes of `data.mdb` before.
  public let bytesBefore: Int
  /// Bytes of `data.mdb` after.
  public let bytesAfter: Int
}

/// The lock that keeps a compaction from replacing a data file that a process has open.
///
/// Every process that opens an environment holds a shared `flock` on `open.lock` in its
/// directory until it closes it; a compaction takes it exclusively. (`flock` locks are
/// independent of the `fcntl` locks LMDB keeps on `lock.mdb`, so closing this file never
/// drops LMDB's.)
enum OpenLock {
  static let fileName = "open.lock"

  /// Takes the lock of the environment at `directory`: shared (waiting while a compaction
  /// runs) or exclusive (failing if any process still has the environment open after
  /// ``FileLock/exclusiveGrace``).
  ///
  /// - Returns: nil when the directory cannot hold the lock file (read-only media): nothing
  ///   can compact there either.
  static func take(directory: String, exclusive: Bool) throws(LMDBError) -> FileLock? {
    try FileLock(
      directory: directory, fileName: fileName, exclusive: exclusive,
      busy: LMDBError(
        code: .alreadyOpen, operation: "compact environment", path: directory,
        message: "a process has it open; close it (or stop the server) and compact again"))
  }
}

extension Environment {
  /// Rewrites an environment that no process has open into a compact data file: LMDB's
  /// compacting copy (free pages omitted, the rest renumbered) into a new file, flushed to
  /// disk, then renamed over `data.mdb`.
  ///
  /// LMDB reuses freed pages but neither shrinks its file nor clears free pages, so bytes a
  /// store erased can survive in them; after compaction they are not in the file. A crash at
  /// any point leaves either the old file or the new one, both whole. Opens wait while a
  /// compaction runs; a compaction fails while the environment is open anywhere (after a
  /// second's grace for a process that is closing it).
  ///
  /// - Parameters:
  ///   - path: The environment's directory.
  ///   - configuration: How to open it for the copy (its databases limit and map size).
  /// - Returns: The data file's size before and after.
  /// - Throws: ``LMDBError/Code/alreadyOpen`` if this or another process has it open.
  public static func compact(at path: String, configuration: Configuration) throws
    -> CompactionResult
  {
    let directory = try canonicalDirectory(path, creating: false)
    try refuseIfOpenInThisProcess(directory)
    guard let lock = try OpenLock.take(directory: directory, exclusive: true) else {
      throw LMDBError(
        code: .accessDenied, operation: "compact environment", path: directory,
        message: "cannot create \(OpenLock.fileName)")
    }
    let dataFile = directory + "/data.mdb"
    let before = try fileSize(dataFile)
    let staging = directory + "/compacting"
    // A copy left by an interrupted compaction, if any; when there is none, nothing to remove.
    try? FileManager.default.removeItem(atPath: staging)
    var configuration = configuration
    configuration.isReadOnly = false
    let environment = try openHandle(
      at: directory, configuration: configuration, takingOpenLock: false)
    do {
      try environment.copy(to: staging, compacting: true)
      environment.close()
    } catch {
      environment.close()
      // The copy's error is the one to report; a staging copy left behind is removed next time.
      try? FileManager.default.removeItem(atPath: staging)
      throw error
    }
    try flush(staging + "/data.mdb")
    guard rename(staging + "/data.mdb", dataFile) == 0 else {
      throw makeError(errno, "replace the data file with its compacted copy", path: directory)
    }
    try flush(directory)
    // The compaction is done and durable; an empty staging directory left is removed next time.
    try? FileManager.default.removeItem(atPath: staging)
    lock.release()
    return CompactionResult(bytesBefore: before, bytesAfter: try fileSize(dataFile))
  }

  /// Throws ``LMDBError/Code/alreadyOpen`` if this process has the environment at `path` open:
  /// for operations that need it closed everywhere.
  public static func refuseIfOpenInThisProcess(_ path: String) throws {
    let directory = try canonicalDirectory(path, creating: false)
    let isOpenHere = Registry.environments.withLock {
      $0[directory]?.environment?.isOpen ?? false
    }
    guard !isOpenHere else {
      throw LMDBError(
        code: .alreadyOpen, operation: "compact environment", path: directory,
        message: "this process has it open; close it first")
    }
  }

  /// The size of the data file, `data.mdb`, in bytes: what the environment takes on disk.
  public func dataFileBytes() throws -> Int {
    try Self.fileSize(path + "/data.mdb")
  }

  /// Bytes of the data file that a compaction would give back: the file's size less the
  /// pages the given databases, the main database and the two meta pages use. Free pages
  /// (reused by later writes, never returned to the file system) make up the difference.
  ///
  /// - Parameters:
  ///   - databases: Every named database of the environment.
  ///   - transaction: A transaction of the environment, whose snapshot is measured.
  public func reclaimableBytes(
    databases: [Database], in transaction: borrowing some Transaction & ~Copyable
  ) throws -> Int {
    // The main database through the transaction: taking the environment's lock again here
    // would wait behind a map growth that waits for this transaction.
    let main = try transaction.statistics(of: Database.main)
    var pages = main.branchPages + main.leafPages + main.overflowPages + 2
    for database in databases {
      let statistics = try transaction.statistics(of: database)
      pages += statistics.branchPages + statistics.leafPages + statistics.overflowPages
    }
    return max(0, try dataFileBytes() - pages * main.pageSize)
  }

  static func fileSize(_ path: String) throws(LMDBError) -> Int {
    var status = stat()
    guard stat(path, &status) == 0 else { throw makeError(errno, "read the size of", path: path) }
    return Int(status.st_size)
  }

  /// `fsync`s a file or directory.
  private static func flush(_ path: String) throws(LMDBError) {
    let descriptor = Glibc.open(path, O_RDONLY | O_CLOEXEC)
    guard descriptor >= 0 else { throw makeError(errno, "open to flush", path: path) }
    defer { Glibc.close(descriptor) }
    guard fsync(descriptor) == 0 else { throw makeError(errno, "flush to disk", path: path) }
  }
}

extension Environment {
  /// Deletes an environment that no process has open: its data file and lock file, leaving the
  /// directory and any other files in it.
  ///
  /// - Throws: ``LMDBError/Code/alreadyOpen`` if this or another process has it open; then
  ///   nothing is deleted.
  public static func remove(at path: String) throws {
    let directory = try canonicalDirectory(path, creating: false)
    try refuseIfOpenInThisProcess(directory)
    guard
      let lock = try FileLock(
        directory: directory, fileName: OpenLock.fileName, exclusive: true,
        busy: LMDBError(
          code: .alreadyOpen, operation: "remove environment", path: directory,
          message: "a process has it open; close it (or stop the server) and try again"))
    else {
      throw LMDBError(
        code: .accessDenied, operation: "remove environment", path: directory,
        message: "cannot create \(OpenLock.fileName)")
    }
    for name in ["data.mdb", "lock.mdb"] where unlink(directory + "/" + name) != 0 {
      guard errno == ENOENT else {
        throw makeError(errno, "remove \(name)", path: directory)
      }
    }
    try flush(directory)
    lock.release()
  }
}
