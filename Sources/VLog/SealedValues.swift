/// The values of an end-to-end encrypted account's events, sealed on its devices.
///
/// An encrypted account's device sends each event with its ids in clear — stamp, kind, note,
/// attachment and tag ids — and its values (text, dates, flags, tag names) replaced by
/// placeholders, the real ones sealed in field 18 of the encoding. Everything a log does with
/// an event (storing, paging, erasing, retaining, proving sync) needs only the ids, so a server
/// stores and serves such events as it does any other, and redaction drops the sealed values
/// with the rest of the payload. Only the account's devices, which hold the keys, open them.
extension Event {
  /// The sealed values the event carries in field 18, or nil if it carries none.
  public var sealedValues: [UInt8]? {
    guard !unknownFields.isEmpty else { return nil }
    // Unknown fields were read as fields, so they parse; bytes that do not are none.
    return try? withBytes(of: unknownFields) { buffer throws(VLogError) -> [UInt8]? in
      var reader = ProtobufReader(buffer)
      var found: [UInt8]?
      while !reader.isAtEnd {
        let (number, wireType) = try reader.tag()
        if number == EventCodec.Field.sealedValues, wireType == .lengthDelimited {
          found = Array(try reader.lengthDelimited())
        } else {
          try reader.skip(wireType)
        }
      }
      return found
    } ?? nil
  }

  /// This event with `sealed` as its sealed values, in place of any it had.
  package func withSealedValues(_ sealed: [UInt8]) -> Event {
    var writer = ProtobufWriter()
    writer.bytes(EventCodec.Field.sealedValues, sealed)
    return Event(stamp: stamp, change: change, unknownFields: writer.buffer)
  }

  /// What an encrypted account's device seals of the event: its encoded fields after the kind
  /// (its id and values), which ``init(stamp:kind:sealedFields:)`` reads back.
  package var fieldsToSeal: [UInt8] { EventCodec.fieldsAfterKind(of: self) }

  /// The event of `stamp` and `kind` whose fields after the kind are `fields`, as
  /// ``fieldsToSeal`` wrote them.
  ///
  /// - Throws: ``VLogError/Code/malformedEvent`` naming what is wrong.
  package init(stamp: Stamp, kind: EventKind, sealedFields fields: [UInt8]) throws(VLogError) {
    var writer = ProtobufWriter()
    writer.fixed64(EventCodec.Field.time, stamp.time.rawValue)
    writer.identifier(EventCodec.Field.replica, stamp.replica.identifier)
    writer.varint(EventCodec.Field.kind, kind.rawValue)
    writer.buffer.append(contentsOf: fields)
    self = try EventCodec.decode(writer.buffer)
  }
}
