internal import Crypto
public import Foundation

/// The earlier name of ``Edits``.
@available(*, deprecated, renamed: "Edits")
public typealias Changes = Edits

/// User changes to make in one transaction, collected by the closure of
/// ``NoteStore/write(_:)-7uv98``.
///
/// Each method records a change and returns at once; the store checks and applies them all
/// together when the closure returns. If any change is invalid — a note that does not exist or
/// was deleted, an empty or oversize value — ``NoteStore/write(_:)-7uv98`` throws and none of them is
/// made. Ids of new notes and attachments are made here, so they can be used by later changes
/// of the same batch.
public struct Edits: Sendable {
  enum Intent: Sendable {
    case createNote(
      NoteID, creationDate: Date, text: String, archived: Bool, sortDate: Date?, tags: [String])
    /// The text, and the conflicting texts it resolves (by stamp).
    case setText(NoteID, String, resolving: [Stamp] = [])
    case setArchived(NoteID, Bool)
    case setSortDate(NoteID, Date)
    case setTags(NoteID, [String])
    case setAttachments(NoteID, [AttachmentID])
    case deleteNote(NoteID)
    case addAttachment(Attachment, bytes: [UInt8])
    case deleteAttachment(AttachmentID)
    case renameTag(String)
    case deleteTag(String)
    /// Undo: give a note (or a new one, if it was deleted) this content.
    case restore(NoteID, NoteSnapshot)
    /// Undo of a creation: delete the note if it is still visible.
    case deleteNoteIfVisible(NoteID)
    /// Give a note the text of one of its versions again, resolving its conflicts.
    case restoreVersion(NoteID, Stamp)
    /// Undo of a rename: give the tag this name, if it is still in use.
    case restoreTagName(TagID, String)
  }

  var intents: [Intent] = []
  private let dependencies: NoteStore.Dependencies

  init(dependencies: NoteStore.Dependencies) {
    self.dependencies = dependencies
  }

  /// Whether no change was recorded.
  public var isEmpty: Bool { intents.isEmpty }

  /// Creates a note, with its creation date set to now.
  ///
  /// - Parameters:
  ///   - text: The note's text.
  ///   - isArchived: Whether it goes straight to the archive.
  ///   - sortDate: Its sort date; nil to sort by its creation date.
  ///   - tags: Tag names, in order.
  /// - Returns: The new note's id.
  @discardableResult
  public mutating func createNote(
    text: String = "", isArchived: Bool = false, sortDate: Date? = nil, tags: [String] = []
  ) -> NoteID {
    let id = NoteID(dependencies.makeIdentifier())
    let now = Date(milliseconds: dependencies.now().milliseconds)
    intents.append(
      .createNote(
        id, creationDate: now, text: text, archived: isArchived,
        sortDate: sortDate.map { Date(milliseconds: $0.milliseconds) }, tags: tags))
    return id
  }

  /// Sets a note's text (at most ``Limits/textBytes`` bytes of UTF-8).
  ///
  /// The change replaces the text the note shows now. A text another device wrote meanwhile,
  /// without seeing that one, stays as one of the note's ``Note/conflicts`` on every replica,
  /// until a change resolves it: name the conflicts this text resolves — typically all of them,
  /// once the user has merged them into `text` — in `conflicts`.
  ///
  /// - Parameters:
  ///   - text: The new text.
  ///   - note: The note.
  ///   - conflicts: The stamps of the conflicting texts (``TextConflict/stamp``) this text
  ///     replaces too, at most ``Limits/replacedTexts`` with the shown one; a stamp that is no
  ///     longer a conflict (resolved elsewhere meanwhile) changes nothing.
  public mutating func setText(_ text: String, of note: NoteID, resolving conflicts: [Stamp] = []) {
    intents.append(.setText(note, text, resolving: conflicts))
  }

  /// Gives a note the text of one of its versions (``NoteStore/versions(of:)``) again.
  ///
  /// A restore is an ordinary text change with a new stamp: it replaces the text the note shows
  /// and resolves its conflicts — the user chose this text over all of them; the oldest
  /// ``Limits/replacedTexts`` − 1 of them, as a change names at most that many — so it
  /// syncs, merges and undoes like any edit, and the conflicts it resolves are resolved on every
  /// replica. The version restored stays a version of its own.
  ///
  /// - Parameters:
  ///   - version: The stamp of the version (``NoteVersion/stamp``).
  ///   - note: The note.
  ///
  /// The write throws ``VLogError`` `versionNotFound` if the note has no such version, or the
  /// retention period erased its text.
  public mutating func restoreVersion(_ version: Stamp, of note: NoteID) {
    intents.append(.restoreVersion(note, version))
  }

  /// Archives a note, or brings it back to the timeline.
  public mutating func setArchived(_ isArchived: Bool, of note: NoteID) {
    intents.append(.setArchived(note, isArchived))
  }

  /// Sets the date a note sorts by, to the millisecond.
  public mutating func setSortDate(_ date: Date, of note: NoteID) {
    intents.append(.setSortDate(note, Date(milliseconds: date.milliseconds)))
  }

  /// Sets a note's tags by name, in order. Names are trimmed; names that differ only in case
  /// name the same tag and are kept once.
  public mutating func setTags(_ tags: [String], of note: NoteID) {
    intents.append(.setTags(note, tags))
  }

  /// Sets a note's attachments, in order. Each must be an attachment of this note.
  public mutating func setAttachments(_ attachments: [AttachmentID], of note: NoteID) {
    intents.append(.setAttachments(note, attachments))
  }

  /// Deletes a note, for good: no later change to it, from any device, brings it back.
  public mutating func deleteNote(_ note: NoteID) {
    intents.append(.deleteNote(note))
  }

  /// Adds an attachment at the end of a note's attachments, storing its bytes (once per
  /// distinct content).
  ///
  /// - Parameters:
  ///   - bytes: The content (1 byte to ``Limits/attachmentBytes``).
  ///   - mimeType: Its media type, for example `image/png`.
  ///   - width: Width in pixels (0 if not an image).
  ///   - height: Height in pixels (0 if not an image).
  ///   - note: The note it belongs to.
  /// - Returns: The new attachment's id.
  @discardableResult
  public mutating func addAttachment(
    _ bytes: [UInt8], mimeType: String, width: Int = 0, height: Int = 0, to note: NoteID
  ) -> AttachmentID {
    let id = AttachmentID(dependencies.makeIdentifier())
    let digest = BlobHash(bytes: Array(SHA256.hash(data: bytes)))!
    let attachment = Attachment(
      id: id, noteID: note, mimeType: mimeType, width: width, height: height, blobHash: digest,
      byteCount: bytes.count)
    intents.append(.addAttachment(attachment, bytes: bytes))
    return id
  }

  /// Deletes an attachment, for good, and removes it from its note's attachments.
  public mutating func deleteAttachment(_ attachment: AttachmentID) {
    intents.append(.deleteAttachment(attachment))
  }

  /// Sets the display name of the tag with this name's id, for example `"Paris"` for the tag
  /// `paris`. The tag must be in use.
  public mutating func renameTag(to name: String) {
    intents.append(.renameTag(name))
  }

  /// Deletes a tag: removes it from every note that has it, as ordinary tags changes of those
  /// notes, and erases its name from history — its renames, and the replaced tags changes that
  /// named it — on every replica. A later change that names the tag creates it again: a tag
  /// exists while a visible note has it. A device that tagged a note without knowing of the
  /// deletion keeps the tag on that note (its change is the note's newest).
  public mutating func deleteTag(named name: String) {
    intents.append(.deleteTag(name))
  }
}
