internal import LMDB

/// xxHash64 (Yann Collet's XXH64): a fast, well-distributed 64-bit hash, used for the checksum
/// of each stored event and for the event-set digest. Not cryptographic.
enum XXHash64 {
  private static let prime1: UInt64 = 0x9E37_79B1_85EB_CA87
  private static let prime2: UInt64 = 0xC2B2_AE3D_27D4_EB4F
  private static let prime3: UInt64 = 0x1656_67B1_9E37_79F9
  private static let prime4: UInt64 = 0x85EB_CA77_C2B2_AE63
  private static let prime5: UInt64 = 0x27D4_EB2F_1656_67C5

  static func hash(_ bytes: UnsafeRawBufferPointer, seed: UInt64 = 0) -> UInt64 {
    let count = bytes.count
    var offset = 0
    var hash: UInt64
    if count >= 32 {
      var v1 = seed &+ prime1 &+ prime2
      var v2 = seed &+ prime2
      var v3 = seed
      var v4 = seed &- prime1
      while offset + 32 <= count {
        v1 = round(v1, read64(bytes, offset))
        v2 = round(v2, read64(bytes, offset + 8))
        v3 = round(v3, read64(bytes, offset + 16))
        v4 = round(v4, read64(bytes, offset + 24))
        offset += 32
      }
      hash = rotate(v1, 1) &+ rotate(v2, 7) &+ rotate(v3, 12) &+ rotate(v4, 18)
      hash = merge(hash, v1)
      hash = merge(hash, v2)
      hash = merge(hash, v3)
      hash = merge(hash, v4)
    } else {
      hash = seed &+ prime5
    }
    hash &+= UInt64(count)
    while offset + 8 <= count {
      hash ^= round(0, read64(bytes, offset))
      hash = rotate(hash, 27) &* prime1 &+ prime4
      offset += 8
    }
    if offset + 4 <= count {
      hash ^= UInt64(read32(bytes, offset)) &* prime1
      hash = rotate(hash, 23) &* prime2 &+ prime3
      offset += 4
    }
    while offset < count {
      hash ^= UInt64(bytes[offset]) &* prime5
      hash = rotate(hash, 11) &* prime1
      offset += 1
    }
    hash ^= hash >> 33
    hash &*= prime2
    hash ^= hash >> 29
    hash &*= prime3
    hash ^= hash >> 32
    return hash
  }

  static func hash(_ bytes: [UInt8], seed: UInt64 = 0) -> UInt64 {
    bytes.withUnsafeBytes { hash($0, seed: seed) }
  }

  @inline(__always)
  private static func read64(_ bytes: UnsafeRawBufferPointer, _ offset: Int) -> UInt64 {
    UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
  }

  @inline(__always)
  private static func read32(_ bytes: UnsafeRawBufferPointer, _ offset: Int) -> UInt32 {
    UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self))
  }

  @inline(__always)
  private static func rotate(_ value: UInt64, _ bits: UInt64) -> UInt64 {
    (value << bits) | (value >> (64 - bits))
  }

  @inline(__always)
  private static func round(_ accumulator: UInt64, _ input: UInt64) -> UInt64 {
    rotate(accumulator &+ input &* prime2, 31) &* prime1
  }

  @inline(__always)
  private static func merge(_ hash: UInt64, _ value: UInt64) -> UInt64 {
    (hash ^ round(0, value)) &* prime1 &+ prime4
  }
}

/// An order-independent digest of a set of events: the sum, modulo 2¹²⁸, of a 128-bit hash of
/// each event's id.
///
/// Two replicas holding the same set of events have the same digest whatever order they
/// received them in, so a client can show that it holds exactly what the server holds. Adding
/// an event is two hashes and an addition, cheap enough to keep up to date on every append.
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
    let addedLow = XXHash64.hash(eventID, seed: 0x5645_4C4F_4731)
    let addedHigh = XXHash64.hash(eventID, seed: 0x5645_4C4F_4732)
    let (sum, carry) = low.addingReportingOverflow(addedLow)
    low = sum
    high = high &+ addedHigh &+ (carry ? 1 : 0)
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
