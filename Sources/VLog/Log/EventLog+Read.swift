package import LMDB

/// An event with its position in this store's log.
public struct LoggedEvent: Sendable, Hashable {
  /// The event's local sequence number: its position in this store's log, from 1.
  public let sequence: UInt64
  /// The event.
  public let event: Event

  package init(sequence: UInt64, event: Event) {
    self.sequence = sequence
    self.event = event
  }
}

extension EventLog {
  /// Whether the log holds the event with this id.
  package func contains(_ id: Stamp, in transaction: borrowing some Transaction & ~Copyable)
    throws -> Bool
  {
    try withKey(id: id) { key in try transaction.containsValue(forKey: key, in: index) }
  }

  /// The sequence number of the event with this id, if the log holds it.
  package func sequence(of id: Stamp, in transaction: borrowing some Transaction & ~Copyable)
    throws -> UInt64?
  {
    try withKey(id: id) { key in
      try transaction.withValue(forKey: key, in: index) { value throws -> UInt64? in
        try value.map { value throws(VLogError) in try Self.sequence(fromIndexValue: value) }
      }
    }
  }

  /// The event at a sequence number, if the log has one there.
  ///
  /// - Throws: ``VLogError/Code/corruptStore`` for a damaged entry.
  package func event(at sequence: UInt64, in transaction: borrowing some Transaction & ~Copyable)
    throws -> LoggedEvent?
  {
    try withKey(sequence: sequence) { key in
      try transaction.withValue(forKey: key, in: entries) { value throws -> LoggedEvent? in
        guard let value else { return nil }
        return try decode(key: key, value: value)
      }
    }
  }

  /// The event with this id, if the log holds it.
  package func event(withID id: Stamp, in transaction: borrowing some Transaction & ~Copyable)
    throws -> LoggedEvent?
  {
    guard let sequence = try sequence(of: id, in: transaction) else { return nil }
    return try event(at: sequence, in: transaction)
  }

  /// Calls `body` with each event after `sequence` (through `last`, if given), in log order,
  /// until it returns false. Each entry's checksum is checked before it is decoded.
  ///
  /// - Throws: ``VLogError/Code/corruptStore`` for a damaged entry, or what `body` throws.
  package func forEach(
    after sequence: UInt64, through last: UInt64? = nil,
    in transaction: borrowing some Transaction & ~Copyable,
    _ body: (LoggedEvent) throws -> Bool
  ) throws {
    try forEachSized(after: sequence, through: last, in: transaction) { logged, _ in
      try body(logged)
    }
  }

  /// ``forEach(after:through:in:_:)``, also giving each event's size in its binary encoding,
  /// for readers that bound what they hold by bytes.
  package func forEachSized(
    after sequence: UInt64, through last: UInt64? = nil,
    in transaction: borrowing some Transaction & ~Copyable,
    _ body: (LoggedEvent, _ encodedBytes: Int) throws -> Bool
  ) throws {
    guard sequence < .max else { return }
    try transaction.withEntries(in: entries, range: range(after: sequence, through: last)) {
      entries throws in
      while let (logged, size) = try entries.next({ key, value throws -> (LoggedEvent, Int) in
        (try decode(key: key, value: value), value.count - LogRecord.headerSize)
      }) {
        guard try body(logged, size) else { return }
      }
    }
  }

  /// Calls `body` with the id of every event in the log, in id order.
  package func forEachID(
    in transaction: borrowing some Transaction & ~Copyable, _ body: (Stamp) throws -> Void
  ) throws {
    try transaction.forEach(in: index, range: ownKeys) { key, _ in
      try body(try id(fromIndexKey: key))
    }
  }

  /// Decodes a log entry, after checking its key and its checksum; `skippingText` as
  /// ``EventCodec/decode(_:skippingText:)`` does.
  func decode(
    key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer, skippingText: Bool = false
  ) throws(VLogError) -> LoggedEvent {
    let sequence = try sequence(fromKey: key)
    return LoggedEvent(
      sequence: sequence,
      event: try EventCodec.decode(
        try LogRecord.event(in: value, sequence: sequence), skippingText: skippingText))
  }

  /// The text of the `textSet` event at `sequence`, which must have the id `stamp`: where a
  /// note's record says its text is.
  ///
  /// - Throws: ``VLogError/Code/corruptStore`` if the log has no such event there.
  package func text(
    at sequence: UInt64, stamp: Stamp, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> String {
    guard let text = try textIfPresent(at: sequence, stamp: stamp, in: transaction) else {
      throw Self.missingText(sequence, stamp)
    }
    return text
  }

  /// The first lines of the text of the `textSet` event at `sequence` with the id `stamp`
  /// (``Note/truncatedText``), reading an ASCII text only as far as the cut.
  ///
  /// - Throws: ``VLogError/Code/corruptStore`` if the log has no such event there.
  package func truncatedText(
    at sequence: UInt64, stamp: Stamp, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> String {
    let text = try withTextBytes(at: sequence, stamp: stamp, in: transaction) { bytes in
      if let ascii = Note.truncateASCII(bytes) { return ascii }
      return Note.truncateCharacters(try Self.validated(bytes))
    }
    guard let text else { throw Self.missingText(sequence, stamp) }
    return text
  }

  /// The text of the `textSet` event at `sequence` with the id `stamp`; nil if that event is
  /// no longer there to read (redacted, as its note was deleted or by retention).
  package func textIfPresent(
    at sequence: UInt64, stamp: Stamp, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> String? {
    try withTextBytes(at: sequence, stamp: stamp, in: transaction, Self.validated)
  }

  /// Calls `body` with the UTF-8 bytes of the text of the `textSet` event at `sequence` with
  /// the id `stamp`; nil if the log has no such event there.
  private func withTextBytes<R>(
    at sequence: UInt64, stamp: Stamp, in transaction: borrowing some Transaction & ~Copyable,
    _ body: (UnsafeRawBufferPointer) throws -> R
  ) throws -> R? {
    try withKey(sequence: sequence) { key in
      try transaction.withValue(forKey: key, in: entries) { value throws -> R? in
        guard let value,
          let bytes = try EventCodec.textBytes(
            of: try LogRecord.event(in: value, sequence: sequence), stamp: stamp)
        else { return nil }
        return try body(bytes)
      }
    }
  }

  private static func validated(_ bytes: UnsafeRawBufferPointer) throws -> String {
    guard let string = String(validUTF8: bytes) else {
      throw VLogError(.malformedEvent, "text: not valid UTF-8")
    }
    return string
  }

  private static func missingText(_ sequence: UInt64, _ stamp: Stamp) -> VLogError {
    VLogError(
      .corruptStore, "event \(sequence) is not the text \(stamp) that a note's record names")
  }
}
