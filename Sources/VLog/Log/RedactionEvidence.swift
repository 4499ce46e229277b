/// What vouches for a redaction: the log's own rules, as a device checks them on what a server
/// serves.
///
/// A server serves an event redacted when its object was deleted (``Event/Redaction/deleted``)
/// or when a newer change replaced it and retention erased it
/// (``Event/Redaction/superseded``). The redaction itself carries no proof — an event's
/// authenticator vouches for its stamp, kind, ids and the texts it replaces, which redaction
/// keeps, not for the reason — so a server that lies could serve a note's current text as
/// "superseded" and a new device would show the note empty. A device therefore takes a
/// redacted event only with evidence that the log's rules would have redacted it:
///
/// - any reason: a deletion of an object the event changes (its note; for `attachmentAdded`,
///   its attachment too);
/// - a tag's addition or rename, `deleted`: a tag's deletion stamped after it (a redacted one
///   keeps no tag name to match, so any tag's);
/// - a text, `superseded`: a newer text of the note that replaced it — one that names it among
///   the texts it replaces, or one that names none (older clients' texts replace every older
///   one). A concurrent text that no newer one names is a kept conflict, never replaced;
/// - any other field's change, `superseded`: a change to the same field with a newer stamp.
///
/// Evidence is what the device holds, what the batch brings unredacted, and redactions the
/// batch brings that are themselves vouched for — never a redaction that is not, so that a
/// server cannot erase a chain of texts by serving all of them redacted. Retention's due time
/// is not checked: it depends on the server's retention period, which a device does not know; a
/// server that redacts a replaced version early loses a version of history, never the value a
/// note shows.
package struct RedactionEvidence {
  /// The objects deleted.
  package var deleted: Set<Identifier> = []
  /// The newest stamp of each note field but the text.
  package var newest: [FieldKey: Stamp] = [:]
  /// Each note's texts: their stamps and what they replace.
  package var texts: [NoteID: [(stamp: Stamp, replaces: ReplacedTexts?)]] = [:]
  /// The latest tag deletion.
  package var tagDeletion: Stamp?

  /// No evidence; what a log holds is added by its owner (``needs(_:)`` says what to look up).
  package init() {}

  /// Takes `event` — not redacted, or a redaction found vouched for — as evidence.
  package mutating func add(_ event: Event) {
    if let object = event.change.deletedObject { deleted.insert(object) }
    if event.change.deletedTag != nil {
      tagDeletion = max(tagDeletion ?? event.stamp, event.stamp)
    }
    if case .textSet(let note, _, let replaces) = event.change {
      texts[note, default: []].append((event.stamp, replaces))
    } else if let key = event.change.fieldKey {
      newest[key] = max(newest[key] ?? event.stamp, event.stamp)
    }
  }

  /// What a log must be asked for to judge the redactions among `events`: the deletions of
  /// the objects they change, the newest changes to their fields, their notes' texts, and
  /// whether any tag's latest deletion.
  package static func needs(_ events: [Event]) -> (
    objects: Set<Identifier>, fields: Set<FieldKey>, textsOf: Set<NoteID>, tagDeletion: Bool
  ) {
    var needs: (Set<Identifier>, Set<FieldKey>, Set<NoteID>, Bool) = ([], [], [], false)
    for event in events where event.isRedacted {
      needs.0.formUnion(event.change.objectIDs)
      switch event.change {
      case .tagAdded, .tagRenamed: needs.3 = true
      case .textSet(let note, _, _): needs.2.insert(note)
      default: if let key = event.change.fieldKey { needs.1.insert(key) }
      }
    }
    return needs
  }

  /// Whether `event` — redacted — is vouched for by this evidence. An event that is not
  /// redacted needs none.
  package func vouches(for event: Event) -> Bool {
    guard let reason = event.redaction else { return true }
    if event.change.objectIDs.contains(where: deleted.contains) { return true }
    switch (reason, event.change) {
    case (.deleted, .tagAdded), (.deleted, .tagRenamed):
      return tagDeletion.map { $0 > event.stamp } ?? false
    case (.superseded, .textSet(let note, _, _)):
      return texts[note]?.contains { text in
        text.stamp > event.stamp && (text.replaces?.contains(event.stamp) ?? true)
      } ?? false
    case (.superseded, _):
      guard let key = event.change.fieldKey, let stamp = newest[key] else { return false }
      return stamp > event.stamp
    default:
      return false
    }
  }

  /// The redacted events among `events` that nothing vouches for: `held` — what the log holds
  /// — with the batch's events that are not redacted, and every redaction found vouched for
  /// taken as evidence in turn.
  package static func unvouched(in events: [Event], held: RedactionEvidence) -> [Event] {
    var evidence = held
    for event in events where !event.isRedacted { evidence.add(event) }
    // Newest first: a chain of replaced changes is vouched for in one pass.
    var pending = events.filter(\.isRedacted).sorted { $0.stamp > $1.stamp }
    var progress = true
    while progress, !pending.isEmpty {
      progress = false
      var left: [Event] = []
      for event in pending {
        if evidence.vouches(for: event) {
          evidence.add(event)
          progress = true
        } else {
          left.append(event)
        }
      }
      pending = left
    }
    return pending
  }
}
