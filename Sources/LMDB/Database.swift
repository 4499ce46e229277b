internal import CLMDB

/// A database inside an ``Environment``: an ordered map from keys to values.
///
/// Obtain one from ``Environment/openDatabase(named:flags:)``. The value is a small handle,
/// valid for the life of its environment and usable from any transaction on it.
///
/// Keys sort as unsigned bytes, shortest first on a common prefix (`memcmp` order), unless the
/// database was created with ``Flags/integerKey`` or ``Flags/reverseKey``. Store integers that
/// must sort as big-endian bytes.
public struct Database: Sendable, Hashable, CustomStringConvertible {
  /// How a database orders its keys and handles duplicates.
  public struct Flags: OptionSet, Sendable, Hashable {
    /// The raw `MDB_*` flag bits.
    public let rawValue: UInt32

    /// Creates flags from raw `MDB_*` bits.
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// Create the database if it does not exist.
    public static let create = Flags(rawValue: UInt32(MDB_CREATE))
    /// Compare keys from the last byte to the first.
    public static let reverseKey = Flags(rawValue: UInt32(MDB_REVERSEKEY))
    /// Keep several sorted values per key.
    public static let duplicateSort = Flags(rawValue: UInt32(MDB_DUPSORT))
    /// Keys are native-endian `UInt32` or `Int` values, compared as integers.
    public static let integerKey = Flags(rawValue: UInt32(MDB_INTEGERKEY))
    /// With ``duplicateSort``: all values of a key have the same size.
    public static let duplicateFixed = Flags(rawValue: UInt32(MDB_DUPFIXED))
    /// With ``duplicateSort``: values are native-endian integers.
    public static let integerDuplicate = Flags(rawValue: UInt32(MDB_INTEGERDUP))
    /// With ``duplicateSort``: compare values from the last byte to the first.
    public static let reverseDuplicate = Flags(rawValue: UInt32(MDB_REVERSEDUP))
  }

  /// The database's name, or nil for the environment's main database.
  public let name: String?
  /// The flags the database was opened with (without ``Flags/create``).
  public let flags: Flags
  let dbi: MDB_dbi

  init(name: String?, flags: Flags, dbi: MDB_dbi) {
    self.name = name
    self.flags = flags
    self.dbi = dbi
  }

  /// The environment's main database, which lists the named ones: liblmdb's `MAIN_DBI`, open
  /// in every environment and transaction.
  static let main = Database(name: nil, flags: [], dbi: 1)

  /// The name in quotes, or `main` for the main database.
  public var description: String {
    name.map { "'\($0)'" } ?? "main"
  }
}

/// How ``WriteTransaction/put(_:forKey:in:options:)-(ContiguousBytes,_,_,_)`` stores a value.
public struct PutOptions: OptionSet, Sendable, Hashable {
  /// The raw `MDB_*` flag bits.
  public let rawValue: UInt32

  /// Creates options from raw `MDB_*` bits.
  public init(rawValue: UInt32) { self.rawValue = rawValue }

  /// Fail with ``LMDBError/Code/keyExists`` instead of replacing an existing value.
  public static let noOverwrite = PutOptions(rawValue: UInt32(MDB_NOOVERWRITE))
  /// The key sorts after every key in the database: store it at the end without a search,
  /// which is much faster for sequential keys. A key that does not sort last fails with
  /// ``LMDBError/Code/keyExists``.
  public static let append = PutOptions(rawValue: UInt32(MDB_APPEND))
  /// In a ``Database/Flags/duplicateSort`` database: the value sorts after every value of the key.
  public static let appendDuplicate = PutOptions(rawValue: UInt32(MDB_APPENDDUP))
  /// In a ``Database/Flags/duplicateSort`` database: fail with
  /// ``LMDBError/Code/keyExists`` if the key already has this value.
  public static let noDuplicateData = PutOptions(rawValue: UInt32(MDB_NODUPDATA))
}

/// A range of keys to iterate over, in the database's own key order.
///
/// ```swift
/// KeyRange.all
/// KeyRange.from(start)                 // start and every key after it
/// KeyRange.from(start, to: end)        // start up to, not including, end
/// KeyRange.from(start, through: end)   // start up to and including end
/// KeyRange.prefix(bytes)               // every key that begins with bytes
/// ```
public struct KeyRange: Sendable, Hashable {
  /// The first key of the range (inclusive), or nil to start at the first key.
  public var lowerBound: [UInt8]?
  /// The key where the range ends, or nil to run to the last key.
  public var upperBound: [UInt8]?
  /// Whether ``upperBound`` itself is in the range.
  public var includesUpperBound: Bool

  /// Creates a range from its bounds.
  public init(lowerBound: [UInt8]?, upperBound: [UInt8]?, includesUpperBound: Bool) {
    self.lowerBound = lowerBound
    self.upperBound = upperBound
    self.includesUpperBound = includesUpperBound
  }

  /// Every key.
  public static let all = KeyRange(lowerBound: nil, upperBound: nil, includesUpperBound: false)

  /// `start` and every key after it.
  public static func from(_ start: [UInt8]) -> KeyRange {
    KeyRange(lowerBound: start, upperBound: nil, includesUpperBound: false)
  }

  /// Keys from `start` (inclusive) to `end` (exclusive).
  public static func from(_ start: [UInt8], to end: [UInt8]) -> KeyRange {
    KeyRange(lowerBound: start, upperBound: end, includesUpperBound: false)
  }

  /// Keys from `start` to `end`, both inclusive.
  public static func from(_ start: [UInt8], through end: [UInt8]) -> KeyRange {
    KeyRange(lowerBound: start, upperBound: end, includesUpperBound: true)
  }

  /// Every key that begins with `prefix`, for databases in the default byte order.
  public static func prefix(_ prefix: [UInt8]) -> KeyRange {
    var end = prefix
    while let last = end.last, last == 0xFF { end.removeLast() }
    guard !end.isEmpty else { return .from(prefix) }
    end[end.count - 1] += 1
    return .from(prefix, to: end)
  }
}

/// Page and entry counts of a database (`MDB_stat`).
public struct DatabaseStatistics: Sendable, Hashable {
  /// The size of a page, in bytes.
  public var pageSize: Int
  /// The depth of the B-tree.
  public var depth: Int
  /// Internal (non-leaf) pages.
  public var branchPages: Int
  /// Leaf pages.
  public var leafPages: Int
  /// Overflow pages, holding values larger than about half a page.
  public var overflowPages: Int
  /// Key/value pairs.
  public var entries: Int

  /// Bytes in all the database's pages.
  public var sizeInBytes: Int { (branchPages + leafPages + overflowPages) * pageSize }

  init(_ stat: MDB_stat) {
    pageSize = Int(stat.ms_psize)
    depth = Int(stat.ms_depth)
    branchPages = stat.ms_branch_pages
    leafPages = stat.ms_leaf_pages
    overflowPages = stat.ms_overflow_pages
    entries = stat.ms_entries
  }
}

/// Facts about an environment (`MDB_envinfo` and page size).
public struct EnvironmentInfo: Sendable, Hashable {
  /// The current size of the memory map, in bytes.
  public var mapSize: Int
  /// The size of a page, in bytes.
  public var pageSize: Int
  /// The number of the last page in use.
  public var lastPageNumber: Int
  /// The id of the last committed transaction.
  public var lastTransactionID: Int
  /// The number of reader slots.
  public var maximumReaders: Int
  /// Reader slots in use, by all processes.
  public var readersInUse: Int

  /// Bytes of the map in use: pages up to the last one in use.
  public var usedSize: Int { (lastPageNumber + 1) * pageSize }
}
