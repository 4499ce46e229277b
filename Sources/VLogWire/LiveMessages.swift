internal import Foundation

// The live channel, `GET /v1/live`, is a stream of server-sent events (the `text/event-stream`
// format of HTML's EventSource): a device holds it open, and the server writes to it when the
// account's log grows. It never carries content: a device that hears of a head past its cursor
// pulls with an ordinary sync, so the stream adds nothing an attacker on it could read and
// nothing the sync protocol does not already check.
//
//     event: head
//     data: {"head":42}
//
//     : ping
//
//     event: closed
//     data: {"code":"unauthorized","message":"the session was revoked"}

/// One message of the live channel.
public enum LiveMessage: Sendable, Hashable {
  /// The account's log holds events up to this sequence number. Sent when the channel opens
  /// and after each commit that adds events; a device whose cursor is behind it syncs.
  case head(UInt64)
  /// Nothing changed; the connection is alive. Sent every keep-alive interval, so that a
  /// device that hears nothing for longer knows the channel is gone.
  case ping
  /// The server ends the channel, and says why: ``ErrorCode/unauthorized`` (the session was
  /// revoked, the password changed, the account deleted) or ``ErrorCode/tokenExpired``: sign
  /// in again; ``ErrorCode/unavailable`` (the server is shutting down): open it again, to this
  /// server or another, after a moment.
  case closed(ErrorBody)

  /// The media type of the stream.
  public static let mediaType = "text/event-stream"

  /// The message as it travels: one event of the stream, ending with its blank line.
  public var encoded: [UInt8] {
    switch self {
    case .head(let head):
      return Array("event: head\ndata: {\"head\":\(head)}\n\n".utf8)
    case .ping:
      return Array(": ping\n\n".utf8)
    case .closed(let body):
      // A code and a message always encode.
      let encoder = JSONEncoder()
      encoder.outputFormatting = .sortedKeys
      let data = (try? encoder.encode(body)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
      return Array("event: closed\ndata: \(data)\n\n".utf8)
    }
  }
}

/// Reads a live channel's stream as its bytes arrive: bytes in, messages out.
///
/// It follows the event-stream format (lines ending in LF, CRLF or CR; `event:` and `data:`
/// fields; lines starting with `:` are comments; a blank line ends an event), keeps events of
/// names it does not know out of what it returns (a newer server's), and refuses a line longer
/// than ``maximumLineBytes``, so that a stream that never ends a line cannot take the client's
/// memory.
public struct LiveStreamParser: Sendable {
  /// The longest line read, in bytes.
  public static let maximumLineBytes = 16 << 10

  private var line: [UInt8] = []
  private var event = ""
  private var data: [UInt8] = []
  private var sawComment = false
  private var lastWasCR = false

  /// Creates a parser at the start of a stream.
  public init() {}

  /// Reads the next bytes of the stream.
  ///
  /// - Returns: The messages the bytes complete, in order.
  /// - Throws: ``WireError`` for a line past ``maximumLineBytes`` or an event whose data is not
  ///   what its name promises.
  public mutating func read(_ bytes: some Sequence<UInt8>) throws(WireError) -> [LiveMessage] {
    var messages: [LiveMessage] = []
    for byte in bytes {
      if byte == 0x0A && lastWasCR {
        lastWasCR = false
        continue
      }
      lastWasCR = byte == 0x0D
      guard byte == 0x0A || byte == 0x0D else {
        guard line.count < Self.maximumLineBytes else {
          throw WireError(
            "live", "a line of the stream is longer than \(Self.maximumLineBytes) bytes")
        }
        line.append(byte)
        continue
      }
      if let message = try endLine() { messages.append(message) }
    }
    return messages
  }

  /// Handles the line read so far; a blank one ends the event.
  private mutating func endLine() throws(WireError) -> LiveMessage? {
    defer { line.removeAll(keepingCapacity: true) }
    guard !line.isEmpty else { return try dispatch() }
    if line.first == UInt8(ascii: ":") {
      sawComment = true
      return nil
    }
    let colon = line.firstIndex(of: UInt8(ascii: ":")) ?? line.endIndex
    let name = String(decoding: line[..<colon], as: UTF8.self)
    var value = line[min(colon + 1, line.endIndex)...]
    if value.first == UInt8(ascii: " ") { value = value.dropFirst() }
    switch name {
    case "event": event = String(decoding: value, as: UTF8.self)
    case "data":
      if !data.isEmpty { data.append(0x0A) }
      guard data.count + value.count <= Self.maximumLineBytes else {
        throw WireError("live", "an event's data is longer than \(Self.maximumLineBytes) bytes")
      }
      data.append(contentsOf: value)
    default: break  // `id`, `retry`, and fields of later versions
    }
    return nil
  }

  /// The message the event read so far makes, if any, and a fresh start for the next one.
  private mutating func dispatch() throws(WireError) -> LiveMessage? {
    defer {
      event = ""
      data.removeAll(keepingCapacity: true)
      sawComment = false
    }
    switch event {
    case "head":
      struct Head: Decodable { var head: UInt64 }
      guard let head = try? JSONDecoder().decode(Head.self, from: Data(data)) else {
        throw WireError(
          "live.head", "'\(String(decoding: data.prefix(80), as: UTF8.self))' is not {\"head\": N}")
      }
      return .head(head.head)
    case "closed":
      guard let body = try? JSONDecoder().decode(ErrorBody.self, from: Data(data)) else {
        throw WireError(
          "live.closed",
          "'\(String(decoding: data.prefix(80), as: UTF8.self))' is not an error body")
      }
      return .closed(body)
    case "":
      return sawComment && data.isEmpty ? .ping : nil
    default:
      return nil
    }
  }
}
