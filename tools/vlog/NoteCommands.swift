import ArgumentParser
import Foundation
import LMDB
import VLog
import VLogWire

/// A command that works on a store: `execute(on:)` does the work and returns what to print, so
/// tests run it in-process on a store of their own.
protocol StoreCommand: AsyncParsableCommand {
  var options: StoreOptions { get }
  /// Whether the command may create the store.
  static var createsStore: Bool { get }
  func execute(on store: NoteStore) throws -> CommandOutput
}

extension StoreCommand {
  static var createsStore: Bool { false }

  func run() async throws {
    let store = try options.open(creating: Self.createsStore)
    defer { store.close() }
    let output: CommandOutput
    do {
      output = try execute(on: store)
    } catch {
      throw explainingReadOnly(error, of: store)
    }
    try options.emit(output)
  }
}

/// `error`, or for a write to a store this user cannot write, an error that says so.
func explainingReadOnly(_ error: any Error, of store: NoteStore) -> any Error {
  guard store.isReadOnly, let failure = error as? VLogError,
    failure.underlying?.code == .accessDenied
  else { return error }
  return CLIError(
    "the store at '\(store.path)' is not writable by this user (read-only media, or another "
      + "user's files): commands that only read work; to change it, copy it to storage you can "
      + "write, or run as its owner")
}

/// `vlog note …`: user changes from the shell.
struct NoteCommand: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "note",
    abstract: "Make user changes to notes.",
    subcommands: [
      AddNote.self, SetText.self, ShowNote.self, NoteVersions.self, RestoreVersion.self,
      Archive.self, Unarchive.self, TagNote.self, UntagNote.self, RemoveNote.self,
    ]
  )

  /// Without a subcommand, says which there are (exit status 2) instead of succeeding silently.
  func run() async throws {
    throw ValidationError(
      "give a subcommand: add, set, show, versions, restore, archive, unarchive, tag, untag or rm "
        + "(see 'vlog note --help')"
    )
  }
}

/// The JSON of `note rm`.
struct DeletedJSON: Encodable {
  let id: String
  var deleted = true
}

/// The JSON of one note.
struct NoteJSON: Encodable {
  let id: String
  let text: String
  let archived: Bool
  let creationDate: String
  let sortDate: String
  let tags: [String]
  let attachments: [String]
  let conflicts: [ConflictJSON]

  init(_ note: Note) {
    id = note.id.description
    text = note.text
    archived = note.isArchived
    creationDate = format(note.creationDate)
    sortDate = format(note.sortDate)
    tags = note.tags.map(\.name)
    attachments = note.attachments.map(\.id.description)
    conflicts = note.conflicts.map(ConflictJSON.init)
  }
}

/// The JSON of a text conflict: the event id that names it (what `--resolve` takes), when it
/// was written, and its text.
struct ConflictJSON: Encodable {
  let id: String
  let time: String
  let text: String

  init(_ conflict: TextConflict) {
    id = conflict.stamp.hex
    time = conflict.stamp.time.description
    text = conflict.text
  }
}

/// A note as `vlog note show` prints it: its fields, then each conflicting text.
func describe(_ note: Note) -> String {
  var lines = [
    "note \(note.id)",
    "created    \(format(note.creationDate))",
    "sort date  \(format(note.sortDate))\(note.isArchived ? " (archived)" : "")",
    "tags       \(note.tags.isEmpty ? "none" : note.tags.map(\.name).joined(separator: ", "))",
    "attached   \(note.attachments.count) attachment\(note.attachments.count == 1 ? "" : "s")",
    "",
    note.text,
  ]
  if !note.conflicts.isEmpty {
    lines.append("")
    lines.append(
      "\(note.conflicts.count) conflicting text\(note.conflicts.count == 1 ? "" : "s"), written "
        + "without seeing this one (keep one with vlog note set \(note.id) TEXT --resolve-all):")
    for conflict in note.conflicts {
      lines.append("")
      lines.append("conflict \(conflict.stamp.hex) (\(conflict.stamp.time))")
      lines.append(conflict.text)
    }
  }
  return lines.joined(separator: "\n")
}

