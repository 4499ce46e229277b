/// The checks `verify` makes of a stored log, written once for every storage: the storage
/// reads its entries in order and hands each to ``check(_:isFiled:isDeleted:isReferenced:newestChange:)``
/// with lookups into its indexes, then the totals to ``checkTotals(count:digest:recordedDigest:describe:)``.
///
/// What a sound log satisfies (the rules of ``LogBatch``, seen from the stored result):
/// 1. Sequence numbers are dense from 1, and every entry decodes with its checksum.
/// 2. Every event is filed in the object index under each note and attachment it changes, and
///    an `attachmentAdded` that is not redacted in the blob index.
/// 3. No event of a deleted object keeps its content.
/// 4. Given a retention period and the time, no change replaced for longer than the period
///    keeps its values, unless it waits in the retention queue (the next commit redacts it:
///    verifying writes nothing, so it does not do that work itself). A text that is not its
///    note's newest is replaced only if a text change names it or a newer one recorded no base
///    (``TextVersions``): otherwise it is a conflict, which retention keeps. Those are decided
///    at ``checkTotals(count:digest:recordedDigest:describe:)``, once every text change was seen.
/// 5. The recorded event count and event-set digest are those of the entries.
/// 6. A deleted tag's name is gone: no tag deletion names the tag, and no change older than
///    its tag's latest deletion spells it (a rename, an addition, a tags list). Decided at
///    ``checkTotals(count:digest:recordedDigest:describe:)``, once every deletion was seen.
package struct LogChecks: Sendable {
  /// The faults found so far.
  package private(set) var faults: [VerificationFault] = []
  /// The entries checked so far.
  package private(set) var checked = 0
  private var expected: UInt64 = 1
  private let retention: (period: Duration?, now: Milliseconds)
  /// Texts past the period that keep their values: faults if replaced (rule 4).
  private var keptTexts: [(sequence: UInt64, stamp: Stamp, note: NoteID)] = []
  /// The texts named by text changes, and each note's newest text change that named none.
  private var namedTexts = Set<Stamp>()
  private var textFloors: [NoteID: Stamp] = [:]
  /// The changes that spell a tag's name, and each tag's latest deletion (rule 6).
  private var tagNamings: [(sequence: UInt64, stamp: Stamp, tag: Identifier)] = []
  private var tagDeletions: [Identifier: Stamp] = [:]

  /// Checks with a retention period (nil: none) at `now` (wall-clock milliseconds).
  package init(retention: (period: Duration?, now: Milliseconds) = (nil, .zero)) {
    self.retention = retention
  }

  /// Records a fault the storage found itself.
  package mutating func report(_ fault: VerificationFault) {
    faults.append(fault)
  }

  /// Counts an entry that could not be read (its checksum or encoding is bad) at the next
  /// sequence number.
  package mutating func unreadable(_ message: String) {
    checked += 1
    expected += 1
    faults.append(VerificationFault(kind: .corruptEvent, message: message))
  }

  /// Counts the entry at `sequence` and checks that it follows the one before.
  package mutating func entry(at sequence: UInt64) {
    checked += 1
    if sequence != expected {
      faults.append(
        VerificationFault(kind: .index, message: "event \(sequence) follows event \(expected - 1)"))
    }
    expected = sequence + 1
  }

  /// Checks a decoded event against the storage's indexes (``entry(at:)`` counted it).
  ///
  /// - Parameters:
  ///   - isFiled: Whether the object index files the event under an object.
  ///   - isDeleted: Whether the log holds a deletion of an object.
  ///   - isReferenced: Whether the blob index holds the event's reference to a blob.
  ///   - newestChange: The stamp of the newest change to a note field (asked only with a
  ///     retention period).
  ///   - isQueued: Whether the retention queue holds the event (asked only of one past the
  ///     period).
  package mutating func check(
    _ logged: LoggedEvent,
    isFiled: (Identifier) throws -> Bool,
    isDeleted: (Identifier) throws -> Bool,
    isReferenced: (BlobHash) throws -> Bool,
    newestChange: (FieldKey) throws -> Stamp?,
    isQueued: (UInt64) throws -> Bool
  ) rethrows {
    let event = logged.event
    let sequence = logged.sequence
    for object in event.change.objectIDs {
      if try !isFiled(object) {
        faults.append(
          VerificationFault(
            kind: .index,
            message: "event \(sequence) (\(event.stamp)) is not in the object index under \(object)"
          ))
      }
      if !event.isRedacted, event.change.deletedObject == nil,
        event.change.withoutPayload != nil, try isDeleted(object)
      {
        faults.append(
          VerificationFault(
            kind: .erasure,
            message: "event \(sequence) (\(event.stamp) \(event.change.kind)) keeps the "
              + "content of \(object), which was deleted"))
      }
    }
    if let hash = event.referencedBlob, try !isReferenced(hash) {
      faults.append(
        VerificationFault(
          kind: .index, message: "event \(sequence) (\(event.stamp)) is not in the blob index"))
    }
    checkTagNames(logged)
    guard let period = retention.period else { return }
    if case .textSet(let note, _, let base) = event.change {
      if let base {
        for named in base where named < event.stamp { namedTexts.insert(named) }
      } else if textFloors[note].map({ $0 < event.stamp }) ?? true {
        textFloors[note] = event.stamp
      }
    }
    if !event.isRedacted, let key = event.change.fieldKey,
      let replacement = try newestChange(key), replacement > event.stamp,
      LogBatch.isDue(replacement.time.milliseconds, retention: period, now: retention.now),
      try !isQueued(sequence)
    {
      if case .textSet(let note, _, _) = event.change {
        keptTexts.append((sequence, event.stamp, note))
      } else {
        faults.append(Self.keptPastRetention(sequence, event.stamp, event.change.kind))
      }
    }
  }

  /// Notes what a tag deletion or a change spelling a tag's name says for rule 6.
  private mutating func checkTagNames(_ logged: LoggedEvent) {
    let event = logged.event
    guard !event.isRedacted else { return }
    if let tag = event.change.deletedTag {
      tagDeletions[tag.identifier] = max(tagDeletions[tag.identifier] ?? .zero, event.stamp)
      if case .tagDeleted = event.change {
        faults.append(
          VerificationFault(
            kind: .erasure,
            message: "event \(logged.sequence) (\(event.stamp)) deletes a tag by its name"))
      }
    } else if event.change.kind != .tagRemoved {
      for tag in event.change.tagObjectIDs {
        tagNamings.append((logged.sequence, event.stamp, tag))
      }
    }
  }

  /// The changes that still spell a tag deleted after them: faults (rule 6).
  private mutating func checkDeletedTagNames() {
    for naming in tagNamings
    where tagDeletions[naming.tag].map({ naming.stamp < $0 }) ?? false {
      faults.append(
        VerificationFault(
          kind: .erasure,
          message: "event \(naming.sequence) (\(naming.stamp)) spells the name of a tag "
            + "deleted after it"))
    }
    tagNamings.removeAll()
  }

  private static func keptPastRetention(_ sequence: UInt64, _ stamp: Stamp, _ kind: EventKind)
    -> VerificationFault
  {
    VerificationFault(
      kind: .erasure,
      message: "event \(sequence) (\(stamp) \(kind)) was replaced longer "
        + "ago than the retention period and keeps its values, and nothing will redact it")
  }

  /// The texts kept past the period that a text change replaced: faults (rule 4).
  private mutating func checkKeptTexts() {
    for kept in keptTexts
    where namedTexts.contains(kept.stamp)
      || textFloors[kept.note].map({ kept.stamp < $0 }) ?? false
    {
      faults.append(Self.keptPastRetention(kept.sequence, kept.stamp, .textSet))
    }
    keptTexts.removeAll()
  }

  /// Checks the totals: the entries the storage counts another way (its id index, its head)
  /// against the entries checked, and the event-set digest it records against the digest of
  /// the ids it holds.
  ///
  /// - Parameters:
  ///   - count: How many entries the storage's other record says there are.
  ///   - digest: The digest of the ids the storage holds.
  ///   - recordedDigest: The digest the storage records.
  ///   - describe: The fault messages, given the two counts, and the two digests.
  package mutating func checkTotals(
    count: UInt64, digest: EventSetDigest, recordedDigest: EventSetDigest,
    describe: (
      count: (_ recorded: UInt64, _ checked: Int) -> String,
      digest: (_ recorded: EventSetDigest, _ computed: EventSetDigest) -> String
    )
  ) {
    checkKeptTexts()
    checkDeletedTagNames()
    if count != UInt64(checked) {
      faults.append(VerificationFault(kind: .index, message: describe.count(count, checked)))
    }
    if digest != recordedDigest {
      faults.append(
        VerificationFault(kind: .index, message: describe.digest(recordedDigest, digest)))
    }
  }
}
