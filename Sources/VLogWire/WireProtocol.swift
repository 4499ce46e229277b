public import VLog

/// The version of the sync protocol a client reads: the server writes the events it answers
/// with in the form that version reads, so that a client older than the server keeps syncing.
///
/// A client names its version in the `VLog-Protocol` request header of `POST /v1/sync` and
/// `POST /v1/sync/fetch` (the requests that answer with events); a request without it reads
/// version 1. A version newer than the server's is read as the server's.
///
/// | version | what it reads beyond the one before |
/// |---|---|
/// | 1 | the eleven kinds of event, fields 1 to 15 of their encoding |
/// | 2 | what a text change replaced: `replaces` in JSON, field 16 in the binary encoding |
/// | 3 | tags one by one: the kinds `tagAdded`, `tagRemoved` and `tagErased` (12 to 14), `tag` in JSON, field 17 in the binary encoding |
/// | 4 | a redacted event that keeps its authenticator (field 19, `extra` in JSON), and a redacted `tagRemoved` |
/// | 5 | nothing new to read: a client of this version seals an event the same way each time, so that the server refuses a pushed event held under its id with other sealed values (`eventCollision`) |
///
/// To a version 1 client, what a text change replaced travels as a field it does not know —
/// in `extra`, or as an unknown field of the binary encoding — which it keeps and forwards
/// unchanged; a redacted text change goes without it, since version 1 refuses a redacted event
/// that carries anything but its ids. To a client before version 3, the three tag kinds
/// travel as kinds it does not know (`"kind":"unknown"` with `kindNumber` and `extra` in JSON),
/// which it stores and forwards unchanged; such a client shows the tags they change once it is
/// upgraded. To a client before version 4, a redacted event goes without its authenticator
/// (which only an encrypted account's events carry, and such a client cannot open them), and
/// a redacted `tagRemoved` — a removal from a deleted note — as a removal of no tag (the
/// key of zeros), which changes nothing.
public struct WireProtocol: Sendable, Hashable, Comparable, CustomStringConvertible {
  /// The version number.
  public let version: Int

  private init(_ version: Int) { self.version = version }

  /// Version 1: what a client sends no header for.
  public static let first = WireProtocol(1)
  /// Version 2: what a text change replaced.
  public static let textBases = WireProtocol(2)
  /// Version 3: tags one by one.
  public static let tagsOneByOne = WireProtocol(3)
  /// Version 4: redacted events that keep their authenticators.
  public static let redactedAuthenticators = WireProtocol(4)
  /// Version 5: events sealed the same way each time.
  public static let repeatableSeals = WireProtocol(5)
  /// This version's: ``repeatableSeals``.
  public static let current = repeatableSeals

  /// The request header that names the version: `VLog-Protocol`.
  public static let headerName = "VLog-Protocol"

  /// The version a request's header names: ``first`` without one, ``current`` for a newer one.
  ///
  /// - Throws: ``WireError`` if the header is not a positive decimal integer.
  public init(header: String?) throws(WireError) {
    guard let header else {
      self = .first
      return
    }
    guard header.utf8.count <= 9, header.utf8.allSatisfy({ (0x30...0x39).contains($0) }),
      let version = Int(header), version >= 1
    else {
      throw WireError(
        Self.headerName, "'\(header.prefix(40))' is not a protocol version (1, 2, …)")
    }
    self = WireProtocol(min(version, Self.current.version))
  }

  /// Orders versions by number.
  public static func < (lhs: WireProtocol, rhs: WireProtocol) -> Bool {
    lhs.version < rhs.version
  }

  /// The version number, as the header carries it.
  public var description: String { String(version) }

  /// The event as a client of this version reads it: what it does not know moved to the
  /// event's unknown fields, or left out of a redacted event.
  public func form(of event: Event) -> Event {
    guard self < .redactedAuthenticators else { return event }
    var event = event
    if let redaction = event.redaction {
      if case .tagRemoved(let note, let tag) = event.change {
        event = Event(stamp: event.stamp, change: .tagRemoved(note, tag: tag))
      } else if !event.unknownFields.isEmpty {
        event =
          Event.redacted(stamp: event.stamp, change: event.change, reason: redaction) ?? event
      }
    }
    guard self < .tagsOneByOne else { return event }
    switch event.change {
    case .tagAdded, .tagRemoved, .tagErased:
      // Every field after the kind, as a version that does not know the kind keeps them.
      return Event(
        stamp: event.stamp, change: .unknown(kind: event.change.kind),
        unknownFields: EventCodec.fieldsAfterKind(of: event))
    default: break
    }
    guard self < .textBases, case .textSet(let note, let text, let base?) = event.change else {
      return event
    }
    if let redaction = event.redaction {
      return Event.redacted(
        stamp: event.stamp, kind: .textSet, note: note, attachment: nil, reason: redaction)
        ?? event
    }
    return Event(
      stamp: event.stamp, change: .textSet(note, text: text, replacing: nil),
      unknownFields: EventCodec.encodedBase(base) + event.unknownFields)
  }
}
