public import Foundation
internal import LMDB

/// What ingesting a batch of events did.
public struct IngestResult: Sendable, Hashable {
  /// Events appended to the log.
  public let appended: Int
  /// Events skipped because the log already had them.
  public let duplicates: Int
  /// Appended events of kinds this version does not know: stored and forwarded, not projected.
  public let unknownKinds: Int
  /// What the batch changed.
  public let changes: ChangeSet
}

/// An outbox event given a new stamp by `NoteStore.restampOutbox(after:)`.
public struct RestampedEvent: Sendable, Hashable {
  /// The stamp it had: too far ahead of the server's clock.
  public let old: Stamp
  /// The stamp it has now.
  public let new: Stamp
}

extension NoteStore {
  /// Ingests events from another replica (sync or import), in one transaction.
  ///
  /// Each event keeps its own stamp; an event the log already has is skipped, so ingesting is
  /// idempotent and batches may overlap. The clock advances past every stamp ingested. Events
  /// of unknown kinds are stored (and forwarded) but not projected. Observers get a
  /// ``ChangeSet`` with source ``ChangeSet/Source/sync``.
  ///
  /// A sync client passes `acknowledgingThrough` to record, in the same commit, that the server
  /// stored the local events it pushed (see ``acknowledge(through:)``): one durable commit per
  /// sync call instead of two. With no events and nothing to acknowledge, nothing is written.
  ///
  /// With `deferringProjections`, the events are committed to the log (durably, with what the
  /// log's rules decide: erasure, idempotence) but not applied to the projections: queries and
  /// observers see them once the projections are brought up to date — by the next ingest that
  /// does not defer, the next write, ``bringProjectionsUpToDate()-6y5uv`` or the next open — which
  /// then writes each note's record once for all the deferred pages. The sync client defers
  /// every page of a pull that more pages follow. A page that deletes a note, an attachment or
  /// a tag projects anyway (the log erases their content at its commit), and so does one past
  /// 100,000 unprojected events.
  ///
  /// - Parameters:
  ///   - events: The events, in any order, with duplicates allowed.
  ///   - sequence: Also acknowledge every local event up to this sequence number.
  ///   - deferringProjections: Whether to leave the projections to a later commit.
  /// - Returns: What was appended and what changed (with projections deferred, only the notes
  ///   the acknowledgement confirmed).
  /// - Throws: ``VLogError`` naming the first invalid event, or
  ///   ``VLogError/Code/invalidValue`` for a sequence number beyond the log; then nothing of the
  ///   batch is committed.
  @discardableResult
  public func ingest(
    _ events: [Event], acknowledgingThrough sequence: UInt64? = nil,
    deferringProjections: Bool = false
  ) throws -> IngestResult {
    if let empty = try Self.checkIngest(events, acknowledgingThrough: sequence) { return empty }
    let ingested = try VLogError.wrapping {
      try environment.write { transaction in
        try ingest(
          events, acknowledgingThrough: sequence, projecting: !deferringProjections,
          in: transaction)
      }
    }
    committed(ingested)
    return ingested.result
  }

  /// Ingests the events of the batches `batches` makes, one batch at a time until its
  /// function gives nil, in one transaction: every one of them, or — if it throws, or an
  /// event is invalid — none. Only one batch is held at a time, so an import of any size takes
  /// the memory of one batch (and of the transaction's pages, which LMDB spills to the file
  /// past a bound). The projections are brought up to date at the end, in the same
  /// transaction.
  ///
  /// - Parameter batches: Makes the function that gives the next batch of events, in any
  ///   order, with duplicates allowed, and nil when there are no more: from the start each
  ///   time it is called, as it is again when the store's file must grow and the transaction
  ///   starts over.
  /// - Returns: What was appended, over every batch, and what the projections changed.
  /// - Throws: What `batches` or its function throws, or ``VLogError`` naming the first invalid
  ///   event of its batch; then nothing is committed.
  @discardableResult
  public func ingest(streaming batches: () throws -> () throws -> [Event]?) throws
    -> IngestResult
  {
    let (appended, duplicates, unknown, changes) = try VLogError.wrapping {
      try environment.write { transaction in
        let next = try batches()
        var (appended, duplicates, unknown) = (0, 0, 0)
        // What each batch that projected changed (one that deletes does), then the rest.
        var changes = ChangeSet.Builder()
        while let batch = try next() {
          _ = try Self.checkIngest(batch, acknowledgingThrough: nil)
          let ingested = try ingest(
            batch, acknowledgingThrough: nil, projecting: false, in: transaction)
          appended += ingested.result.appended
          duplicates += ingested.result.duplicates
          unknown += ingested.result.unknownKinds
          if ingested.projected { changes.formUnion(ingested.result.changes) }
        }
        if let rest = try catchUpProjections(in: transaction) { changes.formUnion(rest) }
        return (appended, duplicates, unknown, changes.build(source: .sync, eventCount: appended))
      }
    }
    if !changes.isEmpty { observers.publish(changes) }
    return IngestResult(
      appended: appended, duplicates: duplicates, unknownKinds: unknown, changes: changes)
  }

