internal import Foundation
internal import LMDB

/// Undo and redo of this process's user changes, as an app's Undo menu offers them.
///
/// Undo is local, as the design of VLog's sync says: it is not synced and not kept across
/// launches. Each ``NoteStore/write(_:)-7uv98`` is one undoable group. Undoing it is a new user
/// change, synced like any other, that puts back what the group changed: the previous values
/// of the fields it set; for a note it deleted, a new note (a deletion is final) with a new id
/// and the same text, dates, archive state, tags and attachments (new attachments with the same
/// bytes); for a note it created, the note's deletion; for a tag it renamed or deleted, the
/// previous name, or the tag back on its notes. Redo puts back what the undo changed. Fields
/// the group did not set are left as they are (an edit synced in since stays); steps naming a
/// note that undo brought back under a new id go to that note; a change to a note deleted
/// elsewhere since has nothing to go back to.
///
/// A previous text is held as the place of its event in the log, read when undo needs it (or
/// before a deletion of this process erases it); with a retention period under a day it is
/// held as a copy. A text that retention has erased by the time of the undo is not put back.
///
/// The bytes of attachments an undo may need are kept in the store until the entry leaves the
/// history (``NoteStore/removeUnusedBlobs()`` keeps them; closing the store ends the history).
final class UndoHistory: Sendable {
  private struct State {
    var undo: [UndoGroup] = []
    var redo: [UndoGroup] = []
    /// Notes undo made in place of deleted ones: later steps naming the old id go to the new.
    var replacements: [NoteID: NoteID] = [:]
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

  /// The notes undo made in place of deleted ones, by the deleted one's id.
  var replacements: [NoteID: NoteID] { state.withLock { $0.replacements } }

  /// Records that undo made `new` in place of the deleted `old`.
  func replaced(_ replaced: [(NoteID, NoteID)]) {
    guard !replaced.isEmpty else { return }
    state.withLock { state in
      for (old, new) in replaced { state.replacements[old] = new }
    }
  }

  /// Reads, while they are still in the log, the texts that entries hold by reference for the
  /// given notes: their events are about to be erased.
  func materializeTexts(
    of notes: Set<NoteID>, _ read: (UInt64, Stamp) throws -> String?
  ) rethrows {
    guard !notes.isEmpty else { return }
    try state.withLock { state in
      func materialize(_ groups: inout [UndoGroup]) throws {
        for group in groups.indices
        where notes.contains(where: groups[group].loggedTexts.contains) {
          for step in groups[group].steps.indices {
            guard case .restore(let id, _) = groups[group].steps[step], notes.contains(id),
              case .restore(_, var snapshot) = groups[group].steps[step],
              case .logged(let sequence, let stamp) = snapshot.text
            else { continue }
            snapshot.text = try read(sequence, stamp).map(SnapshotText.value) ?? .erased
            groups[group].steps[step] = .restore(id, snapshot)
            groups[group].loggedTexts.remove(id)
          }
        }
      }
      try materialize(&state.undo)
      try materialize(&state.redo)
    }
  }

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
  /// The notes whose previous text a step holds by reference.
  var loggedTexts: Set<NoteID>

  init(steps: [UndoStep]) {
    self.steps = steps
    loggedTexts = []
    for case .restore(let id, let snapshot) in steps {
      if case .logged = snapshot.text { loggedTexts.insert(id) }
    }
  }
}

/// One thing to put back.
enum UndoStep: Sendable {
  /// Give the note (or, if it was deleted since, the note undo made in its place) these
  /// fields again; a complete snapshot makes a new note if there is none.
  case restore(NoteID, NoteSnapshot)
  /// Delete the note: the group created it.
  case delete(NoteID)
  /// Give the tag this display name again.
  case rename(TagID, String)

