internal import CXXHash
internal import LMDB

/// The fast non-cryptographic hashes of the log, from Debian's libxxhash: XXH3 for the checksum
/// of each stored event (its low 32 bits) and XXH3-128 for each event id in the event-set
/// digest.
///
/// Measured against the hand-written XXH64 VLog used before (release build, one core of this
/// machine's x86_64 VM): a 100-byte event's checksum 16.1 → 7.0 ns, a 1 KiB one's 79 → 58 ns,
/// an id's 128-bit digest term (two XXH64 with two seeds) 12.6 → 5.2 ns.
enum Hash {
  /// XXH3, 64 bits.
  static func xxh3(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
    XXH3_64bits(bytes.baseAddress, bytes.count)
  }

  /// XXH3, 64 bits, of an array.
  static func xxh3(_ bytes: [UInt8]) -> UInt64 {
    bytes.withUnsafeBytes { xxh3($0) }
  }

  /// XXH3, 128 bits, as its high and low halves.
  static func xxh3x128(_ bytes: UnsafeRawBufferPointer) -> (high: UInt64, low: UInt64) {
    let hash = XXH3_128bits(bytes.baseAddress, bytes.count)
    return (hash.high64, hash.low64)
  }

  /// XXH64: only to read the checksums of stores of format 1.
  static func legacyXXH64(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
    XXH64(bytes.baseAddress, bytes.count, 0)
  }
}

/// An order-independent digest of a set of events: the sum, modulo 2¹²⁸, of the XXH3-128 hash of
/// each event's id (its 24 bytes: time then replica, big-endian).
///
/// Two replicas holding the same set of events have the same digest whatever order they
/// received them in, so a client can show that it holds exactly what the server holds. Adding
/// an event is one hash and an addition, cheap enough to keep up to date on every append.
public struct EventSetDigest: Hashable, Sendable, CustomStringConvertible {
  /// The high 64 bits of the sum.
  public private(set) var high: UInt64
  /// The low 64 bits of the sum.
  public private(set) var low: UInt64

  /// The digest of no events.
  public static let empty = EventSetDigest(high: 0, low: 0)

  /// Creates a digest from its two halves.
  public init(high: UInt64, low: UInt64) {
    self.high = high
    self.low = low
  }

  /// Parses the 32 hexadecimal digits that ``description`` writes.
  public init?(hex: some StringProtocol) {
    guard hex.utf8.count == 32, let bytes = Hex.bytes(hex) else { return nil }
    self.init(bytes: bytes)
  }

  /// Adds an event, given its id's 24 bytes.
  mutating func add(eventID: UnsafeRawBufferPointer) {
    add(hash: Hash.xxh3x128(eventID))
  }

  /// Adds an id's hash.
  mutating func add(hash added: (high: UInt64, low: UInt64)) {
    let (sum, carry) = low.addingReportingOverflow(added.low)
    low = sum
    high = high &+ added.high &+ (carry ? 1 : 0)
  }

  /// Removes an event added before, given its id's 24 bytes.
  mutating func remove(eventID: UnsafeRawBufferPointer) {
    let removed = Hash.xxh3x128(eventID)
    let (difference, borrow) = low.subtractingReportingOverflow(removed.low)
    low = difference
    high = high &- removed.high &- (borrow ? 1 : 0)
  }

  /// Adds another digest: the digest of the union of two disjoint sets.
  public mutating func add(_ other: EventSetDigest) {
    add(hash: (other.high, other.low))
  }

  /// Adds an event, given its id. Adding each event of a set once, in any order, gives the
  /// set's digest; a server keeping a log of its own uses this to prove what it holds.
  public mutating func add(_ stamp: Stamp) {
    stamp.bytes.withUnsafeBytes { add(eventID: $0) }
  }

  /// 32 lowercase hexadecimal digits.
  public var description: String { Hex.string(bytes) }

  /// The 16 bytes: the high half, then the low half, each big-endian.
  package var bytes: [UInt8] {
    var bytes = BigEndian.bytes(high)
    BigEndian.append(low, to: &bytes)
    return bytes
  }

  /// Reads the 16 bytes that ``bytes`` writes; nil unless there are exactly 16.
  package init?(bytes: [UInt8]) {
    guard bytes.count == 16, let high = BigEndian.read(UInt64.self, from: bytes, at: 0),
      let low = BigEndian.read(UInt64.self, from: bytes, at: 8)
    else { return nil }
    self.init(high: high, low: low)
  }
}
