/// A note's merge rules, as a pure core: given a note's state (its ``NoteRecord``) and one
/// change to it, the note's next state and the changes it replaced. It reads and writes no
/// storage: what it needs from the log — whether the log holds a text a change names — comes in
/// as a function, and the ``Projector`` loads records, applies it, and writes what changed.
///
/// Every rule is a function of the set of changes applied, never of their order, which is what
/// makes replicas converge:
///
/// - a field (``NoteField``) takes the value of the change with the newest stamp; the change
///   that loses (the field's previous winner, or the new one) is *replaced*, with the time of
///   the change that replaced it — what enters the log's retention queue (rule 4 of
///   ``LogBatch``);
/// - a note's creation date comes from its earliest creation event;
/// - a note's text is its newest text; the texts no change replaced stay current as its
///   conflicts (``TextVersions``), and a redacted text change replaces what it named;
/// - a note's tags are its newest tags list's, then those added after it (oldest first); each
///   tag on a note is its own field: an addition or removal newer than the list wins over it
///   for that tag alone, and the newest addition or removal of a tag wins over the others;
/// - a tag deletion voids every change of the tag older than it (``voidTags(_:in:)``);
/// - a note shows the attachments of its newest list, then those added after it, oldest first
///   (``shownAttachments(of:added:)``).
///
/// How two changes compare is the ``policy``'s: ``StandardMerge`` in the engine; tests inject
/// deliberately wrong ones to show that the convergence tests and the simulation catch them.
struct NoteMerge: Sendable {
  /// How changes compare and merge.
  let policy: any MergePolicy

  /// The merge with the engine's rules, or another policy for a test.
  init(policy: any MergePolicy = StandardMerge()) {
    self.policy = policy
  }

  /// Applies a change to a note's state.
  ///
  /// - Parameters:
  ///   - change: A change of the note (others change nothing).
  ///   - stamp: The change's stamp.
  ///   - sequence: Where the log holds it.
  ///   - isRedacted: Whether the log holds it redacted: a redacted text change still replaces
  ///     what it named; any other redacted change does nothing.
  ///   - note: The note's state.
  ///   - replaced: Gains the changes this one replaced, and the change itself if it arrived
  ///     replaced: each with the time of the change that replaced it.
  ///   - tagKey: The key of a tag an addition or removal names (``TagKey/init(_:)``, which a
  ///     caller may keep computed); a tags list's names are keyed as they are met.
  ///   - isHeld: Whether the log holds the text change with this stamp, earlier than this one.
  /// - Returns: Whether the note's state changed.
  func apply(
    _ change: Change, stamp: Stamp, sequence: UInt64, isRedacted: Bool = false,
    to note: inout NoteRecord, replaced: inout [ReplacedChange],
    tagKey: (TagID) -> TagKey = TagKey.init, isHeld: (Stamp) throws -> Bool
  ) rethrows -> Bool {
    if isRedacted {
      guard case .textSet(_, _, let base) = change else { return false }
      return try setText(
        stamp: stamp, sequence: sequence, base: base, isRedacted: true, in: &note,
        replaced: &replaced, isHeld: isHeld)
    }
    let at = FieldChange(stamp: stamp, sequence: sequence)
    switch change {
    case .noteCreated(_, let date):
      guard !note.isCreated || stamp < note.creationStamp else { return false }
      note.isCreated = true
      note.creationStamp = stamp
      note.creationDate = date.milliseconds
      return true
    case .textSet(_, _, let base):
      return try setText(
        stamp: stamp, sequence: sequence, base: base, isRedacted: false, in: &note,
        replaced: &replaced, isHeld: isHeld)
    case .archivedSet(_, let archived):
      guard replace(&note.archivedStamp, &note.archivedSequence, with: at, &replaced) else {
        return false
      }
      note.archived = archived
      return true
    case .sortDateSet(_, let date):
      guard replace(&note.sortDateStamp, &note.sortDateSequence, with: at, &replaced) else {
        return false
      }
      note.sortDate = date.milliseconds
      return true
    case .tagsSet(_, let names):
      // The log stores a list without the tags deleted after it, and an addition older than
      // its tag's deletion redacted (rule 2 of `LogBatch`): what arrives here is in force.
      guard replace(&note.tagsStamp, &note.tagsSequence, with: at, &replaced) else {
        return false
      }
      if !note.tagChanges.isEmpty { note.tagChanges.removeAll { $0.stamp < stamp } }
      guard !note.tagChanges.isEmpty else {
        note.tagList = names
        return true
      }
      // The tags changed after the list: their newest change says.
      let changed = Set(note.tagChanges.map(\.key))
      note.tagList = names.filter { name in
        let tag = TagID(name: name)
        return !changed.contains(tagKey(tag))
          && !(TagKey(decomposedFormOf: tag).map(changed.contains) ?? false)
      }
      return true
    case .tagAdded(_, let name):
      let cleaned = TagName.clean(name)
      guard !cleaned.isEmpty else { return false }
      let tag = TagID(name: cleaned)
      return policy.addTag(
        name, tag: tag, key: tagKey(tag), at: at, to: &note, replaced: &replaced, merge: self)
    case .tagRemoved(_, let key):
      // Which of the note's listed tags it is, by its key (or the key a version before
      // format 8 gave a name typed decomposed: a device still on it removes by that key).
      let tag = note.tagList.lazy.map(TagID.init(name:)).first {
        tagKey($0) == key || TagKey(decomposedFormOf: $0) == key
      }
      return changeTag(key, tag: tag, to: nil, at: stamp, in: &note)
    case .attachmentsSet(_, let attachments):
      guard
        replace(&note.attachmentsStamp, &note.attachmentsSequence, with: at, &replaced)
      else { return false }
      note.attachments = attachments
      return true
    default:
      return false
    }
  }

