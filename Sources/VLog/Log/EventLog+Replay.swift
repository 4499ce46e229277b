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
  /// checksum: what rebuilding projections from the log is made of. Texts are not decoded
  /// (``EventCodec/decode(_:skippingText:)``): a projection notes where a text is, and reads
  /// it when asked.
  ///
  /// - Parameters:
  ///   - start: The sequence number to replay after; 0 for the whole log.
  ///   - progress: Called every 10,000 events and at the end.
  ///   - body: Receives each event, with its sequence number.
  /// - Returns: The number of events replayed.
  /// - Throws: ``VLogError/Code/corruptStore`` at the first damaged entry, or what `body`
  ///   throws.
  package func replay(
    after start: UInt64 = 0, in transaction: borrowing some Transaction & ~Copyable,
    progress: ((RebuildProgress) -> Void)? = nil, _ body: (LoggedEvent) throws -> Void
  ) throws -> Int {
    let total = Int(clamping: try lastSequence(in: transaction))
    var replayed = 0
    try transaction.withEntries(in: entries, range: range(after: start, through: nil)) {
      entries throws in
      while let logged = try entries.next({ key, value throws -> LoggedEvent in
        try decode(key: key, value: value, skippingText: true)
      }) {
        try body(logged)
        replayed += 1
        if replayed % 10_000 == 0 {
          progress?(RebuildProgress(replayed: replayed, total: total))
        }
      }
    }
    progress?(RebuildProgress(replayed: replayed, total: total))
    return replayed
  }
}
