internal import Foundation
internal import LMDB

/// Undo and redo of this process's user changes, as an app's Undo menu offers them.
///
/// Undo is local, as the design of VLog's sync says: it is not synced and not kept across
/// launches. Each ``NoteStore/write(_:)`` is one undoable group. Undoing it is a new user
/// change, synced like any other, that puts back what the group changed: the previous values
/// of the fields it set; for a note it deleted, a new note (a deletion is final) with a new id
/// and the same text, dates, archive state, tags and attachments (new attachments with the same
/// bytes); for a note it created, the note's deletion; for a tag it renamed or deleted, the
/// previous name, or the tag back on its notes. Redo puts back what the undo changed.
///
/// The bytes of attachments an undo may need are kept in the store until the entry leaves the
/// history (``NoteStore/removeUnusedBlobs()`` keeps them; closing the store ends the history).
final class UndoHistory: Sendable {
  private struct State {
    var undo: [UndoGroup] = []
    var redo: [UndoGroup] = []
  }
  private let state = Locked(State())
  let limit: Int

  init(limit: Int) { self.limit = limit }

  /// Records a user change group; clears what could be redone.
  func recorded(_ group: UndoGroup) {
    guard limit > 0, !group.steps.isEmpty else { return }
    state.withLock { state in
      state.undo.append(group)
      if state.undo.count > limit { state.undo.removeFirst(state.undo.count - limit) }
      state.redo.removeAll()
    }
  }

  func popUndo() -> UndoGroup? { state.withLock { $0.undo.popLast() } }
  func popRedo() -> UndoGroup? { state.withLock { $0.redo.popLast() } }
  func pushUndo(_ group: UndoGroup) { state.withLock { $0.undo.append(group) } }
  func pushRedo(_ group: UndoGroup) { state.withLock { $0.redo.append(group) } }
  var canUndo: Bool { state.withLock { !$0.undo.isEmpty } }
  var canRedo: Bool { state.withLock { !$0.redo.isEmpty } }
  func clear() { state.withLock { $0 = State() } }

  /// The blobs an entry may need to put an attachment back.
  var heldBlobs: Set<BlobHash> {
    state.withLock { state in
      Set((state.undo + state.redo).flatMap { $0.steps.flatMap(\.blobs) })
    }
  }
}

/// What it takes to put back one user change group.
struct UndoGroup: Sendable {
  var steps: [UndoStep]
}

/// One thing to put back.
enum UndoStep: Sendable {
  /// Give the note (or, if it was deleted since, a new one) this content again.
  case restore(NoteID, NoteSnapshot)
  /// Delete the note: the group created it.
  case delete(NoteID)
  /// Give the tag this display name again.
  case rename(TagID, String)

  var blobs: [BlobHash] {
    guard case .restore(_, let snapshot) = self else { return [] }
    return snapshot.attachments.map(\.blobHash)
  }
}

/// A note's content, as undo puts it back.
struct NoteSnapshot: Sendable {
  var creationDate: Date
  var text: String
  var archived: Bool
  var sortDate: Date?
  var tags: [String]
  var attachments: [Attachment]
}

extension NoteStore {
  /// Whether there is a change group of this process to undo.
  public var canUndo: Bool { undoHistory.canUndo }

  /// Whether there is an undone change group to redo.
  public var canRedo: Bool { undoHistory.canRedo }

  /// Undoes the last user change group of this process (see ``write(_:)``): a new change that
  /// puts back what it changed. A deleted note comes back as a new note with a new id.
  ///
  /// - Returns: Whether there was a group to undo.
  /// - Throws: ``VLogError`` if the change cannot be made (nothing is changed then, and the
  ///   group stays to undo).
  @discardableResult
  public func undo() throws -> Bool {
    guard let group = undoHistory.popUndo() else { return false }
    do {
      undoHistory.pushRedo(try perform(group))
    } catch {
      undoHistory.pushUndo(group)
      throw error
    }
    return true
  }

  /// Redoes the last undone change group.
  ///
  /// - Returns: Whether there was a group to redo.
  @discardableResult
  public func redo() throws -> Bool {
    guard let group = undoHistory.popRedo() else { return false }
    do {
      undoHistory.pushUndo(try perform(group))
    } catch {
      undoHistory.pushRedo(group)
      throw error
    }
    return true
  }

  /// Forgets every group to undo and redo, and so the attachment bytes held for them.
  public func clearUndoHistory() { undoHistory.clear() }

  /// Puts a group back in one user write, and returns what puts that back.
  private func perform(_ group: UndoGroup) throws -> UndoGroup {
    var changes = Changes(dependencies: dependencies)
    for step in group.steps {
      switch step {
      case .restore(let id, let snapshot): changes.intents.append(.restore(id, snapshot))
      case .delete(let id): changes.intents.append(.deleteNoteIfVisible(id))
      case .rename(let tag, let name): changes.intents.append(.restoreTagName(tag, name))
      }
    }
    return try apply(changes, undoable: false)
  }
}