  /// Whether `change` wins a field held by the change stamped `fieldStamp` at `fieldSequence`:
  /// then the field takes its stamp and sequence. The change that loses (the field's previous
  /// winner, or this one) is replaced.
  func replace(
    _ fieldStamp: inout Stamp, _ fieldSequence: inout UInt64, with change: FieldChange,
    _ replaced: inout [ReplacedChange]
  ) -> Bool {
    let wins = policy.wins(change.stamp, over: fieldStamp)
    let newest = fieldStamp == .zero ? nil : FieldChange(stamp: fieldStamp, sequence: fieldSequence)
    if let loser = change.replacement(of: newest, wins: wins) { replaced.append(loser) }
    guard wins else { return false }
    fieldStamp = change.stamp
    fieldSequence = change.sequence
    return true
  }

  /// Applies a text change: the note shows its newest text, and keeps as current every text no
  /// change replaced (``TextVersions``); the texts it reports replaced are replaced, and no
  /// current text is.
  private func setText(
    stamp: Stamp, sequence: UInt64, base: ReplacedTexts?, isRedacted: Bool,
    in note: inout NoteRecord, replaced: inout [ReplacedChange],
    isHeld: (Stamp) throws -> Bool
  ) rethrows -> Bool {
    let texts = note.texts
    var replacedCount = 0
    try note.texts.apply(
      stamp: stamp, sequence: sequence, base: policy.replacedTexts(named: base),
      isRedacted: isRedacted, isHeld: isHeld,
      report: { text in
        replacedCount += 1
        replaced.append(text)
      })
    var changed = replacedCount > 0 || note.texts != texts
    if !isRedacted, policy.wins(stamp, over: note.textStamp) {
      note.textStamp = stamp
      note.textSequence = sequence
      changed = true
    }
    return changed
  }

  /// Puts a tag on the note (`name`) or takes it off (nil) as of `stamp`, if that is newer
  /// than the note's list and the tag's newest change: the tag (`tag`, the id whose key is
  /// `key`, if known) leaves the list, and its change is kept in stamp order.
  ///
  /// - Returns: Whether the note changed.
  func changeTag(
    _ key: TagKey, tag: TagID?, to name: String?, at stamp: Stamp, in note: inout NoteRecord
  ) -> Bool {
    guard policy.wins(stamp, over: note.tagsStamp) else { return false }
    // The same tag's change: by its key, or one keyed by the other form (see
    // `TagKey(decomposedFormOf:)`), which is kept as it came so every order ends alike.
    let decomposed = tag.flatMap(TagKey.init(decomposedFormOf:))
    if let existing = note.tagChanges.firstIndex(where: { change in
      change.key == key || change.key == decomposed
        || (change.name.map { TagKey(decomposedFormOf: TagID(name: $0)) == key } ?? false)
    }) {
      guard policy.wins(stamp, over: note.tagChanges[existing].stamp) else { return false }
      note.tagChanges.remove(at: existing)
    }
    if let tag { note.tagList.removeAll { TagID(name: $0) == tag } }
    let change = TagChange(stamp: stamp, key: key, name: name)
    let index = note.tagChanges.firstIndex { $0.stamp > stamp } ?? note.tagChanges.endIndex
    note.tagChanges.insert(change, at: index)
    return true
  }

