/// A note's mutable field: each takes the value of its newest change, on its own
/// (``Change/field`` says which a change sets).
///
/// The raw values number the fields where the log indexes each field's newest change (a store's
/// and the LMDB server's `fields` database, PostgreSQL's `vlog_fields`), and never change.
package enum NoteField: UInt8, CaseIterable, Hashable, Comparable, Sendable {
  /// The note's text.
  case text = 1
  /// Whether the note is archived.
  case archived = 2
  /// The date the timeline sorts the note by.
  case sortDate = 3
  /// The note's tags list.
  case tags = 4
  /// The note's attachments list.
  case attachments = 5

  package static func < (a: NoteField, b: NoteField) -> Bool { a.rawValue < b.rawValue }
}