  var blobs: [BlobHash] {
    guard case .restore(_, let snapshot) = self, snapshot.fields.contains(.attachments) else {
      return []
    }
    return snapshot.attachments.map(\.blobHash)
  }
}

/// The fields of a note a snapshot puts back.
struct SnapshotFields: OptionSet, Sendable {
  let rawValue: UInt8
  static let text = SnapshotFields(rawValue: 1)
  static let archived = SnapshotFields(rawValue: 2)
  static let sortDate = SnapshotFields(rawValue: 4)
  static let tags = SnapshotFields(rawValue: 8)
  static let attachments = SnapshotFields(rawValue: 16)
  /// Every field: what it takes to make the note again once it is deleted.
  static let all: SnapshotFields = [.text, .archived, .sortDate, .tags, .attachments]
}

/// A note's previous text, as a snapshot holds it.
enum SnapshotText: Sendable, Equatable {
  case value(String)
  /// The `textSet` event that set it, still in the log: read when undo needs it. Texts are
  /// held so while retention keeps replaced values for a day or more, and read before a local
  /// deletion erases them.
  case logged(sequence: UInt64, stamp: Stamp)
  /// Erased (by a deletion elsewhere or by retention) before undo could read it.
  case erased
}

/// The fields of a note that undo puts back: those its group changed.
struct NoteSnapshot: Sendable {
  var fields: SnapshotFields
  var creationDate: Date
  var text = SnapshotText.value("")
  /// The note's conflicting texts (``Note/conflicts``), by value: undo brings back those a
  /// resolution replaced, and resolves those that came since.
  var conflicts: [String] = []
  var archived = false
  var sortDate: Date?
  var tags: [String] = []
  var attachments: [Attachment] = []
}

extension NoteStore {
  /// Whether there is a change group of this process to undo.
  public var canUndo: Bool { undoHistory.canUndo }

  /// Whether there is an undone change group to redo.
  public var canRedo: Bool { undoHistory.canRedo }

  /// Undoes the last user change group of this process (see ``write(_:)-7uv98``): a new change that
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
    var edits = Edits(dependencies: dependencies)
    for step in group.steps {
      switch step {
      case .restore(let id, let snapshot): edits.intents.append(.restore(id, snapshot))
      case .delete(let id): edits.intents.append(.deleteNoteIfVisible(id))
      case .rename(let tag, let name): edits.intents.append(.restoreTagName(tag, name))
      }
    }
    return try apply(edits)
  }
}

extension WriteSession {
  /// What puts back the notes and tags `intents` change, read before they are made: for each
  /// note, the fields the intents set (every field for a note they delete).
  mutating func undoGroup(
    for intents: [Edits.Intent], history: UndoHistory,
    in transaction: borrowing WriteTransaction
  ) throws -> UndoGroup {
    var order: [NoteID] = []
    var fields: [NoteID: SnapshotFields] = [:]
    var deleted = Set<NoteID>()
    var tagSteps: [UndoStep] = []
    func note(_ id: NoteID, _ set: SnapshotFields) {
      if fields[id] == nil { order.append(id) }
      fields[id, default: []].formUnion(set)
    }
    for intent in intents {
      switch intent {
      case .createNote(let id, _, _, _, _, _): note(id, .all)
      case .deleteNote(let id), .deleteNoteIfVisible(let id):
        note(id, .all)
        deleted.insert(id)
      case .restore(let id, let snapshot):
        note(try restoreTarget(id, in: transaction) ?? id, snapshot.fields)
      case .setText(let id, _, _), .restoreVersion(let id, _): note(id, .text)
      case .setArchived(let id, _): note(id, .archived)
      case .setSortDate(let id, _): note(id, .sortDate)
      case .setTags(let id, _): note(id, .tags)
      case .setAttachments(let id, _): note(id, .attachments)
      case .addAttachment(let attachment, _): note(attachment.noteID, .attachments)
      case .deleteAttachment(let id):
        if let record = try projector.attachmentRecord(id, in: transaction) {
          note(record.attachment.noteID, .attachments)
        }
      case .renameTag(let name):
        let tag = TagID(name: name)
        if let record = try projector.tag(tag, in: transaction), record.noteCount > 0 {
          tagSteps.append(.rename(tag, record.name))
        }
      case .restoreTagName(let tag, _):
        if let record = try projector.tag(tag, in: transaction), record.noteCount > 0 {
          tagSteps.append(.rename(tag, record.name))
        }
      case .deleteTag(let name):
        try transaction.forEach(
          in: schema.tagNotes, range: .prefix(Keys.tagPrefix(TagID(name: name)))
        ) { key, _ in
          note(NoteID(try Identifier.ending(key, length: nil, in: "tagNotes")), .tags)
        }
      }
    }
    // Texts held by reference for notes about to be erased are read now.
    let log = schema.eventLog
    try history.materializeTexts(of: deleted) { sequence, stamp in
      try log.textIfPresent(at: sequence, stamp: stamp, in: transaction)
    }
    var steps: [UndoStep] = []
    for id in order {
      switch try projector.status(of: id, in: transaction) {
      case .absent: steps.append(.delete(id))
      case .deleted: break
      case .visible:
        if let snapshot = try snapshot(
          of: id, fields: fields[id] ?? .all, textByValue: deleted.contains(id),
          in: transaction)
        {
          steps.append(.restore(id, snapshot))
        }
      }
    }
    return UndoGroup(steps: steps + tagSteps)
  }

