internal import LMDB

/// A hybrid logical time: wall-clock milliseconds since 1970 in the high 48 bits and a counter
/// in the low 16, so that times compare as plain integers.
///
/// The counter orders events made within one millisecond, and events made after a replica saw
/// a time from the future (another replica's fast clock): the clock then keeps the larger
/// millisecond value and counts up, so causality holds even when wall clocks disagree.
public struct HybridTime: Hashable, Comparable, Sendable, CustomStringConvertible {
  /// The packed value: `milliseconds << 16 | counter`.
  public let rawValue: UInt64

  /// The largest millisecond value a time can hold (year 10889).
  public static let maximumMilliseconds: UInt64 = (1 << 48) - 1

  /// Wraps a packed value.
  public init(rawValue: UInt64) { self.rawValue = rawValue }

  /// Packs a millisecond value and a counter.
  ///
  /// - Precondition: `milliseconds` is at most ``maximumMilliseconds``.
  public init(milliseconds: UInt64, counter: UInt16) {
    precondition(milliseconds <= Self.maximumMilliseconds, "milliseconds out of range")
    rawValue = milliseconds << 16 | UInt64(counter)
  }

  /// Milliseconds since 1970-01-01T00:00:00Z.
  public var milliseconds: UInt64 { rawValue >> 16 }

  /// The logical counter.
  public var counter: UInt16 { UInt16(truncatingIfNeeded: rawValue) }

  /// The time before every real time.
  public static let zero = HybridTime(rawValue: 0)

  /// Orders by milliseconds, then counter.
  public static func < (lhs: HybridTime, rhs: HybridTime) -> Bool { lhs.rawValue < rhs.rawValue }

  /// ISO 8601 with milliseconds, then the counter: `2026-11-22T04:13:46.123Z#2`.
  public var description: String {
    ISO8601.format(milliseconds: Int64(milliseconds)) + "#\(counter)"
  }
}

/// The stamp of an event: when it was made (a ``HybridTime``) and by which replica.
///
/// Stamps are totally ordered, by time and then by replica id, and the order is the same on
/// every replica. A newer stamp wins a field. A stamp is also the event's unique id: a replica
/// never issues the same time twice.
public struct Stamp: Hashable, Comparable, Sendable, CustomStringConvertible {
  /// When the event was made.
  public let time: HybridTime
  /// The replica that made it.
  public let replica: ReplicaID

  /// Creates a stamp.
  public init(time: HybridTime, replica: ReplicaID) {
    self.time = time
    self.replica = replica
  }

  /// The stamp before every real stamp: what a field that was never set carries.
  public static let zero = Stamp(time: .zero, replica: ReplicaID(Identifier(high: 0, low: 0)))

  /// Orders by time, then by replica id.
  public static func < (lhs: Stamp, rhs: Stamp) -> Bool {
    (lhs.time.rawValue, lhs.replica.identifier) < (rhs.time.rawValue, rhs.replica.identifier)
  }

  /// The time and the replica: `2026-11-22T04:13:46.123Z#2@1b4e28ba-…`.
  public var description: String { "\(time)@\(replica)" }

  /// The 24-byte key form: time then replica, big-endian, so keys sort as stamps do.
  package static let byteCount = 24

  /// Lends the 24-byte key form without allocating.
  @inline(__always)
  package func withKey<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try withUnsafeBytes(
      of: (
        time.rawValue.bigEndian, replica.identifier.high.bigEndian,
        replica.identifier.low.bigEndian
      )
    ) { try body($0) }
  }

  package func append(to buffer: inout [UInt8]) {
    BigEndian.append(time.rawValue, to: &buffer)
    replica.identifier.append(to: &buffer)
  }

  package var bytes: [UInt8] {
    var buffer = [UInt8]()
    buffer.reserveCapacity(Self.byteCount)
    append(to: &buffer)
    return buffer
  }

  /// The id as 48 lowercase hexadecimal digits: its 24-byte key form, as the sync protocol
  /// names events.
  public var hex: String { Hex.string(bytes) }

  /// Reads the 48 hexadecimal digits that ``hex`` writes; nil for anything else.
  public init?(hex: some StringProtocol) {
    guard hex.utf8.count == 2 * Self.byteCount, let bytes = Hex.bytes(hex) else { return nil }
    self = bytes.withUnsafeBytes { Stamp(bytes: $0) }
  }

  /// Reads a key form.
  ///
  /// - Precondition: `bytes` holds at least `offset + 24` bytes.
  package init(bytes: UnsafeRawBufferPointer, at offset: Int = 0) {
    time = HybridTime(
      rawValue: UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)))
    replica = ReplicaID(Identifier(bytes: bytes, at: offset + 8))
  }
}

/// A replica's hybrid logical clock.
///
/// ``tick(wallMilliseconds:)`` issues the time for a local change: never earlier than any time
/// issued or observed before, even when the wall clock steps back. ``observe(_:limit:)``
/// advances the clock past a time received from another replica, so a change made after seeing
/// a remote change always wins over it — but never past a limit (the wall clock plus the skew
/// bound), so that one badly set device cannot drag this one into the future.
struct HybridClock: Sendable, Equatable {
  /// The latest time issued or observed.
  private(set) var latest: HybridTime

  init(latest: HybridTime = .zero) {
    self.latest = latest
  }

  /// The time for a new local event, or nil when the clock has issued the last time there is
  /// (year 10889), which no input can bring about while observations are limited.
  mutating func tick(wallMilliseconds: UInt64) -> HybridTime? {
    let wall = min(wallMilliseconds, HybridTime.maximumMilliseconds)
    if wall > latest.milliseconds {
      latest = HybridTime(rawValue: wall << 16)
    } else if latest.rawValue < .max {
      // The counter carries into the milliseconds when it overflows.
      latest = HybridTime(rawValue: latest.rawValue + 1)
    } else {
      return nil
    }
    return latest
  }

  /// Advances past a time seen on another replica's event, but not beyond `limit`.
  mutating func observe(_ time: HybridTime, limit: HybridTime = HybridTime(rawValue: .max)) {
    let bounded = min(time, limit)
    if bounded > latest { latest = bounded }
  }
}
