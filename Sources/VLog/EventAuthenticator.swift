/// What the devices of an end-to-end encrypted account vouch for each of its events with.
///
/// A server holds an encrypted account's events but must not be able to make one: a deletion
/// it made up would erase a note on every device. So each event carries, in field 19 of its
/// encoding, an *authenticator* — a keyed hash, under a key only the account's devices hold,
/// of what the event's every stored form keeps: its stamp, its kind and its ids
/// (``authenticatedBytes``). Redaction keeps the field (it vouches for the ids, which redaction
/// keeps), so a device checks a deleted note's erased events as it checks any other. The
/// engine carries the field and keeps it; the account's devices make and check it
/// (`VLogSync`'s `EventSealer`).
extension Event {
  /// The bytes of an authenticator: 16.
  public static let authenticatorBytes = 16

  /// The authenticator the event carries in field 19, or nil if it carries none.
  public var authenticator: [UInt8]? {
    guard let range = fieldRange(EventCodec.Field.authenticator) else { return nil }
    return Array(unknownFields[range])
  }

  /// What ``authenticator`` vouches for: the event's stamp, kind and the ids its redacted form
  /// keeps (every field, for a deletion, which is never redacted) — the same bytes for the
  /// event as written, redacted, retained or stripped of a deleted tag.
  public var authenticatedBytes: [UInt8] { EventCodec.authenticatedBytes(of: self) }

  /// This event carrying `authenticator` in field 19, in place of any it had; its other
  /// fields as they are.
  public func withAuthenticator(_ authenticator: [UInt8]) -> Event {
    var writer = ProtobufWriter()
    writer.buffer.reserveCapacity(unknownFields.count + authenticator.count + 3)
    if let range = fieldRange(EventCodec.Field.authenticator, includingHeader: true) {
      writer.buffer.append(contentsOf: unknownFields[..<range.lowerBound])
      writer.buffer.append(contentsOf: unknownFields[range.upperBound...])
    } else {
      writer.buffer.append(contentsOf: unknownFields)
    }
    writer.bytes(EventCodec.Field.authenticator, authenticator)
    guard let redaction else {
      return Event(stamp: stamp, change: change, unknownFields: writer.buffer)
    }
    return Event.redacted(stamp: stamp, change: change, reason: redaction, kept: writer.buffer)
      ?? self
  }

  /// The authenticator's field, encoded, or nothing: what redaction keeps of the event's
  /// unknown fields.
  var authenticatorField: [UInt8] {
    guard let range = fieldRange(EventCodec.Field.authenticator, includingHeader: true) else {
      return []
    }
    return Array(unknownFields[range])
  }

  /// Whether `fields`, encoded fields a redacted event carries besides its ids, are only what
  /// redaction keeps: nothing, or one authenticator of ``authenticatorBytes``.
  package static func isKeptThroughRedaction(_ fields: [UInt8]) -> Bool {
    guard !fields.isEmpty else { return true }
    // Bytes that do not parse as fields (an `extra` sent by a client) are not an
    // authenticator: the answer is no, and the caller refuses the event with its reason.
    let count = try? withBytes(of: fields) { buffer throws(VLogError) -> Int in
      var reader = ProtobufReader(buffer)
      var count = 0
      while !reader.isAtEnd {
        let (number, wireType) = try reader.tag()
        guard number == EventCodec.Field.authenticator, wireType == .lengthDelimited,
          try reader.lengthDelimited().count == authenticatorBytes
        else { return -1 }
        count += 1
      }
      return count
    }
    return count == 1
  }

  /// Where field `number` (length-delimited) is in ``unknownFields``: its value, or with
  /// `includingHeader` its tag and length too; nil if the event carries none.
  func fieldRange(_ number: Int, includingHeader: Bool = false) -> Range<Int>? {
    guard !unknownFields.isEmpty else { return nil }
    // Unknown fields were read as fields, so they parse; bytes that do not are none.
    return try? withBytes(of: unknownFields) { buffer throws(VLogError) -> Range<Int>? in
      var reader = ProtobufReader(buffer)
      var found: Range<Int>?
      while !reader.isAtEnd {
        let start = reader.offset
        let (field, wireType) = try reader.tag()
        if field == number, wireType == .lengthDelimited {
          let value = try reader.lengthDelimited()
          found = (includingHeader ? start : reader.offset - value.count)..<reader.offset
        } else {
          try reader.skip(wireType)
        }
      }
      return found
    } ?? nil
  }
}