  /// Ingests events from another replica on the store's writer queue. See
  /// ``ingest(_:acknowledgingThrough:deferringProjections:)-4bo9v``.
  ///
  /// Ingests and writes that arrive while another commits share the next commit, each in a
  /// transaction of its own nested in it.
  @discardableResult
  public func ingest(
    _ events: [Event], acknowledgingThrough sequence: UInt64? = nil,
    deferringProjections: Bool = false
  ) async throws -> IngestResult {
    if let empty = try Self.checkIngest(events, acknowledgingThrough: sequence) { return empty }
    return try await VLogError.wrapping {
      try await commits.write(
        { transaction in
          try self.ingest(
            events, acknowledgingThrough: sequence, projecting: !deferringProjections,
            in: transaction)
        },
        afterCommit: { self.committed($0) }
      ).result
    }
  }

  /// Applies the events the projections lag the log by (see
  /// ``ingest(_:acknowledgingThrough:deferringProjections:)-4bo9v``), in one transaction, and
  /// tells observers what they changed. Does nothing when the projections include every event.
  ///
  /// - Returns: The number of events applied.
  @discardableResult
  public func bringProjectionsUpToDate() throws -> Int {
    guard try unprojectedEventCount() > 0 else { return 0 }
    let changes = try VLogError.wrapping {
      try environment.write { transaction in try catchUpProjections(in: transaction) }
    }
    guard let changes else { return 0 }
    observers.publish(changes)
    return changes.eventCount
  }

  /// The number of events in the log that the projections do not include yet: those a
  /// deferred ingest left (see ``bringProjectionsUpToDate()-6y5uv``); 0 almost always.
  public func unprojectedEventCount() throws -> Int {
    try read { transaction in
      Int(
        clamping: try ProjectionLag.unprojected(
          schema: schema, lastSequence: eventLog.lastSequence(in: transaction), in: transaction))
    }
  }

  /// Brings the projections up to date on the store's writer queue. See
  /// ``bringProjectionsUpToDate()-6y5uv``.
  @discardableResult
  public func bringProjectionsUpToDate() async throws -> Int {
    guard try unprojectedEventCount() > 0 else { return 0 }
    let changes = try await VLogError.wrapping {
      try await commits.write(
        { transaction in try self.catchUpProjections(in: transaction) },
        afterCommit: { changes in if let changes { self.observers.publish(changes) } })
    }
    return changes?.eventCount ?? 0
  }

  /// Checks each event before any transaction; returns the outcome of an ingest that has
  /// nothing to do.
  ///
  /// - Throws: ``VLogError`` naming the first invalid event.
  private static func checkIngest(_ events: [Event], acknowledgingThrough sequence: UInt64?)
    throws -> IngestResult?
  {
    for (index, event) in events.enumerated() {
      do {
        try event.validate()
      } catch {
        throw VLogError(error.code, "event \(index + 1) (\(event.stamp)): \(error.message)")
      }
    }
    guard events.isEmpty && sequence == nil else { return nil }
    return IngestResult(
      appended: 0, duplicates: 0, unknownKinds: 0,
      changes: ChangeSet.Builder().build(source: .sync, eventCount: 0))
  }

