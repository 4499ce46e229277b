internal import Foundation
internal import VLog

/// How the body of a sync call is encoded.
///
/// JSON is the default and what a web client speaks. A client may ask for the compact binary
/// encoding instead by sending its request as ``binary`` and listing ``binary``'s media type in
/// `Accept`; a server that does not know it answers 415 to the body, and a server answers in
/// JSON to a client that does not ask. Errors are JSON whatever the encoding.
///
/// The binary encoding is the protocol-buffers wire format, with each event in the encoding the
/// log stores (`VLog/Event/encoded()`):
///
/// ```proto
/// message SyncPush {            // the request
///   uint64 cursor = 1;
///   repeated bytes events = 2;  // one encoded event each
///   uint64 limit = 3;           // absent or 0: the server's default
/// }
/// message SyncPage {            // the answer
///   repeated bytes events = 1;
///   uint64 cursor = 2;
///   bool more = 3;
///   sint64 server_time = 4;     // milliseconds since 1970
///   uint64 stored = 5;
///   bytes event_set_digest = 6; // 16 bytes
/// }
/// ```
///
/// Decoders skip fields they do not know, so either side may add fields. Events are checked as
/// strictly as JSON ones: a malformed event is an error naming `events[i]`.
public enum SyncEncoding: String, Sendable, Hashable, CaseIterable {
  /// `application/json`.
  case json
  /// `application/vnd.vlog.sync`: protocol-buffers fields, about a fifth of JSON's size and
  /// far cheaper to read and write.
  case binary

  /// The media type, for `Content-Type` and `Accept`.
  public var mediaType: String {
    switch self {
    case .json: "application/json"
    case .binary: "application/vnd.vlog.sync"
    }
  }

  /// The encoding of a `Content-Type` value (parameters such as `charset` are ignored), or nil
  /// for a media type that is neither.
  public init?(contentType: String) {
    let type = Self.mediaType(contentType[...])
    guard let found = Self.allCases.first(where: { $0.mediaType == type }) else { return nil }
    self = found
  }

  /// The encoding an `Accept` header asks for: binary if it lists binary's media type, else
  /// JSON.
  public init(accept: String?) {
    let types = (accept ?? "").split(separator: ",").map(Self.mediaType)
    self = types.contains(SyncEncoding.binary.mediaType) ? .binary : .json
  }

  /// The media type of a header's value, lowercased: what comes before its parameters, without
  /// the spaces and tabs HTTP allows around it. (Read on every sync request, so without
  /// Foundation's character sets.)
  private static func mediaType(_ value: Substring) -> String {
    var type = value.prefix { $0 != ";" }
    while let first = type.first, first == " " || first == "\t" { type = type.dropFirst() }
    while let last = type.last, last == " " || last == "\t" { type = type.dropLast() }
    return type.lowercased()
  }
}

private enum PushField {
  static let cursor = 1
  static let events = 2
  static let limit = 3
}

private enum PageField {
  static let events = 1
  static let cursor = 2
  static let more = 3
  static let serverTime = 4
  static let stored = 5
  static let eventSetDigest = 6
}

extension SyncPush {
  /// The push in the binary encoding (see ``SyncEncoding``).
  public func binaryEncoded() -> [UInt8] {
    var writer = ProtobufWriter()
    writer.buffer.reserveCapacity(16 + events.count * 96)
    writer.varint(PushField.cursor, cursor)
    for event in events { writer.bytes(PushField.events, event.encoded()) }
    if let limit, limit > 0 { writer.varint(PushField.limit, UInt64(limit)) }
    return writer.buffer
  }

  /// Reads and checks a push in the binary encoding.
  ///
  /// - Parameters:
  ///   - bytes: The request body.
  ///   - maximumEvents: The most events one request may push.
  /// - Throws: ``WireError`` naming the field at fault, for example `events[3]`.
  public init(binary bytes: [UInt8], maximumEvents: Int) throws(WireError) {
    var cursor: UInt64 = 0
    var events: [Event] = []
    var limit: Int?
    try readFields(of: bytes) { number, type, reader throws(WireError) in
      switch number {
      case PushField.cursor:
        let value = try field("cursor", type, .varint) { () throws(VLogError) in
          try reader.varint()
        }
        guard value <= UInt64(Int64.max) else {
          throw WireError("cursor", "\(value) is not an integer from 0 to \(Int64.max)")
        }
        cursor = value
      case PushField.events:
        guard events.count < maximumEvents else {
          throw WireError(
            "events", "more than \(maximumEvents) events; one sync pushes at most \(maximumEvents)")
        }
        events.append(try event(at: events.count, type, &reader))
      case PushField.limit:
        let value = try field("limit", type, .varint) { () throws(VLogError) in
          try reader.varint()
        }
        limit = value == 0 ? nil : Int(clamping: value)
      default:
        try skip(number, type, &reader)
      }
    }
    try validate(events)
    self.init(cursor: cursor, events: events, limit: limit)
  }
}

