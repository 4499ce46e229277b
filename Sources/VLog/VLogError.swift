package import LMDB

/// An error from the VLog engine: a change that cannot be made, bad input, or a store that
/// cannot be read.
///
/// Match on ``code``; the ``message`` says what failed, on what, and how to fix it. When a
/// batch of changes or events fails, nothing of it is committed.
public struct VLogError: Error, Sendable, Hashable, CustomStringConvertible {
  /// What went wrong, as a value to match on.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    private let name: String
    private init(_ name: String) { self.name = name }

    /// The note does not exist (never created here, or not yet synced).
    public static let noteNotFound = Code("noteNotFound")
    /// The note was deleted; deletes are final.
    public static let noteDeleted = Code("noteDeleted")
    /// The attachment does not exist.
    public static let attachmentNotFound = Code("attachmentNotFound")
    /// The attachment was deleted; deletes are final.
    public static let attachmentDeleted = Code("attachmentDeleted")
    /// No note uses a tag of that name.
    public static let tagNotFound = Code("tagNotFound")
    /// A version a restore names is not one of the note's texts, or the retention period
    /// erased it.
    public static let versionNotFound = Code("versionNotFound")
    /// A value is empty where one is required, out of range, or malformed.
    public static let invalidValue = Code("invalidValue")
    /// A value is larger than the limit for its kind.
    public static let valueTooLarge = Code("valueTooLarge")
    /// Bytes do not match the SHA-256 hash they were given under.
    public static let blobMismatch = Code("blobMismatch")
    /// The bytes of an attachment are not in this store (not downloaded yet).
    public static let blobMissing = Code("blobMissing")
    /// Encoded event bytes cannot be decoded.
    public static let malformedEvent = Code("malformedEvent")
    /// The store's files hold something this version cannot read: corruption, or a newer format.
    public static let corruptStore = Code("corruptStore")
    /// The store was written by a newer version of VLog.
    public static let unsupportedFormat = Code("unsupportedFormat")
    /// The store belongs to another sync account or server (see `AccountBinding`).
    public static let otherAccount = Code("otherAccount")
    /// LMDB failed; the message is LMDB's error, with its operation and path.
    public static let storage = Code("storage")

    /// The code's name, for example `noteDeleted`.
    public var description: String { name }
  }

  /// What went wrong.
  public let code: Code
  /// What failed, on what, and how to fix it.
  public let message: String
  /// The LMDB error behind a ``Code/storage`` error. Not public: LMDB is VLog's own
  /// business, and its error is in ``message``.
  package let underlying: LMDBError?

  /// Creates an error.
  public init(_ code: Code, _ message: String) {
    self.init(code, message, underlying: nil)
  }

  /// Creates an error with the LMDB error behind it.
  package init(_ code: Code, _ message: String, underlying: LMDBError?) {
    self.code = code
    self.message = message
    self.underlying = underlying
  }

  /// The message.
  public var description: String { message }
}

extension VLogError {
  static func storage(_ error: LMDBError) -> VLogError {
    VLogError(.storage, error.description, underlying: error)
  }

  /// Runs `body`, turning LMDB's errors into ``VLogError``s.
  static func wrapping<R>(_ body: () throws -> R) throws -> R {
    do {
      return try body()
    } catch let error as LMDBError {
      throw storage(error)
    }
  }

  /// Runs async `body`, converting an ``LMDBError`` it throws into a ``storage`` error.
  static func wrapping<R>(_ body: () async throws -> R) async throws -> R {
    do {
      return try await body()
    } catch let error as LMDBError {
      throw storage(error)
    }
  }
}
