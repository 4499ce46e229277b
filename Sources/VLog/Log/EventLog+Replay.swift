package import LMDB

/// How far a replay of the log has come.
public struct RebuildProgress: Sendable, Hashable {
  /// Events replayed so far.
  public let replayed: Int
  /// Events in the log.
  public let total: Int
}

extension EventLog {
  /// Calls `body` with every event of the log, in log order, each checked against its
  /// checksum: what rebuilding projections from the log is made of.
  ///
  /// - Parameters:
  ///   - progress: Called every 10,000 events and at the end.
  ///   - body: Receives each event.
  /// - Returns: The number of events replayed.
  /// - Throws: ``VLogError/Code/corruptStore`` at the first damaged entry, or what `body`
  ///   throws.
  package func replay(
    in transaction: borrowing some Transaction & ~Copyable,
    progress: ((RebuildProgress) -> Void)? = nil, _ body: (Event) throws -> Void
  ) throws -> Int {
    let total = Int(clamping: try lastSequence(in: transaction))
    var replayed = 0
    try forEach(after: 0, in: transaction) { logged in
      try body(logged.event)
      replayed += 1
      if replayed % 10_000 == 0 { progress?(RebuildProgress(replayed: replayed, total: total)) }
      return true
    }
    progress?(RebuildProgress(replayed: replayed, total: total))
    return replayed
  }
}
