package import LMDB

/// One fault that ``NoteStore/verify(progress:)`` found.
public struct VerificationFault: Sendable, Hashable, CustomStringConvertible {
  /// What kind of check failed.
  public enum Kind: String, Sendable, Hashable {
    /// A log entry's checksum does not match its bytes, or the entry cannot be decoded.
    case corruptEvent
    /// The event index, the log and the log's state disagree.
    case index
    /// A projection entry differs from what a fresh replay of the log produces.
    case projection
    /// A blob's bytes do not match their hash.
    case blob
    /// Content that should have been erased is still there: an event of a deleted note or
    /// attachment that is not redacted, or a replaced value kept past the retention period.
    case erasure
  }

  /// What kind of check failed.
  public let kind: Kind
  /// What is wrong, and where: the event's sequence number, the database and key.
  public let message: String

  /// Creates a fault.
  public init(kind: Kind, message: String) {
    self.kind = kind
    self.message = message
  }

  /// The kind and the message.
  public var description: String { "\(kind.rawValue): \(message)" }
}

extension EventLog {
  /// Checks the log: every entry's key, checksum and encoding; that sequence numbers are dense;
  /// that the index names every entry and nothing else; that the state's event-set digest
  /// is the digest of the index; that the object index files every event under its objects;
  /// that no event of a deleted object keeps its content; and, given a retention period and
  /// the time, that no change replaced for longer than it keeps its values.
  ///
  /// Reads the whole log and index once.
  ///
  /// - Parameter progress: Called every 10,000 entries, with the count checked and the total.
  /// - Returns: The faults found; empty for a sound log.
  package func verify(
    in transaction: borrowing some Transaction & ~Copyable,
    retention: (period: Duration?, now: UInt64) = (nil, 0),
    progress: ((_ checked: Int, _ total: Int) -> Void)? = nil
  ) throws -> [VerificationFault] {
    var faults: [VerificationFault] = []
    let state: LogState
    do {
      state = try self.state(in: transaction)
    } catch let error as VLogError {
      return [VerificationFault(kind: .corruptEvent, message: error.message)]
    }
    let total = Int(clamping: state.lastSequence)
    var checked = 0
    var expected: UInt64 = 1
    try transaction.forEach(in: entries, range: ownKeys) { key, value in
      checked += 1
      if checked % 10_000 == 0 { progress?(checked, total) }
      let logged: LoggedEvent
      do throws(VLogError) {
        logged = try decode(key: key, value: value)
      } catch {
        faults.append(VerificationFault(kind: .corruptEvent, message: error.message))
        expected += 1
        return
      }
      if logged.sequence != expected {
        faults.append(
          VerificationFault(
            kind: .index, message: "event \(logged.sequence) follows event \(expected - 1)"))
      }
      expected = logged.sequence + 1
      let indexed = try sequence(of: logged.event.stamp, in: transaction)
      if indexed != logged.sequence {
        faults.append(
          VerificationFault(
            kind: .index,
            message: "event \(logged.sequence) (\(logged.event.stamp)) is indexed as "
              + (indexed.map { "event \($0)" } ?? "missing")))
      }
      faults += try erasureFaults(of: logged, in: transaction)
      if let period = retention.period,
        try isPastRetention(logged, retention: period, now: retention.now, in: transaction)
      {
        faults.append(
          VerificationFault(
            kind: .erasure,
            message: "event \(logged.sequence) (\(logged.event.stamp) "
              + "\(logged.event.change.kind)) was replaced longer ago than the retention period "
              + "and keeps its values"))
      }
    }
    var indexed = 0
    var digest = EventSetDigest.empty
    try transaction.forEach(in: index, range: ownKeys) { key, _ in
      indexed += 1
      guard key.count == prefix.count + Stamp.byteCount else {
        faults.append(
          VerificationFault(kind: .index, message: "an index key is \(key.count) bytes"))
        return
      }
      digest.add(eventID: UnsafeRawBufferPointer(rebasing: key[prefix.count...]))
    }
    if indexed != checked {
      faults.append(
        VerificationFault(
          kind: .index, message: "the index has \(indexed) entries for \(checked) events"))
    }
    if digest != state.digest {
      faults.append(
        VerificationFault(
          kind: .index,
          message: "the log state's event-set digest is \(state.digest); the index's is \(digest)"
        ))
    }
    return faults
  }

  /// The faults of one event against the object index: filed under each of its objects, and
  /// redacted if one of them is deleted.
  private func erasureFaults(
    of logged: LoggedEvent, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> [VerificationFault] {
    var faults: [VerificationFault] = []
    let event = logged.event
    for object in event.change.objectIDs {
      let filed = try transaction.containsValue(
        forKey: objectKey(object, sequence: logged.sequence), in: objects)
      if !filed {
        faults.append(
          VerificationFault(
            kind: .index,
            message: "event \(logged.sequence) (\(event.stamp)) is not in the object index "
              + "under \(object)"))
      }
      if !event.isRedacted, event.change.deletedObject == nil,
        event.change.withoutPayload != nil,
        try deletion(of: object, in: transaction) != nil
      {
        faults.append(
          VerificationFault(
            kind: .erasure,
            message: "event \(logged.sequence) (\(event.stamp) \(event.change.kind)) keeps the "
              + "content of \(object), which was deleted"))
      }
    }
    if let hash = event.referencedBlob,
      try !transaction.containsValue(
        forKey: blobKey(hash, sequence: logged.sequence), in: blobReferences)
    {
      faults.append(
        VerificationFault(
          kind: .index,
          message: "event \(logged.sequence) (\(event.stamp)) is not in the blob index"))
    }
    return faults
  }
}