  /// The note's `fields`, its text by reference unless `textByValue` or retention erases
  /// replaced values within a day.
  private mutating func snapshot(
    of id: NoteID, fields: SnapshotFields, textByValue: Bool,
    in transaction: borrowing WriteTransaction
  ) throws -> NoteSnapshot? {
    guard let record = try projector.note(id, in: transaction), record.isCreated else {
      return nil
    }
    var snapshot = NoteSnapshot(
      fields: fields, creationDate: Date(milliseconds: record.creationDate))
    if fields.contains(.text) {
      if record.textSequence == 0 {
        snapshot.text = .value("")
      } else if textByValue || retention.map({ $0 < .seconds(86_400) }) ?? false {
        snapshot.text = .value(try text(of: record, in: transaction))
      } else {
        snapshot.text = .logged(sequence: record.textSequence, stamp: record.textStamp)
      }
      for version in record.texts.conflicts(showing: record.textStamp) {
        if let text = try schema.eventLog.textIfPresent(
          at: version.sequence, stamp: version.stamp, in: transaction)
        {
          snapshot.conflicts.append(text)
        }
      }
    }
    snapshot.archived = record.archived
    snapshot.sortDate =
      record.sortDateStamp == .zero ? nil : Date(milliseconds: record.sortDate)
    snapshot.tags = record.tags
    if fields.contains(.attachments) {
      for attachment in try schema.attachmentIDs(
        of: id, record, merge: projector.merge, in: transaction)
      {
        if let stored = try projector.attachmentRecord(attachment, in: transaction),
          !stored.isErased
        {
          snapshot.attachments.append(stored.attachment)
        }
      }
    }
    return snapshot
  }

  /// The visible note undo steps naming `id` go to: `id` itself, or the note undo made in its
  /// place after it was deleted (following such replacements); nil if there is none.
  mutating func restoreTarget(
    _ id: NoteID, in transaction: borrowing WriteTransaction
  ) throws -> NoteID? {
    var id = id
    var seen = Set<NoteID>()
    while seen.insert(id).inserted {
      if try projector.status(of: id, in: transaction) == .visible { return id }
      guard let next = replacements[id] else { return nil }
      id = next
    }
    return nil
  }

