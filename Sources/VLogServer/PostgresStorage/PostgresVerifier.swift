internal import Logging
internal import NIOCore
internal import PostgresNIO
internal import VLog

/// Checks one account's event log on PostgreSQL, inside a repeatable-read transaction: reads
/// the head, the indexes and every record, and hands them to the engine's ``LogChecks`` — the
/// same checks `EventLog.verify` makes of a log in LMDB. What is PostgreSQL's own (a record
/// stored under another id, a malformed row) is reported here.
struct PostgresVerifier {
  let account: Int64
  let connection: PostgresConnection
  let logger: Logger

  /// The events checked, and the faults found.
  func verify(retention: (period: Duration?, now: Milliseconds)) async throws
    -> (events: Int, faults: [VerificationFault])
  {
    var checks = LogChecks(retention: retention)
    var head = Head()
    let heads = try await connection.query(
      "SELECT last_sequence, digest FROM vlog_heads WHERE account = \(account)", logger: logger)
    for try await (sequence, digest) in heads.decode((Int64, ByteBuffer).self) {
      head.sequence = UInt64(clamping: sequence)
      guard let digest = EventSetDigest(bytes: Array(digest.readableBytesView)) else {
        checks.report(VerificationFault(kind: .index, message: "the head's digest is malformed"))
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
    var newest: [FieldKey: Stamp] = [:]
    let fields = try await connection.query(
      "SELECT note, field, stamp FROM vlog_fields WHERE account = \(account)", logger: logger)
    for try await (note, field, stamp) in fields.decode((ByteBuffer, Int16, ByteBuffer).self) {
      // A malformed row is a fault to report, not an error that stops the check.
      guard let stamp = try? PostgresLogWriter.stamp(stamp),
        let note = try? PostgresLogWriter.identifier(note),
        let field = UInt8(exactly: field).flatMap(NoteField.init(rawValue:))
      else {
        checks.report(VerificationFault(kind: .index, message: "a field record is malformed"))
        continue
      }
      newest[FieldKey(note: NoteID(note), field: field)] = stamp
    }

    // The retention queue: what waits in it is the next push's work, not a fault.
    var queued = Set<UInt64>()
    if retention.period != nil {
      let rows = try await connection.query(
        "SELECT sequence FROM vlog_superseded WHERE account = \(account)", logger: logger)
      for try await sequence in rows.decode(Int64.self) {
        queued.insert(UInt64(clamping: sequence))
      }
    }

    var digest = EventSetDigest.empty
    let rows = try await connection.query(
      "SELECT sequence, id, record FROM vlog_events WHERE account = \(account) ORDER BY sequence",
      logger: logger)
    for try await (stored, id, record) in rows.decode((Int64, ByteBuffer, ByteBuffer).self) {
      let sequence = UInt64(clamping: stored)
      checks.entry(at: sequence)
      // A malformed id is reported as a fault below, and the check goes on.
      if let stamp = try? PostgresLogWriter.stamp(id) {
        digest.add(stamp)
      } else {
        checks.report(
          VerificationFault(kind: .index, message: "event \(sequence)'s id is malformed"))
      }
      let event: Event
      do {
        event = try PostgresLogWriter.event(record: record, sequence: sequence)
      } catch let error as VLogError {
        checks.report(VerificationFault(kind: .corruptEvent, message: error.message))
        continue
      }
      if Array(id.readableBytesView) != event.stamp.bytes {
        checks.report(
          VerificationFault(
            kind: .index, message: "event \(sequence) (\(event.stamp)) is stored under another id"))
      }
      checks.check(
        LoggedEvent(sequence: sequence, event: event),
        isFiled: { objects.contains(Pair($0.bytes, sequence)) },
        isDeleted: { deletedObjects.contains($0.bytes) },
        isReferenced: { references.contains(Pair($0.bytes, sequence)) },
        newestChange: { newest[$0] },
        isQueued: { queued.contains($0) })
    }
    checks.checkTotals(
      count: head.sequence, digest: digest, recordedDigest: head.digest,
      describe: (
        count: { recorded, checked in "the head says \(recorded) events; the log has \(checked)" },
        digest: { recorded, computed in
          "the head's event-set digest is \(recorded); the log's is \(computed)"
        }
      ))
    return (checks.checked, checks.faults)
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