  /// Whether the note holds a change of one of these tags older than its deletion.
  func names(_ deletions: [TagKey: Stamp], in note: NoteRecord) -> Bool {
    note.tagChanges.contains { change in
      deletions[change.key].map { change.stamp < $0 } ?? false
    }
      || note.tagList.contains { name in
        deletions[TagKey(name: name)].map { note.tagsStamp < $0 } ?? false
      }
  }

  /// Drops the note's changes of these tags older than their deletion.
  ///
  /// - Returns: Whether the note changed.
  func voidTags(_ deletions: [TagKey: Stamp], in note: inout NoteRecord) -> Bool {
    let before = (note.tagList.count, note.tagChanges.count)
    let listStamp = note.tagsStamp
    note.tagList.removeAll { name in deletions[TagKey(name: name)].map { listStamp < $0 } ?? false }
    note.tagChanges.removeAll { change in
      deletions[change.key].map { change.stamp < $0 } ?? false
    }
    return before != (note.tagList.count, note.tagChanges.count)
  }

  /// The attachments a note shows, in order: those of its newest attachments list, then those
  /// added to it after that list was set, oldest first. Each attachment on a note is its own
  /// last-writer-wins property: a list means "exactly these, as of its stamp", an
  /// `attachmentAdded` means "this one too, as of its stamp", and a deletion removes it for
  /// good; so two devices that add attachments to a note offline keep both.
  ///
  /// - Parameter added: The attachments added to the note that are not erased, with the stamp
  ///   of the add that holds each.
  func shownAttachments(of note: NoteRecord, added: [(stamp: Stamp, id: AttachmentID)])
    -> [AttachmentID]
  {
    policy.shownAttachments(of: note, added: added, merge: self)
  }
}

/// How a note's changes compare and merge. The engine has one policy, ``StandardMerge``: the
/// rules ``NoteMerge`` states, which every requirement's default follows. A test injects a
/// deliberately wrong one (``NoteStore/Options``' `mergePolicy`) to show that the convergence
/// tests and the simulation catch it.
protocol MergePolicy: Sendable {
  /// Whether a change stamped `new` replaces a value stamped `old`: the newer stamp (hybrid
  /// time, then replica id).
  func wins(_ new: Stamp, over old: Stamp) -> Bool

  /// Which texts a text change replaces, given those it names (`base`; nil replaces every
  /// older text): the texts it names.
  func replacedTexts(named base: ReplacedTexts?) -> ReplacedTexts?

  /// Puts a tag on a note: ``NoteMerge/changeTag(_:tag:to:at:in:)`` for that tag alone.
  ///
  /// - Returns: Whether the note changed.
  func addTag(
    _ name: String, tag: TagID, key: TagKey, at change: FieldChange, to note: inout NoteRecord,
    replaced: inout [ReplacedChange], merge: NoteMerge
  ) -> Bool

  /// The attachments a note shows (``NoteMerge/shownAttachments(of:added:)``).
  func shownAttachments(
    of note: NoteRecord, added: [(stamp: Stamp, id: AttachmentID)], merge: NoteMerge
  ) -> [AttachmentID]
}

extension MergePolicy {
  @inline(__always)
  func wins(_ new: Stamp, over old: Stamp) -> Bool { new > old }

  func replacedTexts(named base: ReplacedTexts?) -> ReplacedTexts? { base }

  func addTag(
    _ name: String, tag: TagID, key: TagKey, at change: FieldChange, to note: inout NoteRecord,
    replaced: inout [ReplacedChange], merge: NoteMerge
  ) -> Bool {
    merge.changeTag(key, tag: tag, to: name, at: change.stamp, in: &note)
  }

  func shownAttachments(
    of note: NoteRecord, added: [(stamp: Stamp, id: AttachmentID)], merge: NoteMerge
  ) -> [AttachmentID] {
    let later = added.filter {
      $0.stamp > note.attachmentsStamp && !note.attachments.contains($0.id)
    }
    guard !later.isEmpty else { return note.attachments }
    return note.attachments + later.sorted { $0.stamp < $1.stamp }.map(\.id)
  }
}

/// The engine's merge: every rule as ``NoteMerge`` states it.
struct StandardMerge: MergePolicy {}
