package import LMDB

extension EventLog {
  /// Starts appending inside `transaction`: reads the log's state once.
  package func appender(in transaction: borrowing WriteTransaction) throws -> Appender {
    Appender(log: self, state: try state(in: transaction))
  }

  /// Appends events and moves the outbox watermark inside one write transaction, keeping the
  /// log's state in memory until ``commit(in:)`` writes it once.
  ///
  /// Make one per transaction with ``EventLog/appender(in:)``; a transaction that runs again
  /// (after the map grows) makes a new one.
  package struct Appender {
    /// The log appended to.
    package let log: EventLog
    /// The log's state, with this transaction's appends.
    package internal(set) var state: LogState
    private let initial: LogState
    /// Events appended so far.
    package internal(set) var appended = 0

    init(log: EventLog, state: LogState) {
      self.log = log
      self.state = state
      self.initial = state
    }

    /// The stamp for a new local event of `replica`: later than every stamp the log holds.
    package mutating func stamp(wallMilliseconds: UInt64, replica: ReplicaID) -> Stamp {
      Stamp(time: state.clock.tick(wallMilliseconds: wallMilliseconds), replica: replica)
    }

    /// Appends an event (counting it in the outbox if it is `local`), and advances the clock
    /// past its stamp.
    ///
    /// The caller makes sure the log does not hold the event yet (``EventLog/contains(_:in:)``);
    /// a local event's stamp comes from ``stamp(wallMilliseconds:replica:)``.
    ///
    /// - Returns: The event's sequence number.
    /// - Throws: `LMDBError` with code `keyExists` if the log holds the event already.
    @discardableResult
    package mutating func append(
      _ event: Event, local: Bool, in transaction: borrowing WriteTransaction
    ) throws -> UInt64 {
      var writer = WireWriter()
      writer.buffer.reserveCapacity(96 + event.unknownFields.count)
      EventCodec.encode(event, into: &writer)
      let bytes = writer.buffer
      let sequence = state.nextSequence
      state.nextSequence += 1
      let log = self.log
      try log.withKey(sequence: sequence) { sequenceKey in
        try transaction.put(
          forKey: sequenceKey, reservingCount: LogRecord.headerSize + bytes.count,
          in: log.entries, options: .append
        ) { buffer in
          LogRecord.write(bytes, into: buffer)
        }
        let sequenceValue = UnsafeRawBufferPointer(
          rebasing: sequenceKey[(sequenceKey.count - 8)...])
        try event.stamp.withKey { id in
          try log.withKey(id: event.stamp) { idKey in
            // A local stamp is later than every stamp in the index (the clock has observed
            // them all), so it goes at the end without a search.
            try transaction.put(
              sequenceValue, forKey: idKey, in: log.index,
              options: local ? .append : .noOverwrite)
          }
          state.digest.add(eventID: id)
        }
      }
      state.clock.observe(event.stamp.time)
      if local { state.pendingLocal += 1 }
      appended += 1
      return sequence
    }

    /// Counts events of kinds this version does not know, seen since the last commit.
    package mutating func countUnknownEvents(_ count: Int) {
      state.unknownEvents += UInt64(count)
    }

    /// Sets the count of events of unknown kinds, after a replay counted them all.
    package mutating func setUnknownEvents(_ count: Int) {
      state.unknownEvents = UInt64(count)
    }

    /// Writes the log's state if this transaction changed it. While nothing is pending, the
    /// outbox watermark follows the end of the log.
    package mutating func commit(in transaction: borrowing WriteTransaction) throws {
      if state.pendingLocal == 0 { state.acknowledged = state.lastSequence }
      guard state != initial else { return }
      try log.write(state, in: transaction)
    }
  }
}
