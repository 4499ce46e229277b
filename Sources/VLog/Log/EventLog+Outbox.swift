package import LMDB

extension EventLog {
  /// This store's events not yet acknowledged by the server, oldest first.
  ///
  /// - Parameters:
  ///   - replicas: The replica ids whose events are local: the store's, and those it had
  ///     before it took a new one (a copied store keeps its unacknowledged events under them).
  ///   - sequence: Only the events after this sequence number, if given.
  ///   - limit: The most events to return.
  package func outbox(
    of replicas: Set<ReplicaID>, after sequence: UInt64? = nil, limit: Int,
    in transaction: borrowing some Transaction & ~Copyable
  ) throws -> [LoggedEvent] {
    let state = try state(in: transaction)
    let wanted = min(limit, Int(clamping: state.pendingLocal))
    var pending: [LoggedEvent] = []
    guard wanted > 0 else { return pending }
    try forEach(after: max(state.acknowledged, sequence ?? 0), in: transaction) { logged in
      if replicas.contains(logged.event.stamp.replica) { pending.append(logged) }
      return pending.count < wanted
    }
    return pending
  }
}

extension EventLog.Appender {
  /// Marks every local event up to a sequence number as stored by the server, removing them
  /// from the outbox.
  ///
  /// - Returns: How many events left the outbox.
  /// - Throws: ``VLogError/Code/invalidValue`` for a sequence number beyond the log.
  package mutating func acknowledge(
    through sequence: UInt64, replicas: Set<ReplicaID>,
    in transaction: borrowing WriteTransaction
  ) throws -> Int {
    guard sequence < state.nextSequence else {
      throw VLogError(
        .invalidValue,
        "cannot acknowledge through event \(sequence): the log ends at \(state.lastSequence)")
    }
    guard sequence > state.acknowledged else { return 0 }
    var removed = 0
    try log.forEach(after: state.acknowledged, through: sequence, in: transaction) { logged in
      if replicas.contains(logged.event.stamp.replica) { removed += 1 }
      return true
    }
    guard UInt64(removed) <= state.pendingLocal else {
      throw VLogError(
        .corruptStore,
        "the log state counts \(state.pendingLocal) unacknowledged events, and \(removed) were "
          + "found up to event \(sequence)")
    }
    state.pendingLocal -= UInt64(removed)
    state.acknowledged = state.pendingLocal == 0 ? state.lastSequence : sequence
    return removed
  }
}