/// Makes one change to the note named by an id argument and prints the note.
func changeNote(
  _ id: NoteID, _ verb: String, on store: NoteStore,
  _ change: (inout Edits, NoteID) -> Void
) throws -> CommandOutput {
  try store.write { change(&$0, id) }
  return try noteOutput(store, id, verb)
}

/// A note, or a user error if there is no such note.
func existingNote(_ id: NoteID, in store: NoteStore) throws -> Note {
  guard let note = try store.note(id) else {
    // The same words as the engine's, whichever command meets the deleted note.
    if try store.isDeleted(id) { throw CLIError("note \(id) was deleted; deletes are final") }
    throw CLIError("there is no note \(id)")
  }
  return note
}

/// A note's tags, or a user error if there is no such note.
func currentTags(of id: NoteID, in store: NoteStore) throws -> [Tag] {
  try existingNote(id, in: store).tags
}

/// Prints a note after a change, and how it was stamped when this device's clock is off the
/// server's by more than a minute (as the last sync measured it).
func noteOutput(_ store: NoteStore, _ id: NoteID, _ verb: String) throws -> CommandOutput {
  var text = "\(verb) \(id)"
  if let offset = store.serverClockOffset, abs(offset) > 60_000 {
    let how =
      offset < 0
      ? "ahead of the server's (as of the last sync): the change is stamped by the server's clock"
      : "behind the server's (as of the last sync): the change is stamped after the newest "
        + "change this store has seen"
    text +=
      "\nclock: this device's clock is \(formatDuration(milliseconds: offset)) \(how); "
      + "set the clock"
  }
  guard let note = try store.note(id) else {
    return CommandOutput(text: text, json: ["id": id.description])
  }
  return CommandOutput(text: text, json: NoteJSON(note))
}

struct AddNote: StoreCommand {
  static let configuration = CommandConfiguration(
    commandName: "add", abstract: "Create a note; prints its id.")
  static var createsStore: Bool { true }

  @OptionGroup var options: StoreOptions
  @OptionGroup var input: TextInput
  @Option(name: .long, help: "A tag (repeat for several).") var tag: [String] = []
  @Flag(name: .long, help: "Put the note straight into the archive.") var archived = false
  @Option(name: .long, help: "The sort date, ISO 8601 (default: now).") var sortDate: String?

  func validate() throws {
    if let sortDate { _ = try parseDate(sortDate, option: "--sort-date") }
  }

  func execute(on store: NoteStore) throws -> CommandOutput {
    let date = try sortDate.map { try parseDate($0, option: "--sort-date") }
    let text = try input.read()
    let id = try store.write { changes in
      changes.createNote(text: text, isArchived: archived, sortDate: date, tags: tag)
    }
    return try noteOutput(store, id, "created")
  }
}

struct SetText: StoreCommand {
  static let configuration = CommandConfiguration(
    commandName: "set", abstract: "Set a note's text, resolving its conflicts if asked.",
    discussion: """
      A text written on another device without seeing this one stays as a conflict (vlog note \
      show lists them) until a change resolves it: --resolve ID for one (the id vlog note show \
      prints), --resolve-all for every one.
      """)
  @OptionGroup var options: StoreOptions
  @Argument(help: "The note's id (a UUID).") var id: NoteID
  @OptionGroup var input: TextInput
  @Option(name: .long, help: "A conflicting text this text resolves, by id (repeat for several).")
  var resolve: [String] = []
  @Flag(name: .long, help: "Resolve every conflicting text of the note.") var resolveAll = false

  func validate() throws {
    if resolveAll && !resolve.isEmpty {
      throw ValidationError("give --resolve or --resolve-all, not both")
    }
    for id in resolve where Stamp(hex: id) == nil {
      throw ValidationError("--resolve: '\(id)' is not a conflict's id (48 hexadecimal digits)")
    }
  }

  func execute(on store: NoteStore) throws -> CommandOutput {
    let text = try input.read()
    var resolving = resolve.compactMap { Stamp(hex: $0) }
    if resolveAll || !resolving.isEmpty {
      let note = try existingNote(id, in: store)
      let conflicts = Set(note.conflicts.map(\.stamp))
      if let unknown = resolving.first(where: { !conflicts.contains($0) }) {
        throw CLIError(
          "note \(id) has no conflicting text \(unknown.hex); vlog note show \(id) lists them")
      }
      if resolveAll { resolving = note.conflicts.map(\.stamp) }
    }
    return try changeNote(id, "updated", on: store) {
      $0.setText(text, of: $1, resolving: resolving)
    }
  }
}

