/// The log's rules for one write transaction, written once for every storage: given the events
/// appended and the facts a ``LogFacts`` looks up, it decides what is stored and in what form,
/// what is redacted, what the object, blob and field indexes gain and lose, what enters and
/// leaves the retention queue, and which blobs are released. It does no I/O: the storage (a
/// store's or a server's LMDB log through ``EventLog/Appender``, an account's log on
/// PostgreSQL through the server's writer) looks the facts up and writes ``decisions``.
///
/// The rules, each stated here and nowhere else:
///
/// 1. **Deleted means gone.** An event of a deleted note or attachment is stored redacted
///    (``Event/Redaction/deleted``). A note's or attachment's first deletion marks the object
///    and redacts every other event filed under it; a note's fields are forgotten.
/// 2. **A deleted tag's name goes.** A tag deletion is stored by key (`tagErased`; an older
///    version's `tagDeleted` is stored as the `tagErased` of its name's key), and the log keeps
///    each tag's latest deletion. Every change made before it that spells the tag's name is
///    erased: renames and additions are redacted, and tags lists are stored without the tag —
///    whether they were in the log before the deletion or arrive after it. (A note loses the
///    tag as of the deletion either way; see ``Change/tagErased(_:)``.)
/// 3. **Every event is filed** under the note, attachment and tags it changes, and an
///    `attachmentAdded` that is not redacted references its blob; a blob that loses its last
///    reference is released.
/// 4. **Bounded history.** Each note field's newest change is kept; the change it replaces
///    enters the retention queue with the replacing change's time, and once the retention
///    period has passed since then, it is redacted (``Event/Redaction/superseded``) if a newer
///    change still replaces it. Replacement is decided by stamps alone, so every replica
///    decides the same for the same events. A text change that names the texts it replaced
///    replaces those alone: a text it does not name may be a conflict (``TextVersions``), and
///    is never queued here; nor is a text that arrives older than the newest.
///
/// In a transaction: the appends (each decided at once), then — at ``applyRetention(_:now:stored:facts:)``
/// or ``finish(facts:)`` — the erasure the appended deletions call for, retention, the tags
/// changes rule 2 left to check, and the release of blobs.
///
/// Every method looks up what it needs before it changes anything it cannot redo, so a
/// ``LogFacts`` that throws ``MissingLogFacts`` may read what is missing and call again:
/// ``append(_:facts:)`` at once, the others on a copy of the batch taken before the call.
package struct LogBatch: Sendable {
  /// The sequence number the next appended event gets.
  package private(set) var nextSequence: UInt64
  /// Whether the batch keeps each note field's newest change and queues the changes they
  /// replace (rule 4); false when the log's owner does (a store's projections).
  package let tracksFields: Bool
  /// What the batch decided that the storage has not written yet. The storage writes what it
  /// takes from here and removes it; ``LogFacts`` answers include what was removed.
  package var decisions = LogDecisions()
  /// Events redacted so far.
  package private(set) var redactedCount = 0
  /// The rules followed: ``LogRules/standard`` but in tests.
  package let rules: LogRules
  /// Whether appended events stay in ``LogDecisions/appended`` until the storage takes them;
  /// false for a storage that writes each at once (and then answers for it as a fact).
  package let keepsAppended: Bool

  /// Facts looked up, with this batch's decisions: whether each object is deleted, each tag
  /// object's latest deletion, each note field's newest change.
  private var deleted: [Identifier: Bool] = [:]
  private var tagDeletions: [Identifier: Stamp?] = [:]
  private var newest: [FieldKey: FieldChange?] = [:]
  /// Stored events read, as they were read.
  private var loaded: [UInt64: Event] = [:]
  /// Objects whose first deletion this batch appended, and tags it deleted: erased at the next
  /// ``applyRetention(_:now:stored:facts:)`` or ``finish(facts:)``.
  private var pendingErasures: [(object: Identifier, isNote: Bool)] = []
  private var pendingTagErasures: [Identifier] = []
  /// Blobs that lost a reference.
  private var releaseCandidates: Set<BlobHash> = []

  /// A batch appending after `lastSequence`.
  package init(
    lastSequence: UInt64, tracksFields: Bool, keepsAppended: Bool = true,
    rules: LogRules = .standard
  ) {
    nextSequence = lastSequence + 1
    self.tracksFields = tracksFields
    self.keepsAppended = keepsAppended
    self.rules = rules
  }

  // MARK: - Appending

  /// Appends an event the log does not hold: decides its stored form (rule 1) and its
  /// sequence number, files it (rule 3), records what a deletion deletes, and keeps the
  /// newest change of its field (rule 4).
  ///
  /// - Returns: The event as stored, with its sequence number (also in ``decisions``).
  /// - Throws: What `facts` throws, before anything changed.
  package mutating func append(_ event: Event, facts: inout some LogFacts) throws -> LoggedEvent {
    let tags = event.change.tagObjectIDs
    let stored = try storedForm(of: event, tags: tags, facts: &facts)
    if stored.isRedacted, !event.isRedacted, case .attachmentAdded(let attachment) = event.change {
      decisions.erasedAttachments.append(attachment.id.identifier)
    }
    try lookUpIndexFacts(of: stored, facts: &facts)
    let logged = LoggedEvent(sequence: nextSequence, event: stored)
    nextSequence += 1
    if keepsAppended { decisions.appended.append(logged) }
    try index(logged, tags: stored == event ? tags : nil, facts: &facts)
    return logged
  }

  /// What appending `events` looks up, for a storage that reads facts in batches to read
  /// before the appends: the deletion markers of the objects and tags they name, and the
  /// newest changes of the fields they set.
  package func factsToAppend(_ events: [Event]) -> MissingLogFacts {
    var needed = MissingLogFacts()
    for event in events {
      let (first, second) = event.change.objects
      if let first { needed.deletions.insert(first) }
      if let second { needed.deletions.insert(second) }
      if let tag = event.change.deletedTag { needed.deletions.insert(tag.identifier) }
      for tag in event.change.tagObjectIDs { needed.deletions.insert(tag) }
      if tracksFields, let key = event.change.fieldKey { needed.fields.insert(key) }
    }
    needed.deletions = needed.deletions.filter { deleted[$0] == nil && tagDeletions[$0] == nil }
    needed.fields = needed.fields.filter { newest[$0] == nil }
    return needed
  }

  /// Files a stored event as ``append(_:facts:)`` files an appended one: for a log whose
  /// indexes are being built from its events.
  package mutating func index(_ logged: LoggedEvent, facts: inout some LogFacts) throws {
    try index(logged, tags: nil, facts: &facts)
  }

  /// ``index(_:facts:)``, given the tags the event names if they are known already.
  private mutating func index(
    _ logged: LoggedEvent, tags: [Identifier]?, facts: inout some LogFacts
  ) throws {
    let event = logged.event
    let sequence = logged.sequence
    let (first, second) = event.change.objects
    if let first { decisions.objects.append((first, sequence)) }
    if let second { decisions.objects.append((second, sequence)) }
    for object in tags ?? event.change.tagObjectIDs { decisions.objects.append((object, sequence)) }
    if let hash = event.referencedBlob {
      decisions.addedReferences[hash, default: []].insert(sequence)
    }
    if let tag = event.change.deletedTag {
      try recordDeletion(of: tag.identifier, at: event.stamp, facts: &facts)
    }
    if let object = event.change.deletedObject, try !isDeleted(object, facts: &facts) {
      decisions.deletions.append((object, sequence))
      deleted[object] = true
      pendingErasures.append((object, event.change.kind == .noteDeleted))
    }
    try trackReplacement(of: event, at: sequence, facts: &facts)
  }

  /// Files a stored tag deletion again, as a log written before rule 2 took names out needs:
  /// a deletion by name is stored by key, and what the tag's latest deletion erases is erased
  /// at ``finish(facts:)``.
  package mutating func refileTagDeletion(_ logged: LoggedEvent, facts: inout some LogFacts)
    throws
  {
    guard let tag = logged.event.change.deletedTag, !logged.event.isRedacted else { return }
    if case .tagDeleted = logged.event.change {
      rewrite(
        at: logged.sequence,
        as: Event(
          stamp: logged.event.stamp, change: .tagErased(tag),
          unknownFields: logged.event.unknownFields))
    }
    try recordDeletion(of: tag.identifier, at: logged.event.stamp, facts: &facts)
  }

  /// The form in which `event` is stored: redacted if it changes a deleted note or attachment
  /// (rule 1); a tag deletion by key, redacted if it renames or adds a tag deleted after it,
  /// and a tags list without the tags deleted after it (rule 2).
  private mutating func storedForm(
    of event: Event, tags: [Identifier], facts: inout some LogFacts
  ) throws -> Event {
    guard !event.isRedacted, event.change.deletedObject == nil else { return event }
    switch event.change {
    case .tagDeleted(let name):
      return Event(
        stamp: event.stamp, change: .tagErased(TagKey(name: name)),
        unknownFields: event.unknownFields)
    case .tagRenamed, .tagAdded:
      if let tag = tags.first, let deletion = try tagDeletion(of: tag, facts: &facts),
        event.stamp < deletion
      {
        return event.redacted(.deleted)
      }
    case .tagsSet(let note, let names):
      var kept = names
      for tag in tags {
        guard let deletion = try tagDeletion(of: tag, facts: &facts), event.stamp < deletion
        else { continue }
        kept.removeAll { TagKey(name: $0).identifier == tag }
      }
      if kept.count != names.count {
        let stripped = Event(
          stamp: event.stamp, change: .tagsSet(note, tags: kept),
          unknownFields: event.unknownFields)
        return try storedForm(of: stripped, tags: stripped.change.tagObjectIDs, facts: &facts)
      }
    default: break
    }
    guard rules != .keepsLateContent else { return event }
    let (first, second) = event.change.objects
    if let first, try isDeleted(first, facts: &facts) { return event.redacted(.deleted) }
    if let second, try isDeleted(second, facts: &facts) { return event.redacted(.deleted) }
    return event
  }

  /// Looks up what filing `event` reads, so that ``index(_:facts:)`` cannot throw a missing
  /// fact after it began.
  private mutating func lookUpIndexFacts(of event: Event, facts: inout some LogFacts) throws {
    if let tag = event.change.deletedTag { _ = try tagDeletion(of: tag.identifier, facts: &facts) }
    if let object = event.change.deletedObject { _ = try isDeleted(object, facts: &facts) }
    if tracksFields, let field = event.change.field, let note = event.change.noteID {
      let newest = try newestChange(to: FieldKey(note: note, field: field), facts: &facts)
      if case .textSet(_, _, let base?) = event.change,
        base.contains(where: { $0 < event.stamp && $0 != newest?.stamp })
      {
        _ = try textSequences(of: note, facts: &facts)
      }
    }
  }

  /// The sequence numbers of a note's text changes, by stamp: where the texts a change names
  /// are (all but the newest, which the field knows, are looked up only for a change that
  /// resolves conflicts).
  private mutating func textSequences(of note: NoteID, facts: inout some LogFacts) throws
    -> [Stamp: UInt64]
  {
    let sequences = try self.sequences(of: [note.identifier], facts: &facts)[note.identifier] ?? []
    try load(sequences, facts: &facts)
    var texts: [Stamp: UInt64] = [:]
    for sequence in sequences {
      if let event = current(at: sequence), event.change.kind == .textSet {
        texts[event.stamp] = sequence
      }
    }
    return texts
  }

  /// Records a tag's deletion, if it is the latest (rule 2): erased later.
  private mutating func recordDeletion(
    of object: Identifier, at stamp: Stamp, facts: inout some LogFacts
  ) throws {
    // The same deletion again (a migration files the log's deletions again) erases again.
    if let latest = try tagDeletion(of: object, facts: &facts), latest > stamp { return }
    tagDeletions[object] = .some(stamp)
    decisions.tagDeletions[object] = stamp
    if !pendingTagErasures.contains(object) { pendingTagErasures.append(object) }
  }

  /// Keeps the newest change of a note field; queues the change it replaces (rule 4).
  private mutating func trackReplacement(
    of event: Event, at sequence: UInt64, facts: inout some LogFacts
  ) throws {
    guard tracksFields, let field = event.change.field, let note = event.change.noteID,
      event.redaction != .deleted
    else { return }
    let key = FieldKey(note: note, field: field)
    let change = FieldChange(stamp: event.stamp, sequence: sequence)
    let newest = try newestChange(to: key, facts: &facts)
    if case .textSet(_, _, let base?) = event.change {
      // It replaced what it names, and nothing else.
      if newest.map({ event.stamp > $0.stamp }) ?? true { setNewest(change, of: key) }
      let named = base.filter { ReplacedTexts.replaces(event.stamp, $0) }
      guard !named.isEmpty else { return }
      var texts: [Stamp: UInt64] = [:]
      if let newest { texts[newest.stamp] = newest.sequence }
      if named.contains(where: { texts[$0] == nil }) {
        texts.merge(try textSequences(of: note, facts: &facts)) { kept, _ in kept }
      }
      for stamp in named {
        guard let replaced = texts[stamp] else { continue }
        decisions.replaced.append(
          ReplacedChange(milliseconds: event.stamp.time.milliseconds, sequence: replaced))
      }
      return
    }
    let wins = newest.map { event.stamp > $0.stamp } ?? true
    if wins { setNewest(change, of: key) }
    // A redacted change that loses is no value to keep; a text that loses may be a conflict.
    let keepsLoser = event.isRedacted || event.change.kind == .textSet
    if let replaced = change.replacement(of: newest, wins: wins, keepsLoser: keepsLoser) {
      decisions.replaced.append(replaced)
    }
  }

  private mutating func setNewest(_ change: FieldChange, of key: FieldKey) {
    newest[key] = .some(change)
    decisions.fields[key] = change
    decisions.forgottenFields.remove(key)
  }

  /// Forgets what the batch knows of a field's newest change: after its storage found it
  /// again (restamping).
  package mutating func forgetNewestChange(of key: FieldKey) {
    newest[key] = nil
    decisions.fields[key] = nil
  }

  /// Queues replaced changes that the log's owner found (when it keeps the fields itself).
  package mutating func enqueueReplaced(_ replaced: [ReplacedChange]) {
    decisions.replaced.append(contentsOf: replaced)
  }

  // MARK: - Erasing, retention, finishing

  /// Erases what the deletions appended since the last call delete (rules 1 and 2).
  package mutating func eraseDeleted(facts: inout some LogFacts) throws {
    guard !pendingErasures.isEmpty || !pendingTagErasures.isEmpty else { return }
    let objects = pendingErasures.map(\.object) + pendingTagErasures
    let sequences = try self.sequences(of: objects, facts: &facts)
    try load(sequences.values.flatMap { $0 }, facts: &facts)
    for (object, isNote) in pendingErasures {
      if isNote { forgetFields(of: NoteID(object)) }
      for sequence in sequences[object] ?? [] {
        if isNote, let event = current(at: sequence), !event.isRedacted,
          case .attachmentAdded(let attachment) = event.change
        {
          decisions.erasedAttachments.append(attachment.id.identifier)
        }
        try redact(at: sequence, reason: .deleted)
      }
    }
    for object in pendingTagErasures {
      guard let deletion = tagDeletions[object] ?? nil else { continue }
      for sequence in sequences[object] ?? [] {
        guard let event = current(at: sequence), !event.isRedacted, event.stamp < deletion
        else { continue }
        switch event.change {
        case .tagRenamed, .tagAdded:
          try redact(at: sequence, reason: .deleted)
        case .tagsSet(let note, let names):
          let kept = names.filter { TagKey(name: $0).identifier != object }
          guard kept.count != names.count else { continue }
          rewrite(
            at: sequence,
            as: Event(
              stamp: event.stamp, change: .tagsSet(note, tags: kept),
              unknownFields: event.unknownFields))
        default: break
        }
      }
    }
    pendingErasures.removeAll()
    pendingTagErasures.removeAll()
  }

  /// Redacts the replaced changes whose retention period has passed at `now` (wall-clock
  /// milliseconds), each only if a newer change to its field is still in the log; with no
  /// retention (nil), does nothing. Erases what appended deletions delete first.
  ///
  /// - Parameter stored: The storage's queued changes that are due (``latestDueTime(retention:now:)``);
  ///   each is dequeued (``LogDecisions/dequeued``). Those this batch queued are taken from
  ///   ``decisions`` when they are due.
  /// - Returns: The number of changes redacted.
  @discardableResult
  package mutating func applyRetention(
    _ retention: Duration?, now: Milliseconds, stored: [ReplacedChange], facts: inout some LogFacts
  ) throws -> Int {
    guard let retention else { return 0 }
    try eraseDeleted(facts: &facts)
    let isDue = { (entry: ReplacedChange) in
      Self.isDue(entry.milliseconds, retention: retention, now: now)
    }
    var due = stored.filter(isDue).map { (entry: $0, stored: true) }
    due += decisions.replaced.filter(isDue).map { (entry: $0, stored: false) }
    guard !due.isEmpty else { return 0 }
    decisions.replaced.removeAll(where: isDue)
    due.sort { $0.entry < $1.entry }
    try load(due.map(\.entry.sequence), facts: &facts)
    var keys: [FieldKey] = []
    for (entry, _) in due {
      if let event = current(at: entry.sequence), let key = event.change.fieldKey {
        keys.append(key)
      }
    }
    let newest = try newestChanges(to: keys, facts: &facts)
    var redacted = 0
    for (entry, stored) in due {
      if stored { decisions.dequeued.append(entry) }
      guard let event = current(at: entry.sequence), !event.isRedacted,
        let key = event.change.fieldKey, let replacement = newest[key],
        replacement.stamp > event.stamp
      else { continue }
      if try redact(at: entry.sequence, reason: .superseded) { redacted += 1 }
    }
    return redacted
  }

  /// Ends the batch: erases what appended deletions delete, and releases the blobs no event
  /// references any more (``LogDecisions/releasedBlobs``).
  package mutating func finish(facts: inout some LogFacts) throws {
    try eraseDeleted(facts: &facts)
    let candidates = releaseCandidates.filter {
      decisions.addedReferences[$0, default: []].isEmpty
    }
    if !candidates.isEmpty {
      let referenced = try facts.referenced(
        Dictionary(
          uniqueKeysWithValues: candidates.map { ($0, decisions.removedReferences[$0] ?? []) }))
      for hash in candidates where referenced[hash] != true {
        decisions.releasedBlobs.insert(hash)
      }
    }
    releaseCandidates.removeAll()
  }

  // MARK: - Redacting

  /// Replaces the event at `sequence` with its redacted form, keeping its id: the index and the
  /// event-set digest do not change. An event already redacted, or of a kind that is never
  /// redacted (deletions, unknown kinds), is left as it is.
  ///
  /// - Returns: Whether the event was redacted now.
  /// - Throws: ``VLogError/Code/corruptStore`` if the log does not hold the event (read it
  ///   with ``load(_:facts:)`` first).
  @discardableResult
  private mutating func redact(at sequence: UInt64, reason: Event.Redaction) throws -> Bool {
    guard let event = current(at: sequence) else {
      throw VLogError(.corruptStore, "the object index names event \(sequence), which is missing")
    }
    let redacted = event.redacted(reason)
    guard redacted.isRedacted, !event.isRedacted else { return false }
    decisions.redacted[sequence] = redacted
    // What the batch read stays current after the storage takes the change.
    loaded[sequence] = redacted
    if let hash = event.referencedBlob {
      if decisions.addedReferences[hash]?.remove(sequence) == nil {
        decisions.removedReferences[hash, default: []].insert(sequence)
      }
      releaseCandidates.insert(hash)
    }
    redactedCount += 1
    return true
  }

  /// Stores the event at `sequence` in another form that is not redacted: a tags list without
  /// a deleted tag (rule 2). Its id stays, so the index and the event-set digest do not change.
  private mutating func rewrite(at sequence: UInt64, as event: Event) {
    decisions.redacted[sequence] = event
    loaded[sequence] = event
  }

  /// Forgets a deleted note's fields: its changes are all redacted.
  private mutating func forgetFields(of note: NoteID) {
    guard tracksFields else { return }
    for field in NoteField.allCases {
      let key = FieldKey(note: note, field: field)
      newest[key] = .some(nil)
      decisions.fields[key] = nil
      decisions.forgottenFields.insert(key)
    }
  }

  // MARK: - Facts

  private mutating func isDeleted(_ object: Identifier, facts: inout some LogFacts) throws -> Bool {
    if let known = deleted[object] { return known }
    let found = try facts.isDeleted(object)
    deleted[object] = found
    return found
  }

  private mutating func tagDeletion(of object: Identifier, facts: inout some LogFacts) throws
    -> Stamp?
  {
    if let known = tagDeletions[object] { return known }
    let found = try facts.tagDeletion(of: object)
    tagDeletions[object] = .some(found)
    return found
  }

  private mutating func newestChange(to key: FieldKey, facts: inout some LogFacts) throws
    -> FieldChange?
  {
    if let known = newest[key] { return known }
    return try newestChanges(to: [key], facts: &facts)[key]
  }

  private mutating func newestChanges(to keys: [FieldKey], facts: inout some LogFacts) throws
    -> [FieldKey: FieldChange]
  {
    let unknown = Array(Set(keys.filter { newest[$0] == nil }))
    if !unknown.isEmpty {
      let found = try facts.newestChanges(to: unknown)
      for key in unknown { newest[key] = .some(found[key]) }
    }
    var result: [FieldKey: FieldChange] = [:]
    for key in keys { if let change = newest[key] ?? nil { result[key] = change } }
    return result
  }

  /// The sequence numbers filed under each object, stored and appended, in log order.
  private mutating func sequences(of objects: [Identifier], facts: inout some LogFacts) throws
    -> [Identifier: [UInt64]]
  {
    let stored = try facts.sequences(of: objects)
    let wanted = Set(objects)
    var all: [Identifier: Set<UInt64>] = [:]
    for (object, sequences) in stored where wanted.contains(object) {
      all[object, default: []].formUnion(sequences)
    }
    for (object, sequence) in decisions.objects where wanted.contains(object) {
      all[object, default: []].insert(sequence)
    }
    return all.mapValues { $0.sorted() }
  }

  /// Reads the stored events among `sequences` that the batch does not hold yet.
  private mutating func load(_ sequences: [UInt64], facts: inout some LogFacts) throws {
    let missing = sequences.filter {
      decisions.redacted[$0] == nil && appendedEvent(at: $0) == nil && loaded[$0] == nil
    }
    guard !missing.isEmpty else { return }
    loaded.merge(try facts.events(at: missing)) { _, new in new }
  }

  /// The event at `sequence` as this batch sees it, among those it holds or read.
  private func current(at sequence: UInt64) -> Event? {
    decisions.redacted[sequence] ?? appendedEvent(at: sequence) ?? loaded[sequence]
  }

  private func appendedEvent(at sequence: UInt64) -> Event? {
    guard let first = decisions.appended.first?.sequence, sequence >= first,
      sequence - first < UInt64(decisions.appended.count)
    else { return nil }
    return decisions.appended[Int(sequence - first)].event
  }

  // MARK: - Retention times

  /// Whether a change replaced at `milliseconds` is due for redaction at `now`.
  package static func isDue(_ milliseconds: UInt64, retention: Duration, now: Milliseconds) -> Bool
  {
    Milliseconds(rawValue: milliseconds).isDue(after: retention, at: now)
  }

  /// The latest replacement time that is due at `now`, for a storage to select the queued
  /// changes to hand to ``applyRetention(_:now:stored:facts:)``; nil if none can be.
  package static func latestDueTime(retention: Duration, now: Milliseconds) -> UInt64? {
    let period = retention.wholeMilliseconds
    guard period > 0 else { return .max }
    return now.rawValue >= period ? now.rawValue - period : nil
  }
}

extension Change {
  /// The note field a change sets, as a key.
  package var fieldKey: FieldKey? {
    guard let field, let note = noteID else { return nil }
    return FieldKey(note: note, field: field)
  }
}

/// Which rules a ``LogBatch`` follows: the standard ones, or a deliberately wrong variation for
/// tests that show every storage stores what the batch decides (both server backends take it
/// from `SyncServer.Configuration`).
package enum LogRules: Sendable, Hashable {
  /// The rules of ``LogBatch``.
  case standard
  /// A deliberately wrong rule for tests: an event of a deleted note or attachment that
  /// arrives after the deletion is stored as it came (rule 1 only redacts what the deletion
  /// finds). `verify` reports what it keeps.
  case keepsLateContent
}
