internal import Foundation
internal import LMDB

extension NoteStore {
  /// Makes user changes in one durable transaction: all of them or, if any is invalid, none.
  ///
  /// `body` runs once, before the transaction, and records the changes; the store then checks
  /// each against the current state, stamps it with this replica's clock, appends it to the log
  /// and the outbox, and updates the projections, then tells observers.
  ///
  /// ```swift
  /// let id = try store.write { edits in
  ///   let id = edits.createNote(text: "Trip")
  ///   edits.setTags(["Paris", "Travel"], of: id)
  ///   return id
  /// }
  /// ```
  ///
  /// This overload runs the transaction on the caller's thread; from async code, the `async`
  /// overload runs it on the store's writer queue.
  ///
  /// - Parameter body: Records changes; its result is returned.
  /// - Returns: What `body` returns.
  /// - Throws: ``VLogError`` naming the first invalid change (nothing is committed), or what
  ///   `body` throws.
  @discardableResult
  public func write<R>(_ body: (inout Edits) throws -> R) throws -> R {
    var edits = Edits(dependencies: dependencies)
    let result = try body(&edits)
    guard !edits.isEmpty else { return result }
    let recorded = try VLogError.wrapping {
      try environment.write { transaction in try record(edits, in: transaction) }
    }
    committed(recorded, undoable: true)
    return result
  }

  /// Makes user changes in one durable transaction, on the store's writer queue.
  ///
  /// Writes that arrive while another commits share the next commit (and its sync to disk),
  /// each in a transaction of its own nested in it: one that is invalid fails alone. Each
  /// returns once its changes are durable, observers told in the order the writes committed.
  ///
  /// See ``write(_:)-7uv98``.
  @discardableResult
  public func write<R: Sendable>(_ body: (inout Edits) throws -> R) async throws -> R {
    var edits = Edits(dependencies: dependencies)
    let result = try body(&edits)
    let collected = edits
    guard !collected.isEmpty else { return result }
    try await VLogError.wrapping {
      _ = try await commits.write(
        { transaction in try self.record(collected, in: transaction) },
        afterCommit: { self.committed($0, undoable: true) })
    }
    return result
  }

  /// Makes the changes in one transaction, as undo and redo do: without recording them to be
  /// undone.
  ///
  /// - Returns: What undoes them.
  func apply(_ edits: Edits) throws -> UndoGroup {
    guard !edits.isEmpty else { return UndoGroup(steps: []) }
    let recorded = try VLogError.wrapping {
      try environment.write { transaction in try record(edits, in: transaction) }
    }
    committed(recorded, undoable: false)
    return recorded.undo
  }

  /// What a transaction of user changes recorded: what observers are told, what undoes the
  /// changes, and the deleted notes undo made new ones for.
  struct Recorded: Sendable {
    let changes: ChangeSet
    let undo: UndoGroup
    let replaced: [(NoteID, NoteID)]
    /// What bringing lagging projections up to date changed first (events from elsewhere).
    var caughtUp: ChangeSet? = nil
  }

  /// Resolves, stamps and appends the changes in `transaction`, and applies them to the
  /// projections.
  func record(_ edits: Edits, in transaction: borrowing WriteTransaction) throws -> Recorded {
    let wall = stampingTime()
    var session = try WriteSession(store: self, in: transaction)
    session.replacements = undoHistory.replacements
    var group =
      undoHistory.limit > 0
      ? try session.undoGroup(for: edits.intents, history: undoHistory, in: transaction)
      : UndoGroup(steps: [])
    for intent in edits.intents {
      try session.resolve(intent, wall: wall, in: transaction)
    }
    group.steps += session.recreated.map(UndoStep.delete)
    return Recorded(
      changes: try session.finish(source: .user, in: transaction), undo: group,
      replaced: session.replaced, caughtUp: session.caughtUpChangeSet)
  }