extension SyncPage {
  /// The page in the binary encoding (see ``SyncEncoding``).
  public func binaryEncoded() -> [UInt8] {
    var writer = ProtobufWriter()
    writer.buffer.reserveCapacity(64 + events.count * 96)
    for event in events { writer.bytes(PageField.events, event.encoded()) }
    writer.varint(PageField.cursor, cursor)
    writer.varint(PageField.more, more ? 1 : 0)
    writer.signed(PageField.serverTime, serverTime.milliseconds)
    writer.varint(PageField.stored, UInt64(max(0, stored)))
    writer.bytes(PageField.eventSetDigest, eventSetDigest.bytes)
    return writer.buffer
  }

  /// Reads and checks a page in the binary encoding.
  ///
  /// - Throws: ``WireError`` naming the field at fault.
  public init(binary bytes: [UInt8]) throws(WireError) {
    var events: [Event] = []
    var cursor: UInt64 = 0
    var more = false
    var serverTime: Int64?
    var stored = 0
    var digest: EventSetDigest?
    try readFields(of: bytes) { number, type, reader throws(WireError) in
      switch number {
      case PageField.events:
        events.append(try event(at: events.count, type, &reader))
      case PageField.cursor:
        cursor = try field("cursor", type, .varint) { () throws(VLogError) in try reader.varint() }
      case PageField.more:
        more = try field("more", type, .varint) { () throws(VLogError) in try reader.varint() } != 0
      case PageField.serverTime:
        serverTime = try field("serverTime", type, .varint) { () throws(VLogError) in
          try reader.signed()
        }
      case PageField.stored:
        stored = Int(
          clamping: try field("stored", type, .varint) { () throws(VLogError) in
            try reader.varint()
          })
      case PageField.eventSetDigest:
        let value = try field("eventSetDigest", type, .lengthDelimited) {
          () throws(VLogError) in Array(try reader.lengthDelimited())
        }
        guard let parsed = EventSetDigest(bytes: value) else {
          throw WireError("eventSetDigest", "\(value.count) bytes, expected 16")
        }
        digest = parsed
      default:
        try skip(number, type, &reader)
      }
    }
    guard let serverTime else { throw WireError("serverTime", "required") }
    guard let digest else { throw WireError("eventSetDigest", "required") }
    try validate(events)
    self.init(
      events: events, cursor: cursor, more: more, serverTime: Date(milliseconds: serverTime),
      stored: stored, eventSetDigest: digest)
  }
}

// MARK: - Reading

/// Calls `body` with each field's number and wire type; `body` reads or skips the value.
private func readFields(
  of bytes: [UInt8],
  _ body: (Int, WireType, inout ProtobufReader) throws(WireError) -> Void
) throws(WireError) {
  let result: Result<Void, WireError> = bytes.withUnsafeBytes { buffer in
    var reader = ProtobufReader(buffer)
    do throws(WireError) {
      while !reader.isAtEnd {
        let tag: (Int, WireType)
        do throws(VLogError) { tag = try reader.tag() } catch {
          throw WireError("", "not a binary sync message: \(error.message)")
        }
        try body(tag.0, tag.1, &reader)
      }
      return .success(())
    } catch {
      return .failure(error)
    }
  }
  try result.get()
}

/// Reads one field's value after checking its wire type, naming the field in any error.
private func field<T>(
  _ name: String, _ type: WireType, _ expected: WireType, _ read: () throws(VLogError) -> T
) throws(WireError) -> T {
  guard type == expected else {
    throw WireError(name, "wire type \(type.rawValue), expected \(expected.rawValue)")
  }
  do { return try read() } catch { throw WireError(name, error.message) }
}

/// Reads the `index`th event.
private func event(at index: Int, _ type: WireType, _ reader: inout ProtobufReader)
  throws(WireError)
  -> Event
{
  let path = "events[\(index)]"
  let bytes = try field(path, type, .lengthDelimited) { () throws(VLogError) in
    try reader.lengthDelimited()
  }
  do { return try EventCodec.decode(bytes) } catch { throw WireError(path, error.message) }
}

/// Skips a field this version does not know.
private func skip(_ number: Int, _ type: WireType, _ reader: inout ProtobufReader) throws(WireError)
{
  do { try reader.skip(type) } catch { throw WireError("", "field \(number): \(error.message)") }
}
