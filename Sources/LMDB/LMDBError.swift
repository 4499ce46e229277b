internal import CLMDB

#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Darwin)
  internal import Darwin
#endif

/// An error from LMDB or from this wrapper around it.
///
/// Every failure carries the result ``code`` (match on it in `catch` clauses), the
/// ``operation`` that failed (for example `"put into 'events'"`), and a ``message`` that
/// says what happened and, where there is one, how to fix it.
///
/// ```swift
/// do {
///   try environment.write { try $0.put(value, forKey: key, in: events, options: .noOverwrite) }
/// } catch let error as LMDBError where error.code == .keyExists {
///   // already stored
/// }
/// ```
public struct LMDBError: Error, Sendable, Hashable, CustomStringConvertible {
  /// A result code: one of LMDB's own codes, an `errno` value reported by LMDB, or a code of
  /// this wrapper (see ``isWrapperCode``).
  ///
  /// Codes are values, not an enumeration, so that new codes never break a `switch`.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    /// The numeric value: LMDB's `MDB_*` constant or the `errno` value.
    public let rawValue: Int32

    /// Creates a code from its numeric value.
    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// The key/data pair already exists (a `noOverwrite` put), or an `append` put was given a
    /// key that does not sort after the last key.
    public static let keyExists = Code(rawValue: MDB_KEYEXIST)
    /// The key/data pair was not found.
    public static let notFound = Code(rawValue: MDB_NOTFOUND)
    /// A requested page was not found: the data file is corrupted or was truncated.
    public static let pageNotFound = Code(rawValue: MDB_PAGE_NOTFOUND)
    /// The located page was the wrong type: the data file is corrupted.
    public static let corrupted = Code(rawValue: MDB_CORRUPTED)
    /// An update of meta page failed or the environment had a fatal error.
    public static let panic = Code(rawValue: MDB_PANIC)
    /// The data file was written by an incompatible version of LMDB.
    public static let versionMismatch = Code(rawValue: MDB_VERSION_MISMATCH)
    /// The file is not a valid LMDB file.
    public static let invalidFile = Code(rawValue: MDB_INVALID)
    /// The map is full. Writes through ``Environment/write(_:)`` grow the map and retry before
    /// reporting this, so it means the map reached ``Environment/Configuration/maximumMapSize``.
    public static let mapFull = Code(rawValue: MDB_MAP_FULL)
    /// The environment has no room for another named database; raise
    /// ``Environment/Configuration/maximumDatabases``.
    public static let databasesFull = Code(rawValue: MDB_DBS_FULL)
    /// Every reader slot is in use; raise ``Environment/Configuration/maximumReaders``.
    public static let readersFull = Code(rawValue: MDB_READERS_FULL)
    /// The transaction has too many dirty pages.
    public static let transactionFull = Code(rawValue: MDB_TXN_FULL)
    /// Cursor stack too deep: internal error.
    public static let cursorFull = Code(rawValue: MDB_CURSOR_FULL)
    /// A page has not enough space: internal error.
    public static let pageFull = Code(rawValue: MDB_PAGE_FULL)
    /// Another process grew the map beyond this process's mapping.
    public static let mapResized = Code(rawValue: MDB_MAP_RESIZED)
    /// The operation is incompatible with the database's flags, or the database was opened
    /// with different flags.
    public static let incompatible = Code(rawValue: MDB_INCOMPATIBLE)
    /// The transaction must abort, has a child, or is invalid.
    public static let badTransaction = Code(rawValue: MDB_BAD_TXN)
    /// A key or value has an unsupported size (empty key, or key longer than
    /// ``Environment/maximumKeySize``).
    public static let badValueSize = Code(rawValue: MDB_BAD_VALSIZE)
    /// The database handle was closed or changed unexpectedly.
    public static let badDatabase = Code(rawValue: MDB_BAD_DBI)
    /// The disk is full (`ENOSPC`).
    public static let noSpace = Code(rawValue: ENOSPC)
    /// Permission denied (`EACCES`): the file is not writable, or a write was attempted in a
    /// read transaction.
    public static let accessDenied = Code(rawValue: EACCES)
    /// The file or directory does not exist (`ENOENT`).
    public static let noSuchFile = Code(rawValue: ENOENT)
    /// An argument was invalid (`EINVAL`).
    public static let invalidArgument = Code(rawValue: EINVAL)
    /// An I/O error (`EIO`).
    public static let ioError = Code(rawValue: EIO)
    /// Out of memory (`ENOMEM`).
    public static let outOfMemory = Code(rawValue: ENOMEM)

