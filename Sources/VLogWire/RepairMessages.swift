public import VLog

// Anti-entropy repair: when a sync ends with the client's event-set digest different from the
// server's (events that reached the client other than by a local write, say by import), the
// client sends its 256 bucket digests to `POST /v1/sync/compare`, gets the server's ids in the
// buckets that differ, pushes what the server lacks through `POST /v1/sync`, and fetches what it
// lacks from `POST /v1/sync/fetch`.

/// The body of `POST /v1/sync/compare`: the client's event-set digest in buckets.
public struct CompareRequest: Codable, Sendable, Hashable {
  /// The 256 bucket digests (see `EventSetBuckets`), each 32 hexadecimal digits.
  public var buckets: [String]

  enum CodingKeys: String, CodingKey { case buckets }

  /// Creates a request from the client's buckets.
  public init(_ buckets: EventSetBuckets) {
    self.buckets = buckets.digests.map(\.description)
  }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: ["buckets"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    buckets = try container.decode([String].self, forKey: .buckets)
  }

  /// Checks the digests and converts them.
  ///
  /// - Throws: ``WireError`` naming the bucket at fault.
  public func validated() throws(WireError) -> EventSetBuckets {
    guard buckets.count == EventSetBuckets.count else {
      throw WireError("buckets", "\(buckets.count) digests, not \(EventSetBuckets.count)")
    }
    var digests: [EventSetDigest] = []
    digests.reserveCapacity(buckets.count)
    for (index, text) in buckets.enumerated() {
      guard let digest = EventSetDigest(hex: text) else {
        throw WireError("buckets[\(index)]", "'\(text)' is not 32 hexadecimal digits")
      }
      digests.append(digest)
    }
    // Exactly `count` digests were checked above.
    return EventSetBuckets(digests: digests) ?? EventSetBuckets()
  }
}

/// What the server holds in the buckets where it differs from the client, checked and
/// independent of the encoding.
public struct Comparison: Sendable, Hashable {
  /// For each bucket whose digest differs from the client's, every id the server holds in it.
  public var ids: [Int: [Stamp]]
  /// False when the answer stops at the server's limit of ids: compare again once these
  /// buckets are repaired.
  public var complete: Bool
  /// The server's event-set digest.
  public var eventSetDigest: EventSetDigest

  /// The answer to a comparison, the rule every server follows: the ids of the `differing`
  /// buckets in their order, whole buckets up to `limit` ids (but at least one bucket), and
  /// whether that is all of them.
  ///
  /// - Parameters:
  ///   - differing: The buckets whose digests differ from the client's, in the order to list.
  ///   - ids: The server's ids in (at least) the differing buckets, by bucket.
  ///   - limit: The most ids the answer lists, but for a first bucket larger than that.
  ///   - eventSetDigest: The server's event-set digest.
  public init(
    differing: [Int], ids: [Int: [Stamp]], limit: Int, eventSetDigest: EventSetDigest
  ) {
    var kept: [Int: [Stamp]] = [:]
    var count = 0
    for bucket in differing {
      let bucketIDs = ids[bucket, default: []]
      guard kept.isEmpty || count + bucketIDs.count <= limit else {
        self.init(ids: kept, complete: false, eventSetDigest: eventSetDigest)
        return
      }
      kept[bucket] = bucketIDs
      count += bucketIDs.count
    }
    self.init(ids: kept, complete: true, eventSetDigest: eventSetDigest)
  }

  /// Creates a comparison.
  public init(ids: [Int: [Stamp]], complete: Bool, eventSetDigest: EventSetDigest) {
    self.ids = ids
    self.complete = complete
    self.eventSetDigest = eventSetDigest
  }
}

/// The answer to `POST /v1/sync/compare` as JSON.
public struct CompareResponse: Codable, Sendable, Hashable {
  /// One bucket whose digest differs, with the server's ids in it.
  public struct Bucket: Codable, Sendable, Hashable {
    /// The bucket's number, 0 to 255.
    public var bucket: Int
    /// The server's event ids in the bucket, each 48 hexadecimal digits (see `VLog/Stamp/hex`).
    public var ids: [String]

    enum CodingKeys: String, CodingKey { case bucket, ids }

    /// Creates a bucket.
    public init(bucket: Int, ids: [String]) {
      self.bucket = bucket
      self.ids = ids
    }

