internal import LMDB
internal import VLog

/// A failure of the server's storage (LMDB or PostgreSQL), by what its caller can do about it.
///
/// Storage speaks of accounts, cursors and databases, never of HTTP: the one place that turns a
/// storage error into an answer is the server's request middleware (``ServerError``'s
/// `init(_:requestID:)`), which answers what a client can act on and logs the rest under the
/// request's id. ``SyncServer/open(dataDirectory:configuration:dependencies:logger:)`` and its
/// PostgreSQL sibling throw it when a data directory or database cannot be used.
public struct StorageError: Error, CustomStringConvertible, Sendable {
  /// What kind of failure, for a caller to match.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    private let name: String
    private init(_ name: String) { self.name = name }

    /// An account with the user name exists already.
    public static let accountExists = Code("accountExists")
    /// The account was deleted (after the request's token was checked).
    public static let accountDeleted = Code("accountDeleted")
    /// A cursor past the end of the account's log.
    public static let invalidCursor = Code("invalidCursor")
    /// An encrypted account's keys are not as the request expected: another epoch, or keys the
    /// rotation does not cover. The device reads them again and retries.
    public static let keysChanged = Code("keysChanged")
    /// A pushed event under an id the account's log holds with another body: the device that
    /// pushed it shares its replica id with another (a copied store).
    public static let eventCollision = Code("eventCollision")
    /// The database cannot be reached or did not answer in time, or the storage cannot take
    /// writes now (a full disk or map, no memory, an I/O error): try again in a moment.
    public static let unavailable = Code("unavailable")
    /// The data directory or database cannot be used by this server: a newer format or schema,
    /// a URL that is not a PostgreSQL URL.
    public static let unusable = Code("unusable")
    /// Stored data is damaged: a record that does not decode, an index that names what is
    /// not there.
    public static let damaged = Code("damaged")
    /// The storage failed otherwise: the message says how.
    public static let failed = Code("failed")

    /// The code's name.
    public var description: String { name }
  }

  /// What kind of failure.
  public let code: Code
  /// What happened and where, for the log and for operators: it may name accounts, tables
  /// and sequence numbers, so a server never sends it to a client but for codes a client
  /// caused (`accountExists`, `invalidCursor`, `keysChanged`, `eventCollision`).
  public let message: String
  /// The user name of `accountExists`.
  let name: String?
  /// The cursor and the log's last sequence number of `invalidCursor`.
  let cursor: (given: UInt64, last: UInt64)?
  /// The ids of `eventCollision`, in the order pushed.
  let collisions: [Stamp]

  init(
    _ code: Code, _ message: String, name: String? = nil,
    cursor: (given: UInt64, last: UInt64)? = nil, collisions: [Stamp] = []
  ) {
    self.code = code
    self.message = message
    self.name = name
    self.cursor = cursor
    self.collisions = collisions
  }

  /// `code: message`.
  public var description: String { "\(code): \(message)" }

  static func accountExists(_ name: String) -> StorageError {
    StorageError(.accountExists, "the user name '\(name)' is taken", name: name)
  }

  static let accountDeleted = StorageError(.accountDeleted, "the account was deleted")

  static func invalidCursor(_ cursor: UInt64, _ last: UInt64) -> StorageError {
    StorageError(
      .invalidCursor, "cursor \(cursor) is past the end of the log (\(last) events)",
      cursor: (cursor, last))
  }

  static func eventCollision(_ ids: [Stamp]) -> StorageError {
    StorageError(
      .eventCollision,
      "\(ids.count) pushed events are held under their ids with other bodies, first \(ids[0])",
      collisions: ids)
  }

  static func keysChanged(_ message: String) -> StorageError {
    StorageError(.keysChanged, message)
  }

  static func unavailable(_ message: String) -> StorageError {
    StorageError(.unavailable, message)
  }

  static func unusable(_ message: String) -> StorageError {
    StorageError(.unusable, message)
  }

  static func damaged(_ message: String) -> StorageError {
    StorageError(.damaged, message)
  }

  /// LMDB's failure, as the storage's: damage is `damaged`; a file this LMDB cannot use is
  /// `unusable`; what passes once an operator makes room (a full disk or map, no reader slot or
  /// memory, an I/O error) is `unavailable`, which a client retries; anything else is
  /// `failed`.
  init(_ error: LMDBError) {
    switch error.code {
    case .corrupted, .pageNotFound, .panic, .invalidFile:
      self = .damaged("\(error)")
    case .versionMismatch, .incompatible:
      self = .unusable("\(error)")
    case .mapFull, .noSpace, .readersFull, .outOfMemory, .ioError:
      self = .unavailable("\(error)")
    default:
      self = StorageError(.failed, "\(error)")
    }
  }

  /// The engine's failure in an account's log, as the storage's: a damaged log is `damaged`;
  /// LMDB's failure underneath is what `init(_: LMDBError)` makes of it; anything else is
  /// `failed`.
  init(_ error: VLogError) {
    if let underlying = error.underlying {
      self.init(underlying)
    } else if error.code == .corruptStore {
      self = .damaged("\(error)")
    } else if error.code == .unsupportedFormat {
      self = .unusable("\(error)")
    } else {
      self = StorageError(.failed, "\(error)")
    }
  }

  /// Runs `body`, turning a failure of LMDB or of the engine into a ``StorageError``: the one
  /// boundary between the LMDB server's storage and what it tells its callers.
  static func converting<R>(_ body: () throws -> R) throws -> R {
    do {
      return try body()
    } catch let error as LMDBError {
      throw StorageError(error)
    } catch let error as VLogError {
      throw StorageError(error)
    }
  }

  /// ``converting(_:)`` for work that waits.
  static func converting<R>(_ body: () async throws -> R) async throws -> R {
    do {
      return try await body()
    } catch let error as LMDBError {
      throw StorageError(error)
    } catch let error as VLogError {
      throw StorageError(error)
    }
  }
}
