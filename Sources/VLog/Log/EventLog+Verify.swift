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
    /// The file's page structure is damaged (``NoteStore/structureFaults(at:)``): its B-trees
    /// cannot be read safely, so nothing else was checked.
    case structure
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
    retention: (period: Duration?, now: Milliseconds) = (nil, .zero),
    progress: ((_ checked: Int, _ total: Int) -> Void)? = nil
  ) throws -> [VerificationFault] {
    var checks = LogChecks(retention: retention)
    let state: LogState
    do {
      state = try self.state(in: transaction)
    } catch let error as VLogError {
      return [VerificationFault(kind: .corruptEvent, message: error.message)]
    }
    let total = Int(clamping: state.lastSequence)
    // The retention queue, read once: what waits in it is the next commit's work, not a fault.
    var queued = Set<UInt64>()
    if retention.period != nil {
      try transaction.forEach(in: superseded, range: ownKeys) { key, _ in
        if key.count == prefix.count + 16,
          let sequence = BigEndian.read(UInt64.self, from: key, at: prefix.count + 8)
        {
          queued.insert(sequence)
        }
      }
    }
    try transaction.forEach(in: entries, range: ownKeys) { key, value in
      if (checks.checked + 1) % 10_000 == 0 { progress?(checks.checked + 1, total) }
      let logged: LoggedEvent
      do throws(VLogError) {
        logged = try decode(key: key, value: value)
      } catch {
        checks.unreadable(error.message)
        return
      }
      checks.entry(at: logged.sequence)
      let indexed = try sequence(of: logged.event.stamp, in: transaction)
      if indexed != logged.sequence {
        checks.report(
          VerificationFault(
            kind: .index,
            message: "event \(logged.sequence) (\(logged.event.stamp)) is indexed as "
              + (indexed.map { "event \($0)" } ?? "missing")))
      }
      try checks.check(
        logged,
        isFiled: { object in
          try transaction.containsValue(
            forKey: objectKey(object, sequence: logged.sequence), in: objects)
        },
        isDeleted: { object in try deletion(of: object, in: transaction) != nil },
        isReferenced: { hash in
          try transaction.containsValue(
            forKey: blobKey(hash, sequence: logged.sequence), in: blobReferences)
        },
        newestChange: { key in
          try newestChange(to: key.note, field: key.field, in: transaction)?.stamp
        },
        isQueued: { queued.contains($0) })
    }
    var indexed: UInt64 = 0
    var digest = EventSetDigest.empty
    try transaction.forEach(in: index, range: ownKeys) { key, _ in
      indexed += 1
      guard key.count == prefix.count + Stamp.byteCount else {
        checks.report(
          VerificationFault(kind: .index, message: "an index key is \(key.count) bytes"))
        return
      }
      digest.add(eventID: UnsafeRawBufferPointer(rebasing: key[prefix.count...]))
    }
    checks.checkTotals(
      count: indexed, digest: digest, recordedDigest: state.digest,
      describe: (
        count: { indexed, checked in "the index has \(indexed) entries for \(checked) events" },
        digest: { recorded, computed in
          "the log state's event-set digest is \(recorded); the index's is \(computed)"
        }
      ))
    return checks.faults
  }
}
