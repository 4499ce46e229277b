internal import Logging
internal import NIOCore
internal import PostgresNIO
internal import VLog

/// Checks one account's event log on PostgreSQL, inside a repeatable-read transaction: the
/// same checks as the engine's `EventLog.verify` makes of a log in LMDB — each record's
/// checksum and encoding, dense sequence numbers, ids, the head's digest, the object and blob
/// indexes, erasure, and retention.
struct PostgresVerifier {
  let account: Int64
  let connection: PostgresConnection
  let logger: Logger

  /// The events checked, and the faults found.
  func verify(retention: (period: Duration?, now: UInt64)) async throws
    -> (events: Int, faults: [VerificationFault])
  {
    var faults: [VerificationFault] = []
    var head = Head()
    let heads = try await connection.query(
      "SELECT last_sequence, digest FROM vlog_heads WHERE account = \(account)", logger: logger)
    for try await (sequence, digest) in heads.decode((Int64, ByteBuffer).self) {
      head.sequence = UInt64(clamping: sequence)
      guard let digest = EventSetDigest(bytes: Array(digest.readableBytesView)) else {
        faults.append(VerificationFault(kind: .index, message: "the head's digest is malformed"))
        continue
      }
      head.digest = digest
    }
    let objects = try await pairs(
      "SELECT object, sequence FROM vlog_objects WHERE account = \(account)")
    let references = try await pairs(
      "SELECT hash, sequence FROM vlog_blob_references WHERE account = \(account)")
    var deletedObjects = Set<[UInt8]>()
    let deletions = try await connection.query(
      """
      SELECT object FROM vlog_deletions WHERE account = \(account) AND sequence IS NOT NULL
      """, logger: logger)
    for try await object in deletions.decode(ByteBuffer.self) {
      deletedObjects.insert(Array(object.readableBytesView))
    }
    var newest: [[UInt8]: Stamp] = [:]
    let fields = try await connection.query(
      "SELECT note, field, stamp FROM vlog_fields WHERE account = \(account)", logger: logger)
    for try await (note, field, stamp) in fields.decode((ByteBuffer, Int16, ByteBuffer).self) {
      // A malformed stamp is a fault to report, not an error that stops the check.
      guard let stamp = try? PostgresLogWriter.stamp(stamp) else {
        faults.append(VerificationFault(kind: .index, message: "a field record is malformed"))
        continue
      }
      newest[Array(note.readableBytesView) + [UInt8(truncatingIfNeeded: field)]] = stamp
    }

    var checked = 0
    var expected: UInt64 = 1
    var digest = EventSetDigest.empty
    let rows = try await connection.query(
      "SELECT sequence, id, record FROM vlog_events WHERE account = \(account) ORDER BY sequence",
      logger: logger)
    for try await (stored, id, record) in rows.decode((Int64, ByteBuffer, ByteBuffer).self) {
      checked += 1
      let sequence = UInt64(clamping: stored)
      if sequence != expected {
        faults.append(
          VerificationFault(
            kind: .index, message: "event \(sequence) follows event \(expected - 1)"))
      }
      expected = sequence + 1
      // A malformed id is reported as a fault below, and the check goes on.
      if let stamp = try? PostgresLogWriter.stamp(id) {
        digest.add(stamp)
      } else {
        faults.append(
          VerificationFault(kind: .index, message: "event \(sequence)'s id is malformed"))
      }
      let event: Event
      do {
        event = try PostgresLogWriter.event(record: record, sequence: sequence)
      } catch let error as VLogError {
        faults.append(VerificationFault(kind: .corruptEvent, message: error.message))
        continue
      }
      if Array(id.readableBytesView) != event.stamp.bytes {
        faults.append(
          VerificationFault(
            kind: .index, message: "event \(sequence) (\(event.stamp)) is stored under another id"))
      }
      for object in event.change.objectIDs {
        if !objects.contains(Pair(object.bytes, sequence)) {
          faults.append(
            VerificationFault(
              kind: .index,
              message:
                "event \(sequence) (\(event.stamp)) is not in the object index under \(object)"))
        }
        if !event.isRedacted, event.change.deletedObject == nil,
          event.change.withoutPayload != nil, deletedObjects.contains(object.bytes)
        {
          faults.append(
            VerificationFault(
              kind: .erasure,
              message: "event \(sequence) (\(event.stamp) \(event.change.kind)) keeps the "
                + "content of \(object), which was deleted"))
        }
      }
      if let hash = event.referencedBlob, !references.contains(Pair(hash.bytes, sequence)) {
        faults.append(
          VerificationFault(
            kind: .index, message: "event \(sequence) (\(event.stamp)) is not in the blob index"))
      }
      if let period = retention.period, !event.isRedacted, let field = event.change.field,
        let note = event.change.noteID,
        let replacement = newest[note.identifier.bytes + [field]], replacement > event.stamp,
        EventLog.isDue(replacement.time.milliseconds, retention: period, now: retention.now)
      {
        faults.append(
          VerificationFault(
            kind: .erasure,
            message: "event \(sequence) (\(event.stamp) \(event.change.kind)) was replaced longer "
              + "ago than the retention period and keeps its values"))
      }
    }
    if UInt64(checked) != head.sequence {
      faults.append(
        VerificationFault(
          kind: .index, message: "the head says \(head.sequence) events; the log has \(checked)"))
    }
    if digest != head.digest {
      faults.append(
        VerificationFault(
          kind: .index,
          message: "the head's event-set digest is \(head.digest); the log's is \(digest)"))
    }
    return (checked, faults)
  }

  struct Pair: Hashable {
    let bytes: [UInt8]
    let sequence: UInt64
    init(_ bytes: [UInt8], _ sequence: UInt64) {
      self.bytes = bytes
      self.sequence = sequence
    }
  }

  /// The (bytes, sequence) rows a query returns.
  private func pairs(_ query: PostgresQuery) async throws -> Set<Pair> {
    var pairs = Set<Pair>()
    let rows = try await connection.query(query, logger: logger)
    for try await (bytes, sequence) in rows.decode((ByteBuffer, Int64).self) {
      pairs.insert(Pair(Array(bytes.readableBytesView), UInt64(clamping: sequence)))
    }
    return pairs
  }
}