    /// Decodes the JSON types, refusing keys this version does not know.
    public init(from decoder: any Decoder) throws {
      try refuseUnknownKeys(in: decoder, allowed: ["bucket", "ids"])
      let container = try decoder.container(keyedBy: CodingKeys.self)
      bucket = try container.decode(Int.self, forKey: .bucket)
      ids = try container.decode([String].self, forKey: .ids)
    }
  }

  /// The buckets that differ, in order.
  public var buckets: [Bucket]
  /// False when the answer stops at the server's limit of ids.
  public var complete: Bool
  /// The server's event-set digest.
  public var eventSetDigest: String

  enum CodingKeys: String, CodingKey { case buckets, complete, eventSetDigest }

  /// The JSON form of a comparison.
  public init(_ comparison: Comparison) {
    buckets = comparison.ids.keys.sorted().map { bucket in
      Bucket(bucket: bucket, ids: comparison.ids[bucket, default: []].map(\.hex))
    }
    complete = comparison.complete
    eventSetDigest = comparison.eventSetDigest.description
  }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: ["buckets", "complete", "eventSetDigest"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    buckets = try container.decode([Bucket].self, forKey: .buckets)
    complete = try container.decode(Bool.self, forKey: .complete)
    eventSetDigest = try container.decode(String.self, forKey: .eventSetDigest)
  }

  /// Checks the buckets, ids and digest, and converts them.
  ///
  /// - Throws: ``WireError`` naming the field at fault.
  public func validated() throws(WireError) -> Comparison {
    var ids: [Int: [Stamp]] = [:]
    for (index, bucket) in buckets.enumerated() {
      guard (0..<EventSetBuckets.count).contains(bucket.bucket), ids[bucket.bucket] == nil else {
        throw WireError(
          "buckets[\(index)].bucket", "\(bucket.bucket) is not a new bucket from 0 to 255")
      }
      ids[bucket.bucket] = try parseIDs(bucket.ids, field: "buckets[\(index)].ids")
    }
    guard let digest = EventSetDigest(hex: eventSetDigest) else {
      throw WireError("eventSetDigest", "'\(eventSetDigest)' is not 32 hexadecimal digits")
    }
    return Comparison(ids: ids, complete: complete, eventSetDigest: digest)
  }
}

/// The body of `POST /v1/sync/fetch`: the ids of the events the client wants.
public struct FetchRequest: Codable, Sendable, Hashable {
  /// Event ids, each 48 hexadecimal digits.
  public var ids: [String]

  enum CodingKeys: String, CodingKey { case ids }

  /// Creates a request.
  public init(ids: [Stamp]) { self.ids = ids.map(\.hex) }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: ["ids"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    ids = try container.decode([String].self, forKey: .ids)
  }

  /// Checks the ids and converts them.
  ///
  /// - Parameter maximum: The most ids one request may ask for.
  /// - Throws: ``WireError`` naming the id at fault.
  public func validated(maximum: Int) throws(WireError) -> [Stamp] {
    guard ids.count <= maximum else {
      throw WireError("ids", "\(ids.count) ids; one fetch asks for at most \(maximum)")
    }
    return try parseIDs(ids, field: "ids")
  }
}

/// The answer to `POST /v1/sync/fetch`: the requested events the server holds, in the order
/// asked, up to the server's page size in bytes (at least one). Ask again for the rest.
public struct FetchResponse: Codable, Sendable, Hashable {
  /// The events.
  public var events: [WireEvent]

  enum CodingKeys: String, CodingKey { case events }

  /// Creates a response.
  public init(events: [Event]) { self.events = events.map(WireEvent.init) }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: ["events"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    events = try container.decode([WireEvent].self, forKey: .events)
  }

  /// Checks the events and converts them.
  ///
  /// - Throws: ``WireError`` naming the field at fault.
  public func validated() throws(WireError) -> [Event] {
    var result: [Event] = []
    result.reserveCapacity(events.count)
    for (index, event) in events.enumerated() {
      do { result.append(try event.event()) } catch { throw error.within("events[\(index)]") }
    }
    try validate(result)
    return result
  }
}

private func parseIDs(_ ids: [String], field: String) throws(WireError) -> [Stamp] {
  var result: [Stamp] = []
  result.reserveCapacity(ids.count)
  for (index, text) in ids.enumerated() {
    guard let id = Stamp(hex: text) else {
      throw WireError("\(field)[\(index)]", "'\(text)' is not an event id of 48 hexadecimal digits")
    }
    result.append(id)
  }
  return result
}
