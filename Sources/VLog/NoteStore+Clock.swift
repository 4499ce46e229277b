internal import LMDB

/// The clock a store stamps by, when the device's own is wrong.
///
/// A store stamps its changes by the device's clock, and a server refuses changes stamped
/// further ahead of its own clock than its skew bound. A sync client tells the store how the
/// server's clock stands against the device's (``recordServerClock(offset:)``), and the store
/// keeps it, so that a device whose clock is wrong still writes changes a server takes and that
/// win where the user expects:
/// - a device more than a second ahead stamps by the server's clock (its own, moved back by
///   the offset), so its changes are taken, and a restamp after a refusal lands where the
///   server takes it;
/// - a device behind lets the stamps it ingests move its clock up to the server's clock plus
///   the skew bound, so that an edit made after seeing another's is stamped after it and wins
///   (rather than being kept as a conflict no one sees).
///
/// Only a device ahead moves its stamps by what a server says, and only back: a lying server
/// can make a device's changes older, which the clock following what the device has seen
/// bounds, but not newer than the device's own clock.
extension NoteStore {
  /// How far ahead of the server's clock a device's must be before it stamps by the server's:
  /// a second, well above the error of measuring it over a network.
  static let clockCorrectionThreshold: Int64 = 1000

  /// The server's clock minus this device's, in milliseconds, as last recorded; nil if no
  /// sync recorded it.
  public var serverClockOffset: Int64? { serverClock.withLock { $0 } }

  /// Records how the server's clock stands against this device's: `offset` milliseconds ahead
  /// (negative: behind), as a sync measured it. Kept in the store when it moved by more than a
  /// second, so that changes made offline after a restart are stamped the same way.
  public func recordServerClock(offset: Int64) throws {
    let previous = serverClock.withLock { clock in
      defer { clock = offset }
      return clock
    }
    if let previous,
      abs(previous.subtractingReportingOverflow(offset).partialValue)
        < Self.clockCorrectionThreshold
    {
      return
    }
    try VLogError.wrapping {
      try environment.write { transaction in
        try transaction.put(BigEndian.bytes(offset), forKey: Keys.Meta.clock, in: schema.meta)
      }
    }
  }

  /// The recorded offset of the server's clock, as the store keeps it.
  static func storedServerClock(
    schema: Schema, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> Int64? {
    guard let bytes = try transaction.value(forKey: Keys.Meta.clock, in: schema.meta),
      bytes.count == 8
    else { return nil }
    return BigEndian.read(Int64.self, from: bytes)
  }

  /// The time a change made now is stamped with: the device's clock, or the server's when the
  /// device's is more than ``clockCorrectionThreshold`` ahead of it.
  func stampingTime() -> Milliseconds {
    let wall = Milliseconds(dependencies.now())
    guard let offset = serverClockOffset, offset < -Self.clockCorrectionThreshold else {
      return wall
    }
    let behind = offset == .min ? UInt64(Int64.max) : UInt64(-offset)
    return Milliseconds(rawValue: wall.rawValue > behind ? wall.rawValue - behind : 0)
  }

  /// The latest time an ingested stamp may move the clock to: now plus the skew bound, and
  /// for a device behind the server's clock, plus how far behind.
  func clockLimit() -> HybridTime {
    var limit = Milliseconds(dependencies.now()).adding(maximumClockSkew).rawValue
    if let offset = serverClockOffset, offset > 0 {
      limit = limit.addingReportingOverflow(UInt64(offset)).overflow ? .max : limit + UInt64(offset)
    }
    return HybridTime(rawValue: min(limit, HybridTime.maximumMilliseconds) << 16)
  }
}
