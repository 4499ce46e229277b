package import LMDB

/// The event-set digest split into 256 buckets by event id, so that two replicas whose digests
/// differ can find the events they do not share without sending every id.
///
/// An id's bucket is the low 8 bits of its XXH3-128 hash — the same hash the digest adds up —
/// and each bucket's digest is the ``EventSetDigest`` of the ids in it, so the buckets add up to
/// the whole digest. Two replicas that differ by a few events differ in a few buckets: comparing
/// the 256 bucket digests (4 KiB) names them, and only their ids need to travel.
public struct EventSetBuckets: Sendable, Hashable {
  /// How many buckets there are.
  public static let count = 256

  /// The digest of each bucket, in bucket order.
  public private(set) var digests: [EventSetDigest]

  /// The buckets of no events.
  public init() {
    digests = Array(repeating: .empty, count: Self.count)
  }

  /// Buckets from their digests; nil unless there are exactly ``count``.
  public init?(digests: [EventSetDigest]) {
    guard digests.count == Self.count else { return nil }
    self.digests = digests
  }

  /// The bucket of an event id.
  public static func bucket(of id: Stamp) -> Int {
    id.withKey { bucket(ofKey: $0) }
  }

  static func bucket(ofKey id: UnsafeRawBufferPointer) -> Int {
    Int(Hash.xxh3x128(id).low & 0xFF)
  }

  /// Adds an event, given its id.
  public mutating func add(_ id: Stamp) {
    id.withKey { add(key: $0) }
  }

  mutating func add(key id: UnsafeRawBufferPointer) {
    let hash = Hash.xxh3x128(id)
    digests[Int(hash.low & 0xFF)].add(hash: hash)
  }

  /// The digest of every event in every bucket: the event-set digest.
  public var total: EventSetDigest {
    digests.reduce(into: EventSetDigest.empty) { $0.add($1) }
  }

  /// The buckets whose digests differ from `other`'s, in order.
  public func differing(from other: EventSetBuckets) -> [Int] {
    (0..<Self.count).filter { digests[$0] != other.digests[$0] }
  }
}

extension EventLog {
  /// The bucket digests of every id in the log's index.
  package func buckets(in transaction: borrowing some Transaction & ~Copyable) throws
    -> EventSetBuckets
  {
    var buckets = EventSetBuckets()
    let expected = prefix.count + Stamp.byteCount
    try transaction.forEach(in: index, range: ownKeys) { key, _ in
      guard key.count == expected else {
        _ = try id(fromIndexKey: key)  // throws corruptStore, naming the length
        return
      }
      buckets.add(key: UnsafeRawBufferPointer(rebasing: key[prefix.count...]))
    }
    return buckets
  }

  /// The ids in the log that fall in the given buckets, in id order.
  package func ids(
    inBuckets buckets: Set<Int>, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> [Stamp] {
    var ids: [Stamp] = []
    let start = prefix.count
    try transaction.forEach(in: index, range: ownKeys) { key, _ in
      let id = try id(fromIndexKey: key)
      let bucket = EventSetBuckets.bucket(ofKey: UnsafeRawBufferPointer(rebasing: key[start...]))
      if buckets.contains(bucket) { ids.append(id) }
    }
    return ids
  }
}