  /// What an ingest's transaction did: its outcome, whether it confirmed notes, and whether it
  /// projected anything (its own events, or those it brought the projections up to date with).
  struct Ingested: Sendable {
    let result: IngestResult
    let confirmedAny: Bool
    let projected: Bool
  }

  /// Appends the events the log lacks and moves the outbox watermark, in `transaction`;
  /// applies them to the projections if `projecting` (and first the events they lag by).
  private func ingest(
    _ events: [Event], acknowledgingThrough sequence: UInt64?, projecting: Bool,
    in transaction: borrowing WriteTransaction
  ) throws -> Ingested {
    // A page that deletes projects: the log erases the deleted objects' content at this
    // commit, and a record that still named an erased text would not read.
    let erases = events.contains { $0.change.deletedObject != nil || $0.change.deletedTag != nil }
    var session = try WriteSession(
      store: self, projecting: projecting || erases, in: transaction)
    var confirmed: (shown: Set<NoteID>, any: Bool) = ([], false)
    if let sequence {
      _ = try session.log.acknowledge(
        through: sequence, replicas: try localReplicas(in: transaction), in: transaction)
      confirmed = try PendingNotes.confirm(
        through: session.log.state.acknowledged, schema: schema, in: transaction)
    }
    var duplicates = 0
    var unknown = 0
    for event in events {
      if try eventLog.contains(event.stamp, in: transaction) {
        duplicates += 1
        continue
      }
      if !event.change.kind.isKnown { unknown += 1 }
      try session.append(event, local: false, in: transaction)
    }
    // A note the server now holds every change of is updated too: its sync state is.
    session.projector.markUpdated(confirmed.shown)
    let changeSet = try session.finish(source: .sync, includingCaughtUp: true, in: transaction)
    return Ingested(
      result: IngestResult(
        appended: session.log.appended, duplicates: duplicates, unknownKinds: unknown,
        changes: changeSet),
      confirmedAny: confirmed.any,
      projected: session.projects && session.log.appended + session.caughtUp > 0)
  }

  /// Tells observers what an ingest changed, in the order of the commits. A commit that only
  /// confirmed notes is announced too: what a query shows changed.
  private func committed(_ ingested: Ingested) {
    if ingested.projected || ingested.confirmedAny {
      observers.publish(ingested.result.changes)
    }
  }

  // MARK: - Outbox

  /// Local events not yet acknowledged by the server, oldest first.
  ///
  /// - Parameters:
  ///   - sequence: Only the events after this sequence number, if given: what follows the
  ///     events of a push still on its way.
  ///   - limit: The most events to return.
  public func outbox(after sequence: UInt64? = nil, limit: Int = .max) throws -> [LoggedEvent] {
    try read { transaction in
      try eventLog.outbox(
        of: try localReplicas(in: transaction), after: sequence, limit: limit, in: transaction)
    }
  }

  /// The notes with changes made here that the server has not stored yet (``Note/isPending``),
  /// in id order: as many as the outbox's notes, whatever the store's size.
  public func pendingNotes() throws -> [NoteID] {
    try read { transaction in try PendingNotes.all(schema: schema, in: transaction) }
  }

  /// The number of local events not yet acknowledged.
  public func outboxCount() throws -> Int {
    try read { transaction in Int(clamping: try eventLog.state(in: transaction).pendingLocal) }
  }

  /// Marks every local event up to a sequence number as stored by the server, removing them
  /// from the outbox.
  ///
  /// The sync client sends the outbox oldest first, so the events a server confirms are always
  /// a prefix of it: acknowledge through the sequence number of the last one sent.
  ///
  /// - Parameter sequence: The sequence number of the last event the server confirmed.
  /// - Returns: How many events left the outbox.
  /// - Throws: ``VLogError/Code/invalidValue`` for a sequence number beyond the log.
  @discardableResult
  public func acknowledge(through sequence: UInt64) throws -> Int {
    let (removed, confirmed) = try VLogError.wrapping {
      try environment.write { transaction throws -> (Int, (shown: Set<NoteID>, any: Bool)) in
        var log = try eventLog.appender(in: transaction)
        let removed = try log.acknowledge(
          through: sequence, replicas: try localReplicas(in: transaction), in: transaction)
        try log.commit(in: transaction)
        let confirmed = try PendingNotes.confirm(
          through: log.state.acknowledged, schema: schema, in: transaction)
        return (removed, confirmed)
      }
    }
    if confirmed.any {
      var changes = ChangeSet.Builder()
      changes.updated = confirmed.shown
      observers.publish(changes.build(source: .sync, eventCount: 0))
    }
    return removed
  }