  /// Gives a note its snapshot's fields back: in place if it (or the note undo made in its
  /// place) is visible; if it was deleted, a complete snapshot comes back as a new note (with
  /// new attachments holding the same bytes) and a partial one has nothing to go back to.
  mutating func restore(
    _ id: NoteID, _ snapshot: NoteSnapshot, makeIdentifier: () -> Identifier,
    wall now: Milliseconds, in transaction: borrowing WriteTransaction
  ) throws {
    let fields = snapshot.fields
    let target: NoteID
    var current: NoteRecord
    var text: String?
    if let found = try restoreTarget(id, in: transaction),
      let record = try projector.note(found, in: transaction)
    {
      target = found
      current = record
      if fields.contains(.text) {
        switch snapshot.text {
        case .logged(_, let stamp) where stamp == record.textStamp: break
        case .logged(let sequence, let stamp):
          text = try schema.eventLog.textIfPresent(at: sequence, stamp: stamp, in: transaction)
        case .value(let value): text = value
        case .erased: break
        }
      }
    } else {
      guard fields == .all else { return }
      switch snapshot.text {
      case .value(let value): text = value
      case .logged(let sequence, let stamp):
        text = try schema.eventLog.textIfPresent(at: sequence, stamp: stamp, in: transaction)
      case .erased: break
      }
      target = NoteID(makeIdentifier())
      recreated.append(target)
      replaced.append((id, target))
      try resolve(
        .createNote(
          target, creationDate: snapshot.creationDate, text: text ?? "",
          archived: snapshot.archived, sortDate: snapshot.sortDate, tags: snapshot.tags),
        wall: now, in: transaction)
      current = try projector.note(target, in: transaction) ?? NoteRecord()
    }
    try restoreText(
      text, conflicts: fields.contains(.text) ? snapshot.conflicts : nil,
      of: target, current, wall: now, in: transaction)
    if fields.contains(.archived), current.archived != snapshot.archived {
      try resolve(.setArchived(target, snapshot.archived), wall: now, in: transaction)
    }
    if fields.contains(.sortDate), let sortDate = snapshot.sortDate,
      current.sortDate != sortDate.milliseconds
    {
      try resolve(.setSortDate(target, sortDate), wall: now, in: transaction)
    }
    if fields.contains(.tags), current.tags != snapshot.tags {
      try resolve(.setTags(target, snapshot.tags), wall: now, in: transaction)
    }
    guard fields.contains(.attachments) else { return }
    // Attachments: those still there keep their ids; deleted ones come back as new ones with
    // the same bytes; ones the group added are deleted.
    var order: [AttachmentID] = []
    for attachment in snapshot.attachments {
      let live = try projector.attachmentRecord(attachment.id, in: transaction)
      if let live, !live.isErased, live.attachment.noteID == target,
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
      try resolve(.addAttachment(copy, bytes: bytes), wall: now, in: transaction)
      order.append(copy.id)
    }
    current = try projector.note(target, in: transaction) ?? current
    for attachment in try schema.attachmentIDs(
      of: target, current, merge: projector.merge, in: transaction)
    where !order.contains(attachment) {
      try resolve(.deleteAttachment(attachment), wall: now, in: transaction)
    }
    current = try projector.note(target, in: transaction) ?? current
    if try schema.attachmentIDs(of: target, current, merge: projector.merge, in: transaction)
      != order
    {
      try resolve(.setAttachments(target, order), wall: now, in: transaction)
    }
  }
}

extension WriteSession {
  /// Gives a note back its text (if not nil) and its conflicts (if not nil): conflicts the note
  /// lost come back as texts that replace the one it shows, written before the shown text so
  /// that it stays the newest; conflicts it did not have are resolved by the shown text.
  fileprivate mutating func restoreText(
    _ text: String?, conflicts: [String]?, of target: NoteID, _ current: NoteRecord,
    wall now: Milliseconds, in transaction: borrowing WriteTransaction
  ) throws {
    var lost = conflicts ?? []
    var resolved: [Stamp] = []
    if conflicts != nil {
      for version in current.texts.conflicts(showing: current.textStamp) {
        let existing = try schema.eventLog.textIfPresent(
          at: version.sequence, stamp: version.stamp, in: transaction)
        if let existing, let index = lost.firstIndex(of: existing) {
          lost.remove(at: index)
        } else {
          resolved.append(version.stamp)
        }
      }
    }
    let shown = try self.text(of: current, in: transaction)
    guard lost.isEmpty, resolved.isEmpty else {
      let base = current.replacedTexts(resolving: [])
      for conflict in lost.prefix(Limits.replacedTexts) {
        try record(
          .textSet(target, text: conflict, replacing: base), wall: now,
          in: transaction)
      }
      let resolving = current.replacedTexts(
        resolving: Array(resolved.prefix(Limits.replacedTexts - base.count)))
      try record(
        .textSet(target, text: text ?? shown, replacing: resolving), wall: now,
        in: transaction)
      return
    }
    if let text, shown != text {
      try resolve(.setText(target, text), wall: now, in: transaction)
    }
  }

  /// A note's text, read from the log where its record says it is (appended in this
  /// transaction or before).
  func text(of record: NoteRecord, in transaction: borrowing WriteTransaction) throws -> String {
    guard record.textSequence != 0 else { return "" }
    return try schema.eventLog.text(
      at: record.textSequence, stamp: record.textStamp, in: transaction)
  }
}