  /// What follows a commit of user changes, in the order of the commits: undo learns of the
  /// notes it replaced (and, when `undoable`, of what undoes the changes), observers of what
  /// changed.
  func committed(_ recorded: Recorded, undoable: Bool) {
    undoHistory.replaced(recorded.replaced)
    if undoable { undoHistory.recorded(recorded.undo) }
    if let caughtUp = recorded.caughtUp { observers.publish(caughtUp) }
    observers.publish(recorded.changes)
  }
}

/// One write transaction's work: the event log's appender and the projector, so that every
/// event appended is applied to the projections in the same transaction — or, for a deferred
/// ingest, left for the next session that projects (``ProjectionLag``).
///
/// A session that projects first brings projections that lag the log up to date, so that what
/// it resolves and applies builds on every event of the log.
struct WriteSession {
  let schema: Schema
  let replicaID: ReplicaID
  var log: EventLog.Appender
  var projector: Projector
  let retention: Duration?
  let now: @Sendable () -> Date
  let makeIdentifier: @Sendable () -> Identifier
  /// Notes made by undo in place of deleted ones: what undoes that is their deletion.
  var recreated: [NoteID] = []
  /// The deleted notes undo made new ones for, with the new ones.
  var replaced: [(NoteID, NoteID)] = []
  /// Earlier replacements of that kind (see ``UndoHistory/replacements``).
  var replacements: [NoteID: NoteID] = [:]
  /// Whether this session applies what it appends to the projections.
  let projects: Bool
  /// The last event the projections included when the session began; nil if every event.
  private let projectedThrough: UInt64?
  /// The last event of the log when the session began.
  private let initialLastSequence: UInt64
  /// Events of the log's tail that this session projected before its own.
  private(set) var caughtUp = 0
  /// What projecting them changed: events from elsewhere, which observers are told of apart
  /// from the session's own changes.
  private(set) var caughtUpChanges = ChangeSet.Builder()

  /// Begins a session; one that projects replays the events the projections lag by first.
  ///
  /// - Parameter projecting: false to append without projecting (a deferred ingest); the
  ///   session projects anyway once the projections lag by the store's
  ///   ``NoteStore/Options/projectionLagLimit``.
  init(
    store: NoteStore, projecting: Bool = true, in transaction: borrowing WriteTransaction
  ) throws {
    schema = store.schema
    replicaID = try store.replica(in: transaction)
    retention = store.retention
    now = store.dependencies.now
    makeIdentifier = store.dependencies.makeIdentifier
    log = try store.eventLog.appender(in: transaction)
    log.clockLimit = store.clockLimit()
    projector = Projector(schema: schema, merge: store.merge)
    projector.tracksReplacements = true
    let last = log.state.lastSequence
    let through = try ProjectionLag.projectedThrough(schema: store.schema, in: transaction)
    initialLastSequence = last
    projectedThrough = through
    let limit = store.projectionLagLimit
    projects = projecting || through.map { last &- $0 >= limit } ?? false
    if projects, let projectedThrough {
      try catchUp(after: projectedThrough, in: transaction)
    }
  }

  /// Applies the log's events after `sequence` to the projections and writes them out, so
  /// that reads in this transaction find them in the databases as well as in the overlay.
  private mutating func catchUp(
    after sequence: UInt64, in transaction: borrowing WriteTransaction
  ) throws {
    caughtUp = try projector.replay(after: sequence, log: &log, in: transaction)
    caughtUpChanges = projector.takeChanges()
  }

  /// What bringing the projections up to date changed, as observers see it; nil if they did
  /// not lag.
  var caughtUpChangeSet: ChangeSet? {
    caughtUp > 0 ? caughtUpChanges.build(source: .sync, eventCount: caughtUp) : nil
  }