  /// Gives the stamp of a change made now to every local event not yet acknowledged that is
  /// stamped after `date`, then replays the projections: how a device recovers when the server
  /// refuses its outbox because the events are stamped too far ahead of the server's clock
  /// (made while this device's clock was wrong). Each event keeps its place in the log and its
  /// change; its id changes, which is safe because the server never stored it.
  ///
  /// The sync client calls this on a `clockSkew` refusal, with the server's time, once it has
  /// told the store how the server's clock stands (`recordServerClock(offset:)`), so that the
  /// new stamps are by the server's clock; apps rarely need to.
  ///
  /// - Parameter date: Events of this replica's outbox stamped after this are restamped.
  /// - Returns: Each restamped event's old and new stamp, in log order.
  @discardableResult
  public func restampOutbox(after date: Date) throws -> [RestampedEvent] {
    let limit = HybridTime(
      milliseconds: UInt64(
        clamping: max(0, min(date.milliseconds, Int64(HybridTime.maximumMilliseconds)))),
      counter: 0)
    let wall = stampingTime().rawValue
    return try restampingOutbox { log, replica, transaction in
      try log.restampOutbox(
        of: try localReplicas(in: transaction), as: replica, after: limit,
        wallMilliseconds: wall, in: transaction)
    }
  }

  /// Gives outbox events new stamps with `restamp` (given the log, the store's replica id and
  /// the transaction), then replays the projections: the new stamps may change which value
  /// wins.
  ///
  /// - Returns: Each restamped event's old and new stamp, in log order.
  func restampingOutbox(
    _ restamp: (inout EventLog.Appender, ReplicaID, borrowing WriteTransaction) throws -> [(
      old: Stamp, new: Event
    )]
  ) throws -> [RestampedEvent] {
    var caughtUp: ChangeSet?
    let (restamped, changeSet) = try VLogError.wrapping {
      try environment.write { transaction throws -> ([RestampedEvent], ChangeSet?) in
        // The replay below projects what a deferred ingest left: told apart, as from elsewhere.
        caughtUp = try catchUpProjections(in: transaction)
        var log = try eventLog.appender(in: transaction)
        let pairs = try restamp(&log, try replica(in: transaction), transaction)
        guard !pairs.isEmpty else { return ([], nil) }
        try log.commit(in: transaction)
        _ = try replayLog(into: transaction, progress: nil)
        var changes = ChangeSet.Builder()
        changes.updated = Set(pairs.compactMap { $0.new.change.noteID })
        changes.tagsChanged = true
        return (
          pairs.map { RestampedEvent(old: $0.old, new: $0.new.stamp) },
          changes.build(source: .user, eventCount: pairs.count)
        )
      }
    }
    if let caughtUp { observers.publish(caughtUp) }
    if let changeSet { observers.publish(changeSet) }
    return restamped
  }

  /// Brings projections that lag the log up to date in `transaction`.
  ///
  /// - Returns: What that changed, for observers; nil if they did not lag.
  func catchUpProjections(in transaction: borrowing WriteTransaction) throws -> ChangeSet? {
    guard try ProjectionLag.projectedThrough(schema: schema, in: transaction) != nil else {
      return nil
    }
    var session = try WriteSession(store: self, in: transaction)
    return try session.finish(source: .sync, includingCaughtUp: true, in: transaction)
  }