extension WriteSession {
  /// What puts back the notes and tags `intents` change, read before they are made.
  mutating func undoGroup(
    for intents: [Changes.Intent], in transaction: borrowing WriteTransaction
  ) throws -> UndoGroup {
    var steps: [UndoStep] = []
    var seen = Set<NoteID>()
    func note(_ id: NoteID) throws {
      guard seen.insert(id).inserted else { return }
      switch try projector.status(of: id, in: transaction) {
      case .absent: steps.append(.delete(id))
      case .deleted: break
      case .visible:
        if let snapshot = try snapshot(of: id, in: transaction) {
          steps.append(.restore(id, snapshot))
        }
      }
    }
    for intent in intents {
      switch intent {
      case .createNote(let id, _, _, _, _, _), .deleteNoteIfVisible(let id): try note(id)
      case .setText(let id, _), .setArchived(let id, _), .setSortDate(let id, _),
        .setTags(let id, _), .setAttachments(let id, _), .deleteNote(let id),
        .restore(let id, _):
        try note(id)
      case .addAttachment(let attachment, _): try note(attachment.noteID)
      case .deleteAttachment(let id):
        if let record = try projector.attachmentRecord(id, in: transaction) {
          try note(record.attachment.noteID)
        }
      case .renameTag(let name):
        let tag = TagID(name: name)
        if let record = try projector.tag(tag, in: transaction), record.noteCount > 0 {
          steps.append(.rename(tag, record.name))
        }
      case .restoreTagName(let tag, _):
        if let record = try projector.tag(tag, in: transaction), record.noteCount > 0 {
          steps.append(.rename(tag, record.name))
        }
      case .deleteTag(let name):
        try transaction.forEach(
          in: schema.tagNotes, range: .prefix(Keys.tagPrefix(TagID(name: name)))
        ) { key, _ in
          try note(NoteID(try Identifier.ending(key, length: nil, in: "tagNotes")))
        }
      }
    }
    return UndoGroup(steps: steps)
  }

  private mutating func snapshot(
    of id: NoteID, in transaction: borrowing WriteTransaction
  ) throws -> NoteSnapshot? {
    guard let record = try projector.note(id, in: transaction), record.isCreated else {
      return nil
    }
    var attachments: [Attachment] = []
    for attachment in record.attachments {
      if let stored = try projector.attachmentRecord(attachment, in: transaction),
        !stored.isErased
      {
        attachments.append(stored.attachment)
      }
    }
    return NoteSnapshot(
      creationDate: Date(milliseconds: record.creationDate),
      text: try text(of: record, in: transaction),
      archived: record.archived,
      sortDate: record.sortDateStamp == .zero ? nil : Date(milliseconds: record.sortDate),
      tags: record.tags, attachments: attachments)
  }

  /// Gives a note its snapshot's content back: in place if it is visible, as a new note (with
  /// new attachments holding the same bytes) if it was deleted.
  mutating func restore(
    _ id: NoteID, _ snapshot: NoteSnapshot, makeIdentifier: () -> Identifier,
    wallMilliseconds now: UInt64, in transaction: borrowing WriteTransaction
  ) throws {
    let target: NoteID
    var current: NoteRecord
    if try projector.status(of: id, in: transaction) == .visible,
      let record = try projector.note(id, in: transaction)
    {
      target = id
      current = record
    } else {
      target = NoteID(makeIdentifier())
      recreated.append(target)
      try resolve(
        .createNote(
          target, creationDate: snapshot.creationDate, text: snapshot.text,
          archived: snapshot.archived, sortDate: snapshot.sortDate, tags: snapshot.tags),
        wallMilliseconds: now, in: transaction)
      current = try projector.note(target, in: transaction) ?? NoteRecord()
    }
    if try text(of: current, in: transaction) != snapshot.text {
      try resolve(.setText(target, snapshot.text), wallMilliseconds: now, in: transaction)
    }
    if current.archived != snapshot.archived {
      try resolve(.setArchived(target, snapshot.archived), wallMilliseconds: now, in: transaction)
    }
    if let sortDate = snapshot.sortDate, current.sortDate != sortDate.milliseconds {
      try resolve(.setSortDate(target, sortDate), wallMilliseconds: now, in: transaction)
    }
    if current.tags != snapshot.tags {
      try resolve(.setTags(target, snapshot.tags), wallMilliseconds: now, in: transaction)
    }
    // Attachments: those still there keep their ids; deleted ones come back as new ones with
    // the same bytes; ones the group added are deleted.
    var order: [AttachmentID] = []
    for attachment in snapshot.attachments {
      let live = try projector.attachmentRecord(attachment.id, in: transaction)
      if target == id, let live, !live.isErased, live.attachment.noteID == id,
        try !schema.hasTombstone(attachment.id.identifier, in: transaction)
      {
        order.append(attachment.id)
        continue
      }
      guard
        let bytes = try transaction.value(forKey: attachment.blobHash.bytes, in: schema.blobs)
      else { continue }
      let copy = Attachment(
        id: AttachmentID(makeIdentifier()), noteID: target, mimeType: attachment.mimeType,
        width: attachment.width, height: attachment.height, blobHash: attachment.blobHash,
        byteCount: attachment.byteCount)
      try resolve(.addAttachment(copy, bytes: bytes), wallMilliseconds: now, in: transaction)
      order.append(copy.id)
    }
    current = try projector.note(target, in: transaction) ?? current
    for attachment in current.attachments where !order.contains(attachment) {
      try resolve(.deleteAttachment(attachment), wallMilliseconds: now, in: transaction)
    }
    current = try projector.note(target, in: transaction) ?? current
    if current.attachments != order {
      try resolve(.setAttachments(target, order), wallMilliseconds: now, in: transaction)
    }
  }
}

extension WriteSession {
  /// A note's text, read from the log where its record says it is (appended in this
  /// transaction or before).
  func text(of record: NoteRecord, in transaction: borrowing WriteTransaction) throws -> String {
    guard record.textSequence != 0 else { return "" }
    return try schema.eventLog.text(
      at: record.textSequence, stamp: record.textStamp, in: transaction)
  }
}