  /// Writes the projector's overlay, redacts the replaced changes whose retention has passed,
  /// writes the log's state, and returns what changed: with `includingCaughtUp`, what bringing
  /// the projections up to date changed too (else ``caughtUpChangeSet`` tells it apart).
  mutating func finish(
    source: ChangeSet.Source, includingCaughtUp: Bool = false,
    in transaction: borrowing WriteTransaction
  ) throws -> ChangeSet {
    try projector.flush(in: transaction)
    log.enqueueReplaced(projector.takeReplaced())
    try log.applyRetention(retention, now: Milliseconds(now()), in: transaction)
    log.countUnknownEvents(projector.unknownEvents)
    try log.commit(in: transaction)
    // The log releases blobs as it finishes its batch, in `commit`.
    try NoteStore.recordReleasedBlobs(log.releasedBlobs, schema: schema, in: transaction)
    if projects {
      if projectedThrough != nil { try ProjectionLag.clear(schema: schema, in: transaction) }
    } else if projectedThrough == nil && log.appended > 0 {
      try ProjectionLag.record(initialLastSequence, schema: schema, in: transaction)
    }
    guard includingCaughtUp else {
      return projector.changes.build(source: source, eventCount: log.appended)
    }
    var changes = caughtUpChanges
    changes.formUnion(projector.changes)
    return changes.build(source: source, eventCount: log.appended + caughtUp)
  }

  // MARK: Appending

  /// Appends an event to the log (counting it in the outbox if local) and applies it as
  /// stored: redacted, if it changes a deleted object.
  ///
  /// A local event's note is pending until the server stores it (``PendingNotes``).
  mutating func append(
    _ event: Event, local: Bool, in transaction: borrowing WriteTransaction
  ) throws {
    // Before the change applies: an attachment's deletion removes the record naming its note.
    let note =
      local ? try PendingNotes.note(of: event.change, schema: schema, in: transaction) : nil
    let stored = try log.append(event, local: local, in: transaction)
    if projects { try projector.apply(stored.event, at: stored.sequence, in: transaction) }
    if let note {
      try PendingNotes.record(note, at: stored.sequence, schema: schema, in: transaction)
    }
  }

  /// Stamps and appends a local change.
  mutating func record(
    _ change: Change, wall: Milliseconds, in transaction: borrowing WriteTransaction
  ) throws {
    try Validation.check(change)
    let stamp = try log.stamp(wallMilliseconds: wall.rawValue, replica: replicaID)
    try append(Event(stamp: stamp, change: change), local: true, in: transaction)
  }

  // MARK: Resolving user changes