/// `vlog note show`: a whole note, with its conflicting texts.
struct ShowNote: StoreCommand {
  static let configuration = CommandConfiguration(
    commandName: "show", abstract: "Show a whole note, with its conflicting texts.")
  @OptionGroup var options: StoreOptions
  @Argument(help: "The note's id (a UUID).") var id: NoteID

  func execute(on store: NoteStore) throws -> CommandOutput {
    let note = try existingNote(id, in: store)
    return CommandOutput(text: describe(note), json: NoteJSON(note))
  }
}

/// `vlog conflicts`: the notes with conflicting texts.
struct Conflicts: StoreCommand {
  static let configuration = CommandConfiguration(
    abstract: "List the notes whose text was edited on two devices without one seeing the other.",
    discussion: """
      Each such note shows its newest text and keeps the others as conflicts, the same on \
      every device, until a change resolves them (vlog note set ID TEXT --resolve-all).
      """)
  @OptionGroup var options: StoreOptions

  func execute(on store: NoteStore) throws -> CommandOutput {
    let notes = try store.notesWithConflicts()
    let text = table(
      ["ID", "CONFLICTS", "TEXT"],
      notes.map {
        [$0.id.description, String($0.conflicts.count), String($0.truncatedText.prefix(60))]
      })
    return CommandOutput(
      text: notes.isEmpty ? "no conflicts" : text, json: notes.map(NoteJSON.init))
  }
}

struct Archive: StoreCommand {
  static let configuration = CommandConfiguration(abstract: "Move a note to the archive.")
  @OptionGroup var options: StoreOptions
  @Argument(help: "The note's id (a UUID).") var id: NoteID

  func execute(on store: NoteStore) throws -> CommandOutput {
    try changeNote(id, "archived", on: store) { $0.setArchived(true, of: $1) }
  }
}

struct Unarchive: StoreCommand {
  static let configuration = CommandConfiguration(abstract: "Bring a note back to the timeline.")
  @OptionGroup var options: StoreOptions
  @Argument(help: "The note's id (a UUID).") var id: NoteID

  func execute(on store: NoteStore) throws -> CommandOutput {
    try changeNote(id, "unarchived", on: store) { $0.setArchived(false, of: $1) }
  }
}

struct TagNote: StoreCommand {
  static let configuration = CommandConfiguration(
    commandName: "tag", abstract: "Add tags to a note.")
  @OptionGroup var options: StoreOptions
  @Argument(help: "The note's id (a UUID).") var id: NoteID
  @Argument(help: "Tag names.") var tags: [String]

  func validate() throws {
    guard !tags.isEmpty else { throw ValidationError("give at least one tag") }
  }

  func execute(on store: NoteStore) throws -> CommandOutput {
    let current = try currentTags(of: id, in: store)
    return try changeNote(id, "tagged", on: store) {
      $0.setTags(current.map(\.name) + tags, of: $1)
    }
  }

}

struct UntagNote: StoreCommand {
  static let configuration = CommandConfiguration(
    commandName: "untag", abstract: "Remove tags from a note.")
  @OptionGroup var options: StoreOptions
  @Argument(help: "The note's id (a UUID).") var id: NoteID
  @Argument(help: "Tag names.") var tags: [String]

  func validate() throws {
    guard !tags.isEmpty else { throw ValidationError("give at least one tag") }
  }

  func execute(on store: NoteStore) throws -> CommandOutput {
    let removed = Set(tags.map(TagID.init(name:)))
    let kept = try currentTags(of: id, in: store).filter { !removed.contains($0.id) }.map(\.name)
    return try changeNote(id, "untagged", on: store) { $0.setTags(kept, of: $1) }
  }

}

struct RemoveNote: StoreCommand {
  static let configuration = CommandConfiguration(
    commandName: "rm", abstract: "Delete a note, for good.")
  @OptionGroup var options: StoreOptions
  @Argument(help: "The note's id (a UUID).") var id: NoteID

