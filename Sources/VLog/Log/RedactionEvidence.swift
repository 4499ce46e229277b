/// What vouches for a redaction: the log's own rules, as a device checks them on what a server
/// serves.
///
/// A server serves an event redacted when its object was deleted (``Event/Redaction/deleted``)
/// or when a newer change to the same field replaced it and retention erased it
/// (``Event/Redaction/superseded``). The redaction itself carries no proof — an event's
/// authenticator vouches for its stamp, kind and ids, which redaction keeps, not for the
/// reason — so a server that lies could serve a note's current text as "superseded" and a new
/// device would show the note empty. A device therefore takes a redacted event only with
/// evidence that the log's rules would have redacted it:
///
/// - any reason: a deletion of an object the event changes (its note; for `attachmentAdded`,
///   its attachment too), held or in the same batch;
/// - `superseded`: a change to the same note field with a newer stamp, held or in the same
///   batch — redacted or not, since its authenticator vouches for its stamp. The newest change
///   to a field therefore never passes as superseded.
///
/// A redacted tag rename keeps no id to check and erases only a tag's display name's case: it
/// is taken as it is. Retention's due time is not checked: it depends on the server's
/// retention period, which a device does not know; a server that redacts a replaced version
/// early loses a version of history, never the value a note shows.
package struct RedactionEvidence {
  /// The objects the batch deletes.
  private var deleted: Set<Identifier> = []
  /// The newest stamp the batch holds for each note field.
  private var newest: [FieldKey: Stamp] = [:]

  /// The evidence `batch` itself holds.
  package init(batch: some Sequence<Event>) {
    for event in batch {
      if let object = event.change.deletedObject { deleted.insert(object) }
      if let key = event.change.fieldKey {
        newest[key] = max(newest[key] ?? event.stamp, event.stamp)
      }
    }
  }

  /// Whether `event` — redacted — is vouched for by the batch or by the log, whose deletions
  /// and newest changes `isDeleted` and `newestChange` look up.
  ///
  /// An event that is not redacted needs no evidence.
  package func vouches(
    for event: Event, isDeleted: (Identifier) throws -> Bool,
    newestChange: (NoteID, NoteField) throws -> Stamp?
  ) rethrows -> Bool {
    guard let reason = event.redaction else { return true }
    if case .tagRenamed = event.change { return true }
    for object in event.change.objectIDs
    where try deleted.contains(object) || isDeleted(object) {
      return true
    }
    guard reason == .superseded, let key = event.change.fieldKey else { return false }
    if let stamp = newest[key], stamp > event.stamp { return true }
    if let stamp = try newestChange(key.note, key.field), stamp > event.stamp { return true }
    return false
  }
}
