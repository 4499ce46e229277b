/// Whether an event pushed under a stamp a log holds already is the event held there: a retry,
/// which the log skips — or another event under the same id, which it must refuse, since
/// skipping it would drop a change without a word.
///
/// One replica never makes two events under one stamp, but two devices that share a replica id
/// can: a store copied to a second device (a restored phone backup, a cloned virtual machine)
/// stamps its new events as the original does, and the two collide whenever their clocks give
/// the same time. A log tells a retry from a collision by comparing what it holds with what the
/// event would be as the log stores it:
/// - a tag deletion by name is stored by key;
/// - a tags list is stored without the tags deleted after it — by the server, or by the device
///   before it pushed again — so one list may be the other with tags left out (and sealed
///   again, so its sealed values differ);
/// - a redacted event keeps its stamp, kind and ids: held or pushed redacted, those are what
///   compare (the value a redaction dropped was replaced or erased, whichever event held it);
/// - anything else is stored as it came.
///
/// Sealed values compare as bytes: a device seals an event the same way each time (the nonce is
/// a keyed hash of what it seals), so a retry sends the same bytes. Devices before that drew a
/// random nonce for each seal; `comparingSealedValues: false` compares their events as redacted
/// ones are compared.
extension Event {
  /// Whether `held`, the event a log holds under this event's stamp, is this event as the log
  /// stores it. See the rules above.
  package func isStored(as held: Event, comparingSealedValues: Bool = true) -> Bool {
    guard stamp == held.stamp else { return false }
    let pushed = storedByKey
    let held = held.storedByKey
    if pushed.isRedacted || held.isRedacted
      || (!comparingSealedValues
        && (pushed.sealedValuesRange != nil || held.sealedValuesRange != nil))
    {
      return pushed.authenticatedBytes == held.authenticatedBytes
    }
    if case .tagsSet(let note, let tags) = pushed.change,
      case .tagsSet(let heldNote, let heldTags) = held.change
    {
      // Stripped on one side, the list was sealed again too: its values differ.
      guard tags == heldTags else {
        return note == heldNote
          && (Self.isSubsequence(heldTags, of: tags) || Self.isSubsequence(tags, of: heldTags))
      }
    }
    return pushed == held
  }

  /// This event with a tag deletion by name as the deletion by key it means.
  private var storedByKey: Event {
    guard case .tagDeleted(let name) = change, !isRedacted else { return self }
    return Event(stamp: stamp, change: .tagErased(TagKey(name: name)), unknownFields: unknownFields)
  }

  /// Whether `part` is `whole` with some elements left out, in order.
  private static func isSubsequence(_ part: [String], of whole: [String]) -> Bool {
    var rest = whole[...]
    for element in part {
      guard let index = rest.firstIndex(of: element) else { return false }
      rest = rest[(index + 1)...]
    }
    return true
  }
}