  func execute(on store: NoteStore) throws -> CommandOutput {
    let note = id
    try store.write { $0.deleteNote(note) }
    return CommandOutput(text: "deleted \(note)", json: DeletedJSON(id: note.description))
  }
}

/// `vlog notes`: the timeline, the archive, a tag's notes, or a search.
struct Notes: StoreCommand {
  static let configuration = CommandConfiguration(
    abstract: "List notes: the timeline (default), the archive, a tag's notes, or a search.",
    discussion: """
      A note marked * has changes made here that the server has not stored yet (vlog status \
      lists them). Notes brought in by vlog import are not marked: vlog sync --check names \
      every note the server lacks.
      """)
  @OptionGroup var options: StoreOptions
  @Flag(name: .long, help: "List the archive instead of the timeline.") var archived = false
  @Option(name: .long, help: "List the notes with this tag.") var tag: String?
  @Option(name: .long, help: "List the notes whose text contains this.") var search: String?
  @Option(name: .long, parsing: .unconditional, help: "The most notes to list.") var limit = 50

  struct Row: Encodable {
    let id: String
    let text: String
    let archived: Bool
    let sortDate: String
    let tags: [String]
    /// Texts kept as conflicts beside the one shown: `vlog note show` lists them.
    let conflicts: Int
    /// Whether the note has changes made here that the server has not stored yet.
    let pending: Bool
  }

  func validate() throws {
    guard limit > 0 else { throw ValidationError("--limit must be positive") }
    guard [archived, tag != nil, search != nil].filter({ $0 }).count <= 1 else {
      throw ValidationError("give at most one of --archived, --tag and --search")
    }
  }

  func execute(on store: NoteStore) throws -> CommandOutput {
    let notes: [NoteSummary]
    if let tag {
      notes = try store.notes(taggedWith: tag, limit: limit)
    } else if let search {
      notes = try store.search(search, limit: limit)
    } else if archived {
      notes = try store.archivedNotes(limit: limit)
    } else {
      notes = try store.timeline(limit: limit)
    }
    let rows = notes.map {
      Row(
        id: $0.id.description, text: $0.truncatedText, archived: $0.isArchived,
        sortDate: format($0.sortDate), tags: $0.tagNames, conflicts: $0.conflictCount,
        pending: $0.isPending)
    }
    let text = table(
      ["  ID", "SORT DATE", "TAGS", "TEXT"],
      rows.map { row in
        // A note with conflicts says so first: `vlog note show` lists them, to resolve. One
        // with changes the server has not stored is marked `*` (`vlog status` lists them).
        let mark =
          row.conflicts == 0 ? "" : "[\(row.conflicts) conflict\(row.conflicts == 1 ? "" : "s")] "
        return [
          (row.pending ? "* " : "  ") + row.id, row.sortDate, row.tags.joined(separator: ","),
          mark + row.text.prefix(60),
        ]
      })
    return CommandOutput(text: rows.isEmpty ? "no notes" : text, json: rows)
  }
}

/// `vlog tags`: tags in use with their note counts.
struct Tags: StoreCommand {
  static let configuration = CommandConfiguration(
    abstract: "List tags in use with note counts, or delete one.",
    discussion: """
      --delete NAME takes the tag off every note and erases its name from history (its \
      renames and the replaced tags changes that named it), on every device once synced. A \
      later change that names the tag creates it again.
      """)
  @OptionGroup var options: StoreOptions
  @Option(name: .long, help: "Delete this tag from every note, for good.") var delete: String?

  struct Row: Encodable {
    let id: String
    let name: String
    let notes: Int
  }

  func execute(on store: NoteStore) throws -> CommandOutput {
    if let delete {
      try store.write { $0.deleteTag(named: delete) }
    }
    let rows = try store.tags().map {
      Row(id: $0.tag.id.rawValue, name: $0.tag.name, notes: $0.noteCount)
    }
    let text = table(["TAG", "NOTES"], rows.map { [$0.name, String($0.notes)] })
    return CommandOutput(text: rows.isEmpty ? "no tags" : text, json: rows)
  }
}