    /// The environment was closed with ``Environment/close()``.
    public static let environmentClosed = Code(rawValue: -40_001)
    /// The path is already open in this process with a configuration that differs from the
    /// requested one.
    public static let alreadyOpen = Code(rawValue: -40_002)
    /// A transaction was begun on a thread that already has one open. Transactions don't nest:
    /// do the work inside the open transaction.
    public static let nestedTransaction = Code(rawValue: -40_003)
    /// The transaction had an earlier failure and can only be aborted.
    public static let transactionFailed = Code(rawValue: -40_004)

    /// Whether this is a code of this wrapper rather than one of LMDB or the system.
    public var isWrapperCode: Bool { rawValue <= -40_000 && rawValue > -41_000 }

    /// The code's name, for example `mapFull`, or its number if it has no name.
    public var description: String {
      Self.names[rawValue] ?? "code \(rawValue)"
    }

    private static let names: [Int32: String] = [
      MDB_KEYEXIST: "keyExists", MDB_NOTFOUND: "notFound", MDB_PAGE_NOTFOUND: "pageNotFound",
      MDB_CORRUPTED: "corrupted", MDB_PANIC: "panic", MDB_VERSION_MISMATCH: "versionMismatch",
      MDB_INVALID: "invalidFile", MDB_MAP_FULL: "mapFull", MDB_DBS_FULL: "databasesFull",
      MDB_READERS_FULL: "readersFull", MDB_TXN_FULL: "transactionFull",
      MDB_CURSOR_FULL: "cursorFull", MDB_PAGE_FULL: "pageFull", MDB_MAP_RESIZED: "mapResized",
      MDB_INCOMPATIBLE: "incompatible", MDB_BAD_TXN: "badTransaction",
      MDB_BAD_VALSIZE: "badValueSize", MDB_BAD_DBI: "badDatabase", ENOSPC: "noSpace",
      EACCES: "accessDenied", ENOENT: "noSuchFile", EINVAL: "invalidArgument", EIO: "ioError",
      ENOMEM: "outOfMemory", -40_001: "environmentClosed", -40_002: "alreadyOpen",
      -40_003: "nestedTransaction", -40_004: "transactionFailed",
    ]
  }

  /// What went wrong, as a value to match on.
  public let code: Code
  /// The operation that failed, for example `"open environment"` or `"put into 'events'"`.
  public let operation: String
  /// The path of the environment, when the failure concerns one.
  public let path: String?
  /// What happened: LMDB's own text (`mdb_strerror`) for its codes, followed by a hint on how
  /// to fix it where there is one.
  public let message: String

  /// Creates an error.
  public init(code: Code, operation: String, path: String? = nil, message: String) {
    self.code = code
    self.operation = operation
    self.path = path
    self.message = message
  }

  /// One line: the operation, the path, and the message, for example
  /// `cannot put into 'events' in '/data/notes': MDB_MAP_FULL: Environment mapsize limit reached`.
  public var description: String {
    if let path {
      return "cannot \(operation) in '\(path)': \(message)"
    }
    return "cannot \(operation): \(message)"
  }

  /// LMDB's text for a result code.
  static func text(for code: Int32) -> String {
    String(cString: mdb_strerror(code))
  }
}

/// Turns an LMDB result code into a thrown ``LMDBError``; the one place where C result codes
/// become Swift errors.
///
/// - Parameters:
///   - rc: The value an `mdb_*` function returned.
///   - operation: What was being done, for the message.
///   - path: The environment's path, if known.
///   - hint: Advice appended to LMDB's text, if the caller knows how to fix the failure.
@inline(__always)
func check(
  _ rc: Int32, _ operation: @autoclosure () -> String, path: String? = nil,
  hint: @autoclosure () -> String? = nil
) throws(LMDBError) {
  guard rc == MDB_SUCCESS else {
    throw makeError(rc, operation(), path: path, hint: hint())
  }
}

/// Builds the error for a non-zero LMDB result code.
func makeError(_ rc: Int32, _ operation: String, path: String?, hint: String? = nil)
  -> LMDBError
{
  var message = LMDBError.text(for: rc)
  if let hint { message += "; " + hint }
  return LMDBError(code: .init(rawValue: rc), operation: operation, path: path, message: message)
}