  mutating func resolve(
    _ intent: Edits.Intent, wall now: Milliseconds,
    in transaction: borrowing WriteTransaction
  ) throws {
    switch intent {
    case .createNote(let id, let creationDate, let text, let archived, let sortDate, let tags):
      try record(
        .noteCreated(id, creationDate: creationDate), wall: now, in: transaction)
      if !text.isEmpty {
        try record(
          .textSet(id, text: text, replacing: []), wall: now, in: transaction)
      }
      if archived {
        try record(.archivedSet(id, archived: true), wall: now, in: transaction)
      }
      if let sortDate {
        try record(.sortDateSet(id, sortDate: sortDate), wall: now, in: transaction)
      }
      if !tags.isEmpty {
        for tag in tags { try Validation.checkTagName(tag) }
        try record(
          .tagsSet(id, tags: Validation.uniqueTags(tags)), wall: now, in: transaction)
      }
    case .setText(let id, let text, let resolving):
      let note = try existingNote(id, in: transaction)
      try record(
        .textSet(id, text: text, replacing: note.replacedTexts(resolving: resolving)),
        wall: now, in: transaction)
    case .restoreVersion(let id, let version):
      let note = try existingNote(id, in: transaction)
      let text = try versionText(version, of: id, in: transaction)
      let conflicts = note.texts.conflicts(showing: note.textStamp).map(\.stamp)
      try record(
        .textSet(
          id, text: text,
          replacing: note.replacedTexts(
            resolving: Array(conflicts.prefix(Limits.replacedTexts - 1)))),
        wall: now, in: transaction)
    case .setArchived(let id, let archived):
      try requireNote(id, in: transaction)
      try record(.archivedSet(id, archived: archived), wall: now, in: transaction)
    case .setSortDate(let id, let date):
      try requireNote(id, in: transaction)
      try record(.sortDateSet(id, sortDate: date), wall: now, in: transaction)
    case .setTags(let id, let tags):
      let note = try existingNote(id, in: transaction)
      for tag in tags { try Validation.checkTagName(tag) }
      // A tag named twice, in any spelling, is one tag: the limit counts tags, not names.
      let unique = Validation.uniqueTags(tags)
      guard unique.count <= Limits.tagsPerNote else {
        throw VLogError(
          .valueTooLarge,
          "note \(id): \(unique.count) tags; the limit is \(Limits.tagsPerNote)")
      }
      for change in Self.tagChanges(of: id, from: note.tags, to: unique) {
        try record(change, wall: now, in: transaction)
      }
    case .setAttachments(let id, let attachments):
      try requireNote(id, in: transaction)
      for attachment in attachments {
        let owner = try existingAttachment(attachment, in: transaction).noteID
        guard owner == id else {
          throw VLogError(
            .invalidValue, "attachment \(attachment) belongs to note \(owner), not to note \(id)")
        }
      }
      guard Set(attachments).count == attachments.count else {
        throw VLogError(.invalidValue, "note \(id): the attachments list names one twice")
      }
      try record(
        .attachmentsSet(id, attachments: attachments), wall: now, in: transaction)
    case .deleteNote(let id):
      try requireNote(id, in: transaction)
      try record(.noteDeleted(id), wall: now, in: transaction)
    case .addAttachment(let attachment, let bytes):
      // The add alone puts the attachment on its note, after the attachments there: no list
      // is set, so an attachment another device adds meanwhile stays too.
      _ = try existingNote(attachment.noteID, in: transaction)
      try Validation.check(.attachmentAdded(attachment))
      try storeBlob(bytes, hash: attachment.blobHash, in: transaction)
      try record(.attachmentAdded(attachment), wall: now, in: transaction)
    case .deleteAttachment(let id):
      // The deletion alone takes it off its note, for good.
      _ = try existingAttachment(id, in: transaction)
      try record(.attachmentDeleted(id), wall: now, in: transaction)
    case .renameTag(let name):
      try Validation.checkTagName(name)
      // Tag counts and the tag index are derived at flush: bring them up to date with the
      // earlier changes of this batch before checking.
      try projector.flush(in: transaction)
      let id = TagID(name: name)
      guard let tag = try projector.tag(id, in: transaction), tag.noteCount > 0 else {
        throw VLogError(.tagNotFound, "no note uses a tag named \(String(reflecting: name))")
      }
      try record(.tagRenamed(name: TagName.clean(name)), wall: now, in: transaction)
    case .deleteTag(let name):
      try projector.flush(in: transaction)
      let id = TagID(name: name)
      var notes: [NoteID] = []
      try transaction.forEach(in: schema.tagNotes, range: .prefix(Keys.tagPrefix(id))) { key, _ in
        notes.append(NoteID(try Identifier.ending(key, length: nil, in: "tagNotes")))
      }
      guard !notes.isEmpty else {
        throw VLogError(.tagNotFound, "no note uses a tag named \(String(reflecting: name))")
      }
      // By key alone: every note loses it as of now, and no log keeps its name.
      try record(.tagErased(TagKey(id)), wall: now, in: transaction)
    case .restore(let id, let snapshot):
      try restore(
        id, snapshot, makeIdentifier: makeIdentifier, wall: now, in: transaction)
    case .deleteNoteIfVisible(let id):
      if try projector.status(of: id, in: transaction) == .visible {
        try record(.noteDeleted(id), wall: now, in: transaction)
      }
    case .restoreTagName(let tag, let name):
      try projector.flush(in: transaction)
      if let current = try projector.tag(tag, in: transaction), current.noteCount > 0,
        current.name != name
      {
        try record(.tagRenamed(name: name), wall: now, in: transaction)
      }
    }
  }

