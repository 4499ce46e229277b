/// What the log's rules (``LogBatch``) need to know of what a log already holds, looked up by
/// the storage that holds it: LMDB (``EventLog``'s appender, at once, inside its transaction)
/// or a database across the network (the sync server's PostgreSQL writer, in batches: it
/// answers from what it has read, and throws ``MissingLogFacts`` for the rest; the batch's
/// ``LogBatch/round(inPlace:facts:_:)`` turns that into a ``FactsRound`` value, and the writer
/// reads what it names in one round trip before it runs the rule again).
///
/// Every answer is about the stored log *as the storage holds it now*, the changes the batch
/// handed over (``LogBatch/decisions`` the owner has written and cleared) included and the
/// changes still in the batch excluded: the batch adds those itself.
package protocol LogFacts {
  /// Whether the log holds a deletion of the note or attachment.
  mutating func isDeleted(_ object: Identifier) throws -> Bool

  /// The stamp of the latest deletion of the tag the object index files as `tagObject`
  /// (``EventLog/tagObject(_:)``), if any.
  mutating func tagDeletion(of tagObject: Identifier) throws -> Stamp?

  /// The newest change of each of these note fields, for those that have one.
  mutating func newestChanges(to fields: [FieldKey]) throws -> [FieldKey: FieldChange]

  /// The sequence numbers of the stored events filed under each object, in any order.
  mutating func sequences(of objects: [Identifier]) throws -> [Identifier: [UInt64]]

  /// The stored events at these sequence numbers (a missing one is left out).
  mutating func events(at sequences: [UInt64]) throws -> [UInt64: Event]

  /// Whether a stored event, other than those at the excluded sequence numbers, references
  /// each blob (``Event/referencedBlob``); an answer for every hash asked about.
  mutating func referenced(_ blobs: [BlobHash: Set<UInt64>]) throws -> [BlobHash: Bool]
}

/// What a ``LogFacts`` could not answer yet: the facts to read before running the rule again.
package struct MissingLogFacts: Error, Sendable {
  /// Objects whose deletion markers are wanted (notes, attachments, tag objects).
  package var deletions: Set<Identifier> = []
  /// Note fields whose newest change is wanted.
  package var fields: Set<FieldKey> = []
  /// Objects whose stored events' sequence numbers are wanted.
  package var sequences: Set<Identifier> = []
  /// Stored events wanted.
  package var events: Set<UInt64> = []
  /// Blobs whose references are wanted, each but those at the excluded sequence numbers.
  package var references: [BlobHash: Set<UInt64>] = [:]

  package init() {}

  /// Whether nothing is missing.
  package var isEmpty: Bool {
    deletions.isEmpty && fields.isEmpty && sequences.isEmpty && events.isEmpty
      && references.isEmpty
  }
}

/// A note's field: the note and the field; sorted as the log's `fields` database is.
package struct FieldKey: Hashable, Comparable, Sendable {
  /// The note.
  package let note: NoteID
  /// The field.
  package let field: NoteField

  package init(note: NoteID, field: NoteField) {
    self.note = note
    self.field = field
  }

  package static func < (a: FieldKey, b: FieldKey) -> Bool {
    (a.note.identifier, a.field) < (b.note.identifier, b.field)
  }
}

/// A change to a note field (often its newest): its stamp and where the log holds it.
package struct FieldChange: Hashable, Sendable {
  package var stamp: Stamp
  package var sequence: UInt64

  package init(stamp: Stamp, sequence: UInt64) {
    self.stamp = stamp
    self.sequence = sequence
  }

  /// What replaces what when this change reaches a field whose newest change is `newest` —
  /// rule 4 of ``LogBatch``, for a store's ``NoteMerge`` and every log that tracks fields
  /// itself. When it wins, it is the field's newest change and replaces the one before, at its
  /// own time; when it loses, it arrived replaced, at the newest's time — unless `keepsLoser`
  /// (a text that loses may be a conflict, which ``TextVersions`` decides).
  ///
  /// - Parameters:
  ///   - newest: The field's newest change; nil if it has none.
  ///   - wins: Whether this change wins over `newest` (true when there is none).
  /// - Returns: The change replaced, if any.
  package func replacement(of newest: FieldChange?, wins: Bool, keepsLoser: Bool = false)
    -> ReplacedChange?
  {
    guard let newest else { return nil }
    if wins {
      // A record's field set before sequence numbers were kept names no event.
      guard newest.sequence != 0 else { return nil }
      return ReplacedChange(milliseconds: stamp.time.milliseconds, sequence: newest.sequence)
    }
    guard !keepsLoser else { return nil }
    return ReplacedChange(milliseconds: newest.stamp.time.milliseconds, sequence: sequence)
  }
}

/// A replaced change in the retention queue: the time of the change that replaced it (an
/// upper bound of when it was replaced), and where the log holds it.
package struct ReplacedChange: Hashable, Comparable, Sendable {
  package var milliseconds: UInt64
  package var sequence: UInt64

  package init(milliseconds: UInt64, sequence: UInt64) {
    self.milliseconds = milliseconds
    self.sequence = sequence
  }

  package static func < (a: ReplacedChange, b: ReplacedChange) -> Bool {
    (a.milliseconds, a.sequence) < (b.milliseconds, b.sequence)
  }
}
