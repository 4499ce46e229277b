package import LMDB

extension EventLog.Appender {
  /// Gives new stamps to this replica's unacknowledged events stamped in a millisecond after
  /// `limit`'s: the one
  /// repair for events a server refuses because they are stamped too far ahead of its clock
  /// (made while this device's clock was wrong, or after it followed a stamp from the future).
  ///
  /// Each such event keeps its place in the log and its change, and gets the stamp of a local
  /// change made now: the clock steps back to `limit` (or stays, if it is earlier) and ticks
  /// from the wall clock, so that with the wall clock at `limit` the new stamps fall in
  /// `limit`'s millisecond and a second call finds nothing to do. The index and the event-set digest follow. The events were never
  /// acknowledged, so the server never stored them; a replica that got them some other way (an
  /// export) keeps the old stamps.
  ///
  /// The caller replays the projections afterwards: the new stamps may change which value wins.
  ///
  /// - Returns: Each restamped event's old stamp and the event as it is now, in log order.
  package mutating func restampOutbox(
    of replicas: Set<ReplicaID>, as replica: ReplicaID, after limit: HybridTime,
    wallMilliseconds: UInt64, in transaction: borrowing WriteTransaction
  ) throws -> [(old: Stamp, new: Event)] {
    var ahead: [LoggedEvent] = []
    if state.pendingLocal > 0 {
      try log.forEach(after: state.acknowledged, in: transaction) { logged in
        if replicas.contains(logged.event.stamp.replica),
          logged.event.stamp.time.milliseconds > limit.milliseconds
        {
          ahead.append(logged)
        }
        return true
      }
    }
    guard !ahead.isEmpty else { return [] }
    state.clock = HybridClock(latest: min(state.clock.latest, limit))
    var stamps: [Stamp] = []
    for _ in ahead {
      var stamp = try stamp(wallMilliseconds: wallMilliseconds, replica: replica)
      while try log.contains(stamp, in: transaction) {
        stamp = try self.stamp(wallMilliseconds: wallMilliseconds, replica: replica)
      }
      stamps.append(stamp)
    }
    return try restamp(ahead, as: stamps, in: transaction)
  }

  /// Gives every unacknowledged event of `old` the stamp of the same time under `new`, a
  /// replica id no event holds: what a store copied to a second device does when the server
  /// says the copy pushed events under the same ids (see `NoteStore.renewReplica()`).
  ///
  /// - Returns: Each moved event's old stamp and the event as it is now, in log order.
  package mutating func moveOutbox(
    from old: ReplicaID, to new: ReplicaID, in transaction: borrowing WriteTransaction
  ) throws -> [(old: Stamp, new: Event)] {
    var moving: [LoggedEvent] = []
    if state.pendingLocal > 0 {
      try log.forEach(after: state.acknowledged, in: transaction) { logged in
        if logged.event.stamp.replica == old { moving.append(logged) }
        return true
      }
    }
    var stamps: [Stamp] = []
    for logged in moving {
      let stamp = Stamp(time: logged.event.stamp.time, replica: new)
      guard try !log.contains(stamp, in: transaction) else {
        throw VLogError(.invalidValue, "the new replica id \(new) has events already")
      }
      stamps.append(stamp)
    }
    return try restamp(moving, as: stamps, in: transaction)
  }

  /// Gives `events` the new `stamps`, in order; an event that names a restamped text among
  /// those it replaces names it by its new stamp.
  private mutating func restamp(
    _ events: [LoggedEvent], as stamps: [Stamp], in transaction: borrowing WriteTransaction
  ) throws -> [(old: Stamp, new: Event)] {
    var renamed: [Stamp: Stamp] = [:]
    var restamped: [(old: Stamp, new: Event)] = []
    for (logged, stamp) in zip(events, stamps) {
      renamed[logged.event.stamp] = stamp
      var change = logged.event.change
      if case .textSet(let note, let text, let base?) = change,
        base.contains(where: { renamed[$0] != nil })
      {
        change = .textSet(
          note, text: text, replacing: ReplacedTexts(base.map { renamed[$0] ?? $0 }))
      }
      let event = Event(stamp: stamp, change: change, unknownFields: logged.event.unknownFields)
      try rewrite(event, at: logged.sequence, replacing: logged.event.stamp, in: transaction)
      restamped.append((logged.event.stamp, event))
    }
    // Which change to a field is newest may have changed with the stamps.
    var refreshed = Set<[UInt8]>()
    for (_, event) in restamped {
      guard let note = event.change.noteID, let field = event.change.field,
        refreshed.insert(log.fieldKey(note, field)).inserted
      else { continue }
      try refreshNewestChange(to: note, field: field, in: transaction)
    }
    lastID = nil
    return restamped
  }

  /// Puts `event` at `sequence` in place of the event stamped `old`, moving its index entry
  /// and its term of the digest. Its objects and blob stay indexed under the same sequence.
  private mutating func rewrite(
    _ event: Event, at sequence: UInt64, replacing old: Stamp,
    in transaction: borrowing WriteTransaction
  ) throws {
    let bytes = event.encoded()
    let log = self.log
    try log.withKey(sequence: sequence) { sequenceKey in
      try transaction.put(
        forKey: sequenceKey, reservingCount: LogRecord.headerSize + bytes.count, in: log.entries
      ) { buffer in
        LogRecord.write(bytes, into: buffer)
      }
      try log.withKey(id: old) { key in _ = try transaction.delete(forKey: key, in: log.index) }
      let sequenceValue = UnsafeRawBufferPointer(rebasing: sequenceKey[(sequenceKey.count - 8)...])
      try log.withKey(id: event.stamp) { key in
        try transaction.put(sequenceValue, forKey: key, in: log.index, options: .noOverwrite)
      }
    }
    old.withKey { state.digest.remove(eventID: $0) }
    event.stamp.withKey { state.digest.add(eventID: $0) }
  }
}