  /// The changes that take a note's tags from `old` to `new` (cleaned, each tag once): a change
  /// per tag added or removed, so that tags another device adds or removes meanwhile stay
  /// as it left them — or, when the tags kept change order or spelling, or a tag added
  /// comes before one kept, the whole list. None if nothing changes.
  static func tagChanges(of note: NoteID, from old: [String], to new: [String]) -> [Change] {
    let oldIDs = old.map(TagID.init(name:))
    let newIDs = new.map(TagID.init(name:))
    let keptOld = zip(old, oldIDs).filter { newIDs.contains($0.1) }.map(\.0)
    let keptNew = zip(new, newIDs).filter { oldIDs.contains($0.1) }.map(\.0)
    let added = zip(new, newIDs).filter { !oldIDs.contains($0.1) }.map(\.0)
    guard keptOld.map(TagName.clean) == keptNew, new == keptNew + added else {
      return [.tagsSet(note, tags: new)]
    }
    let removed = zip(old, oldIDs).filter { !newIDs.contains($0.1) }
    return removed.map { Change.tagRemoved(note, tag: TagKey($0.1)) }
      + added.map { Change.tagAdded(note, name: $0) }
  }

  /// Throws unless the note exists and is not deleted.
  private mutating func requireNote(
    _ id: NoteID, in transaction: borrowing WriteTransaction
  ) throws {
    switch try projector.status(of: id, in: transaction) {
    case .visible: return
    case .deleted: throw VLogError(.noteDeleted, "note \(id) was deleted; deletes are final")
    case .absent: throw VLogError(.noteNotFound, "there is no note \(id)")
    }
  }

  /// The text of the version `stamp` of a note, read from the log.
  ///
  /// - Throws: ``VLogError`` `versionNotFound` if the log holds no such text of the note, or
  ///   holds it erased.
  private func versionText(
    _ stamp: Stamp, of id: NoteID, in transaction: borrowing WriteTransaction
  ) throws -> String {
    guard let logged = try log.log.event(withID: stamp, in: transaction),
      case .textSet(let note, let text, _) = logged.event.change, note == id
    else {
      throw VLogError(.versionNotFound, "note \(id) has no version \(stamp)")
    }
    guard !logged.event.isRedacted else {
      throw VLogError(
        .versionNotFound,
        "version \(stamp) of note \(id) was erased: the retention period passed since a later "
          + "change replaced it")
    }
    return text
  }

  private mutating func existingNote(
    _ id: NoteID, in transaction: borrowing WriteTransaction
  ) throws -> NoteRecord {
    if try projector.isDeleted(id, in: transaction) {
      throw VLogError(.noteDeleted, "note \(id) was deleted; deletes are final")
    }
    guard let note = try projector.note(id, in: transaction), note.isCreated else {
      throw VLogError(.noteNotFound, "there is no note \(id)")
    }
    return note
  }

  private func existingAttachment(
    _ id: AttachmentID, in transaction: borrowing WriteTransaction
  ) throws -> Attachment {
    if let record = try projector.attachmentRecord(id, in: transaction) {
      guard
        try !transaction.containsValue(
          forKey: record.attachment.noteID.identifier.bytes, in: schema.tombstones)
      else {
        throw VLogError(
          .attachmentDeleted,
          "attachment \(id) belonged to note \(record.attachment.noteID), "
            + "which was deleted")
      }
      return record.attachment
    }
    if try transaction.containsValue(forKey: id.identifier.bytes, in: schema.tombstones) {
      throw VLogError(.attachmentDeleted, "attachment \(id) was deleted; deletes are final")
    }
    throw VLogError(.attachmentNotFound, "there is no attachment \(id)")
  }

  func storeBlob(
    _ bytes: [UInt8], hash: BlobHash, in transaction: borrowing WriteTransaction
  ) throws {
    guard try !transaction.containsValue(forKey: hash.bytes, in: schema.blobs) else { return }
    try transaction.put(bytes, forKey: hash.bytes, in: schema.blobs)
  }
}
