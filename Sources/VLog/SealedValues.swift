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
  public var sealedValues: [UInt8]? { sealedValuesRange.map { Array(unknownFields[$0]) } }

  /// Where the sealed values are in ``unknownFields``, or nil if the event carries none.
  package var sealedValuesRange: Range<Int>? { fieldRange(EventCodec.Field.sealedValues) }

  /// The size of the sealed values and of their encoded field (tag and length included), or
  /// nil if the event carries none.
  var sealedValuesField: (values: Int, field: Int)? {
    guard let values = sealedValuesRange?.count else { return nil }
    // The tag (field 18, length-delimited: two bytes of varint) and the length's varint.
    var lengthBytes = 1
    while values >> (7 * lengthBytes) != 0 { lengthBytes += 1 }
    return (values, 2 + lengthBytes + values)
  }

  /// Checks that the event is in the form an end-to-end encrypted account's devices send: an
  /// authenticator (``authenticator``, 16 bytes) on every event, redacted ones included; its
  /// values sealed, placeholders in their place (a redacted event's; for each tag 32
  /// lowercase hexadecimal digits; for an attachment, ``Attachment/sealedMediaType`` and no
  /// size in pixels, with the hash and size of its bytes as sealed), and no other field a
  /// version does not know, which could carry a value in clear. Deletions, which carry ids
  /// only, carry nothing sealed. A server checks every event pushed to an encrypted account
  /// with this; it cannot check the authenticator, which only the account's devices can.
  ///
  /// - Throws: ``VLogError/Code/invalidValue`` saying what is in clear or missing.
  public func checkSealed() throws(VLogError) {
    func refuse(_ reason: String) -> VLogError {
      VLogError(.invalidValue, "event \(stamp) (\(change.kind)): \(reason)")
    }
    guard let authenticator, authenticator.count == Self.authenticatorBytes else {
      throw refuse(
        "no authenticator of \(Self.authenticatorBytes) bytes (field 19, `extra` in JSON): "
          + "the account's devices vouch for each of its events")
    }
    let authenticatorField = self.authenticatorField.count
    guard redaction == nil else { return }
    func isTagName(_ name: String) -> Bool {
      name.utf8.count == 32
        && name.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }
    switch change {
    case .noteDeleted, .attachmentDeleted:
      guard unknownFields.count == authenticatorField else {
        throw refuse("fields an encrypted account cannot send")
      }
      return
    case .attachmentAdded(let attachment):
      guard attachment.mimeType == Attachment.sealedMediaType, attachment.width == 0,
        attachment.height == 0
      else { throw refuse("an attachment's metadata in clear") }
    case .tagDeleted:
      throw refuse("an encrypted account deletes a tag by key (tagErased), not by name")
    case .unknown:
      throw refuse("a kind this version does not know cannot be checked for sealed values")
    case .noteCreated, .textSet, .archivedSet, .sortDateSet, .attachmentsSet:
      guard change.withoutPayload == change else { throw refuse("a value in clear") }
    case .tagsSet(_, let names):
      guard names.allSatisfy(isTagName) else { throw refuse("a tag named in clear") }
    case .tagAdded(_, let name), .tagRenamed(let name):
      guard isTagName(name) else { throw refuse("a tag named in clear") }
    case .tagRemoved, .tagErased:
      break
    }
    guard let sealed = sealedValuesField else { throw refuse("no sealed values") }
    // The sealed values' field and the authenticator's, once each, are all there is.
    guard unknownFields.count == sealed.field + authenticatorField else {
      throw refuse("fields besides the sealed values that this version does not know")
    }
  }

  /// This event with `sealed` as its sealed values, in place of any it had.
  package func withSealedValues(_ sealed: some Collection<UInt8>) -> Event {
    var writer = ProtobufWriter()
    writer.buffer.reserveCapacity(sealed.count + 6)
    writer.tag(EventCodec.Field.sealedValues, .lengthDelimited)
    writer.rawVarint(UInt64(sealed.count))
    writer.buffer.append(contentsOf: sealed)
    return Event(stamp: stamp, change: change, unknownFields: writer.buffer)
  }

  /// What an encrypted account's device seals of the event: its encoded fields after the kind
  /// (its id and values), which ``init(stamp:kind:sealedFields:)`` reads back.
  package var fieldsToSeal: [UInt8] { EventCodec.fieldsAfterKind(of: self) }

  /// The event of `stamp` and `kind` whose fields after the kind are `fields`, as
  /// ``fieldsToSeal`` wrote them.
  ///
  /// - Throws: ``VLogError/Code/malformedEvent`` naming what is wrong, among it a time, a
  ///   replica or a kind among the fields.
  package init(stamp: Stamp, kind: EventKind, sealedFields fields: UnsafeRawBufferPointer)
    throws(VLogError)
  {
    self = try EventCodec.decode(stamp: stamp, kind: kind, fieldsAfterKind: fields)
  }
}

extension Attachment {
  /// The media type an end-to-end encrypted account's sealed attachment addition names in
  /// clear, whatever the attachment's is: its metadata is sealed, and the bytes the addition
  /// names are the sealed ones.
  public static let sealedMediaType = "application/octet-stream"
}