  /// Restamps ahead-of-time outbox events on the store's writer queue. See
  /// `restampOutbox(after:)`.
  @discardableResult
  public func restampOutbox(after date: Date) async throws -> [RestampedEvent] {
    try await onWriter { try self.restampOutbox(after: date) }
  }

  // MARK: - The log

  /// Events in log order, after a sequence number.
  ///
  /// - Parameters:
  ///   - sequence: Return events after this one (0 for the first).
  ///   - limit: The most events to return.
  public func events(after sequence: UInt64 = 0, limit: Int = .max) throws -> [LoggedEvent] {
    var result: [LoggedEvent] = []
    guard limit > 0 else { return result }
    try forEachEvent(after: sequence) { logged in
      result.append(logged)
      return result.count < limit
    }
    return result
  }

  /// Calls `body` with each event in log order after `sequence`, in one read transaction,
  /// until `body` returns false.
  public func forEachEvent(
    after sequence: UInt64 = 0, _ body: (LoggedEvent) throws -> Bool
  ) throws {
    try read { transaction in try eventLog.forEach(after: sequence, in: transaction, body) }
  }

  /// The event with this id, if the log has it.
  public func event(withID id: Stamp) throws -> LoggedEvent? {
    try read { transaction in try eventLog.event(withID: id, in: transaction) }
  }

  /// The sequence number of the last event in the log, or 0 if it is empty.
  public func lastSequence() throws -> UInt64 {
    try read { transaction in try eventLog.lastSequence(in: transaction) }
  }

  // MARK: - Repair

  /// The store's event-set digest split into buckets by event id, to compare with another
  /// replica's and find the few buckets where their events differ (see ``EventSetBuckets``).
  public func eventSetBuckets() throws -> EventSetBuckets {
    try read { transaction in try eventLog.buckets(in: transaction) }
  }

  /// The ids of the store's events that fall in the given buckets, in id order.
  public func eventIDs(inBuckets buckets: some Sequence<Int>) throws -> [Stamp] {
    let buckets = Set(buckets)
    return try read { transaction in try eventLog.ids(inBuckets: buckets, in: transaction) }
  }

  /// The events with these ids that the log holds, in the order of `ids`, in one read
  /// transaction.
  public func events(withIDs ids: [Stamp]) throws -> [Event] {
    try read { transaction in
      try ids.compactMap { id in try eventLog.event(withID: id, in: transaction)?.event }
    }
  }

  /// Runs `body` in a read transaction, turning LMDB's errors into ``VLogError``s.
  func read<R>(_ body: (borrowing ReadTransaction) throws -> R) throws -> R {
    try VLogError.wrapping { try environment.read(body) }
  }
}

extension NoteStore {
  /// The redacted events among `events` that neither the batch nor the log vouches for
  /// (`RedactionEvidence`): a device takes a redaction a server serves only with evidence
  /// that the log's rules made it.
  ///
  /// - Parameter events: Events from a server, checked otherwise, about to be ingested.
  /// - Returns: The ids of the redacted events with no deletion of their object and, for a
  ///   superseded one, no newer change that replaced it, held or in `events`.
  public func redactionsLackingEvidence(in events: [Event]) throws -> Set<Stamp> {
    guard events.contains(where: \.isRedacted) else { return [] }
    let needs = RedactionEvidence.needs(events)
    let log = eventLog
    let held = try read { transaction in
      var held = RedactionEvidence()
      for object in needs.objects where try log.deletion(of: object, in: transaction) != nil {
        held.deleted.insert(object)
      }
      for key in needs.fields {
        held.newest[key] = try log.newestChange(to: key.note, field: key.field, in: transaction)?
          .stamp
      }
      for note in needs.textsOf {
        for sequence in try log.sequences(of: note.identifier, in: transaction) {
          guard let logged = try log.event(at: sequence, in: transaction),
            case .textSet(_, _, let replaces) = logged.event.change
          else { continue }
          held.texts[note, default: []].append((logged.event.stamp, replaces))
        }
      }
      if needs.tagDeletion { held.tagDeletion = try log.latestTagDeletion(in: transaction) }
      return held
    }
    return Set(RedactionEvidence.unvouched(in: events, held: held).map(\.stamp))
  }
}
