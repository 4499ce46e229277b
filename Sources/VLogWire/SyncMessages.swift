public import Foundation
public import VLog

/// What a client sends in a sync call, checked and independent of the encoding: its cursor into
/// the server's log of the account, its unacknowledged events, and how many events it wants
/// back.
///
/// ``SyncRequest`` carries it as JSON; ``binaryEncoded()`` as the compact binary encoding.
public struct SyncPush: Sendable, Hashable {
  /// The position in the server's log after which the client wants events; 0 at first.
  public var cursor: UInt64
  /// The client's events the server has not acknowledged yet, oldest first.
  public var events: [Event]
  /// The most events the client wants back in this call; the server may send fewer.
  public var limit: Int?

  /// Creates a push.
  public init(cursor: UInt64, events: [Event], limit: Int? = nil) {
    self.cursor = cursor
    self.events = events
    self.limit = limit
  }
}

/// What the server answers to a sync call, checked and independent of the encoding.
///
/// ``SyncResponse`` carries it as JSON; ``binaryEncoded()`` as the compact binary encoding.
public struct SyncPage: Sendable, Hashable {
  /// Events after the request's cursor, in the server's order, without those the caller just
  /// sent.
  public var events: [Event]
  /// The cursor to send next time.
  public var cursor: UInt64
  /// Whether more events remain after this page.
  public var more: Bool
  /// The server's clock, to the millisecond, so the client can measure its skew.
  public var serverTime: Date
  /// How many of the pushed events the server did not have yet.
  public var stored: Int
  /// The order-independent digest of every event the server holds for the account.
  public var eventSetDigest: EventSetDigest

  /// Creates a page.
  public init(
    events: [Event], cursor: UInt64, more: Bool, serverTime: Date, stored: Int,
    eventSetDigest: EventSetDigest
  ) {
    self.events = events
    self.cursor = cursor
    self.more = more
    self.serverTime = Date(milliseconds: serverTime.milliseconds)
    self.stored = stored
    self.eventSetDigest = eventSetDigest
  }
}

/// Checks each event's values and names the one at fault.
func validate(_ events: [Event]) throws(WireError) {
  for (index, event) in events.enumerated() {
    do { try event.validate() } catch { throw WireError("events[\(index)]", error.message) }
  }
}

/// The body of a sync call as JSON: the client's unacknowledged events and its cursor into the
/// server's log of the account.
public struct SyncRequest: Codable, Sendable, Hashable {
  /// The position in the server's log after which the client wants events; 0 at first.
  public var cursor: UInt64
  /// The client's events the server has not acknowledged yet, oldest first.
  public var events: [WireEvent]
  /// The most events the client wants back in this call; the server may send fewer.
  public var limit: Int?

  enum CodingKeys: String, CodingKey { case cursor, events, limit }

  /// Creates a request.
  public init(cursor: UInt64, events: [Event], limit: Int? = nil) {
    self.cursor = cursor
    self.events = events.map(WireEvent.init)
    self.limit = limit
  }

  /// The JSON form of a push.
  public init(_ push: SyncPush) {
    self.init(cursor: push.cursor, events: push.events, limit: push.limit)
  }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: ["cursor", "events", "limit"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    // Decoded as a decimal and checked here: Foundation reports a fraction or an out-of-range
    // integer as invalid JSON, without its path.
    let number = try container.decode(Decimal.self, forKey: .cursor)
    let integer = NSDecimalNumber(decimal: number).int64Value
    guard number >= 0, number <= Decimal(Int64.max), Decimal(integer) == number else {
      throw DecodingError.dataCorruptedError(
        forKey: .cursor, in: container,
        debugDescription: "\(number) is not an integer from 0 to \(Int64.max)")
    }
    self.cursor = UInt64(integer)
    events = try container.decode([WireEvent].self, forKey: .events)
    limit = try container.decodeIfPresent(Int.self, forKey: .limit)
  }

  /// Checks every event and the limit, and converts the events.
  ///
  /// - Parameter maximumEvents: The most events one request may push.
  /// - Throws: ``WireError`` naming the field at fault, for example `events[3].note`.
  public func validated(maximumEvents: Int) throws(WireError) -> SyncPush {
    guard events.count <= maximumEvents else {
      throw WireError(
        "events", "\(events.count) events; one sync pushes at most \(maximumEvents)")
    }
    if let limit, limit < 1 { throw WireError("limit", "\(limit) is not a positive number") }
    var result: [Event] = []
    result.reserveCapacity(events.count)
    for (index, event) in events.enumerated() {
      do {
        result.append(try event.event())
      } catch {
        throw error.within("events[\(index)]")
      }
    }
    try validate(result)
    return SyncPush(cursor: cursor, events: result, limit: limit)
  }
}

/// The answer to a sync call as JSON.
public struct SyncResponse: Codable, Sendable, Hashable {
  /// Events after the request's cursor, in the server's order, without those the caller just
  /// sent.
  public var events: [WireEvent]
  /// The cursor to send next time.
  public var cursor: UInt64
  /// Whether more events remain after this page.
  public var more: Bool
  /// The server's clock, ISO 8601 with milliseconds, so the client can measure its skew.
  public var serverTime: String
  /// How many of the pushed events the server did not have yet.
  public var stored: Int
  /// The order-independent digest of every event the server holds for the account.
  public var eventSetDigest: String

  /// Creates a response.
  public init(
    events: [Event], cursor: UInt64, more: Bool, serverTime: Date, stored: Int,
    eventSetDigest: EventSetDigest
  ) {
    self.events = events.map(WireEvent.init)
    self.cursor = cursor
    self.more = more
    self.serverTime = ISO8601.format(milliseconds: serverTime.milliseconds)
    self.stored = stored
    self.eventSetDigest = eventSetDigest.description
  }

  /// The JSON form of a page.
  public init(_ page: SyncPage) {
    self.init(
      events: page.events, cursor: page.cursor, more: page.more, serverTime: page.serverTime,
      stored: page.stored, eventSetDigest: page.eventSetDigest)
  }

  enum CodingKeys: String, CodingKey {
    case events, cursor, more, serverTime, stored, eventSetDigest
  }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(
      in: decoder,
      allowed: ["events", "cursor", "more", "serverTime", "stored", "eventSetDigest"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    events = try container.decode([WireEvent].self, forKey: .events)
    cursor = try container.decode(UInt64.self, forKey: .cursor)
    more = try container.decode(Bool.self, forKey: .more)
    serverTime = try container.decode(String.self, forKey: .serverTime)
    stored = try container.decode(Int.self, forKey: .stored)
    eventSetDigest = try container.decode(String.self, forKey: .eventSetDigest)
  }

  /// Checks the events, the server time and the digest, and converts them.
  ///
  /// - Throws: ``WireError`` naming the field at fault.
  public func validated() throws(WireError) -> SyncPage {
    var result: [Event] = []
    for (index, event) in events.enumerated() {
      do {
        result.append(try event.event())
      } catch {
        throw error.within("events[\(index)]")
      }
    }
    guard let milliseconds = ISO8601.parse(serverTime) else {
      throw WireError("serverTime", ISO8601.problem(with: serverTime))
    }
    guard let digest = EventSetDigest(hex: eventSetDigest) else {
      throw WireError("eventSetDigest", "'\(eventSetDigest)' is not 32 hexadecimal digits")
    }
    try validate(result)
    return SyncPage(
      events: result, cursor: cursor, more: more, serverTime: Date(milliseconds: milliseconds),
      stored: stored, eventSetDigest: digest)
  }
}
