/// What happened to one event in a note's history.
public struct NoteHistoryEntry: Sendable, Hashable {
  /// What became of a change.
  public enum Outcome: String, Sendable, Hashable {
    /// It set the field's current value.
    case won
    /// A change with a newer stamp set the field.
    case lost
    /// A text written without seeing the one the note shows, kept as one of its conflicts
    /// (``Note/conflicts``) until a change resolves it.
    case conflict
    /// The note was deleted, which dominates every change.
    case erasedByDelete
    /// It created the note, or deleted it, or concerns one of its attachments.
    case recorded
  }

  /// The event and its place in the log.
  public let logged: LoggedEvent
  /// The field the event set, if it set one: `text`, `archived`, `sortDate`, `tags`,
  /// `attachments`.
  public let field: String?
  /// The tag a change of one tag (an addition or a removal) is about, by the name the note's
  /// events spell it with; its key (``TagKey``) when none of them names it. Nil for other
  /// changes.
  public var tag: String? = nil
  /// What became of it.
  public let outcome: Outcome
}

extension NoteStore {
  /// Every event about a note (its fields, creation, deletion and attachments), in log order,
  /// with which change won each field.
  ///
  /// An event whose values were erased says why in its ``Event/redaction``: `deleted` for
  /// every event of a deleted note, `superseded` for a change another replaced longer ago
  /// than the retention period — its old value is no longer kept anywhere.
  ///
  /// Reads the note's events through the log's object index.
  public func history(of id: NoteID) throws -> [NoteHistoryEntry] {
    let note = try note(id)
    let (isDeleted, events, tagChanges) = try read { transaction in
      let sequences = try eventLog.sequences(of: id.identifier, in: transaction)
      return (
        try schema.hasTombstone(id.identifier, in: transaction),
        try sequences.compactMap { try eventLog.event(at: $0, in: transaction) },
        Set(try schema.noteRecord(id, in: transaction)?.tagChanges.map(\.stamp) ?? [])
      )
    }
    // The names of the tags the note's events and its tags spell, by key: a removal names its
    // tag by key only.
    var names: [TagKey: String] = [:]
    for name in note?.tags.map(\.name) ?? [] { names[TagKey(name: name)] = name }
    for logged in events {
      switch logged.event.change {
      case .tagAdded(_, let name):
        names[TagKey(name: name)] = names[TagKey(name: name)] ?? TagName.clean(name)
      case .tagsSet(_, let list):
        for name in list { names[TagKey(name: name)] = names[TagKey(name: name)] ?? name }
      default: break
      }
    }
    var entries: [NoteHistoryEntry] = []
    for logged in events {
      let change = logged.event.change
      let field: String?
      let winner: Stamp?
      switch change {
      case .textSet: (field, winner) = ("text", note?.stamps.text)
      case .archivedSet: (field, winner) = ("archived", note?.stamps.archived)
      case .sortDateSet: (field, winner) = ("sortDate", note?.stamps.sortDate)
      case .tagsSet: (field, winner) = ("tags", note?.stamps.tags)
      case .tagAdded, .tagRemoved:
        // Each tag on its own: it won if it is its tag's newest change after the list.
        let stamp = logged.event.stamp
        (field, winner) = ("tags", tagChanges.contains(stamp) ? stamp : nil)
      case .attachmentsSet: (field, winner) = ("attachments", note?.stamps.attachments)
      default: (field, winner) = (nil, nil)
      }
      let outcome: NoteHistoryEntry.Outcome
      if field == nil {
        outcome = .recorded
      } else if isDeleted {
        outcome = .erasedByDelete
      } else if winner == logged.event.stamp {
        outcome = .won
      } else if field == "text",
        note?.conflicts.contains(where: { $0.stamp == logged.event.stamp }) == true
      {
        outcome = .conflict
      } else {
        outcome = .lost
      }
      var tag: String?
      switch change {
      case .tagAdded(_, let name): tag = TagName.clean(name)
      case .tagRemoved(_, let key): tag = names[key] ?? key.description
      default: break
      }
      entries.append(NoteHistoryEntry(logged: logged, field: field, tag: tag, outcome: outcome))
    }
    return entries
  }
}
