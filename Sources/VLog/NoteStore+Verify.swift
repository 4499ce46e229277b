internal import Crypto
internal import Foundation
internal import LMDB

extension NoteStore {
  /// Checks the store: the event log (every entry's checksum and encoding, the index and the
  /// event-set digest against the log, erasure of deleted objects and of changes replaced
  /// longer ago than ``retention``), every blob against its hash, every entry of every
  /// database found again by a lookup of its key, and every projection entry against a fresh
  /// replay of the log.
  ///
  /// Verifying writes nothing: a replaced change past its retention period that waits in the
  /// retention queue is the next commit's work, not a fault (one that is not queued is). The
  /// replay runs in a write transaction that is then abandoned, so the store is unchanged and
  /// writers wait meanwhile. Memory grows with the size of the projections.
  ///
  /// - Parameter progress: Called every 10,000 events checked, with the count and the total.
  /// - Returns: The faults found; empty for a healthy store.
  public func verify(progress: ((_ checked: Int, _ total: Int) -> Void)? = nil) throws
    -> [VerificationFault]
  {
    guard !environment.configuration.isReadOnly else {
      throw VLogError(
        .invalidValue,
        "verifying replays the log in a write transaction it then abandons, which a store "
          + "opened read-only cannot begin: verify a copy on writable storage")
    }
    var faults: [VerificationFault] = []
    func checkData(in transaction: borrowing some Transaction & ~Copyable) throws {
      let now = Milliseconds(dependencies.now())
      faults += try eventLog.verify(
        in: transaction, retention: (retention, now), progress: progress)
      try verifyBlobs(in: transaction, faults: &faults)
      try verifyLookups(in: transaction, faults: &faults)
    }
    if let through = try read({ try ProjectionLag.projectedThrough(schema: schema, in: $0) }) {
      // The retention queue lags with the projections: what a deferred ingest's events
      // replaced is queued when they are projected. The store is checked as the next write
      // would leave it, in a transaction then abandoned.
      do {
        try abandoningWrite { transaction in
          _ = try catchUpProjections(in: transaction)
          try checkData(in: transaction)
        }
      } catch let error as VLogError where error.code == .corruptStore {
        // Damage that stops the catch-up is a fault to name; the log is checked as it is.
        faults = [
          VerificationFault(
            kind: .projection,
            message: "the projections include the log through event \(through) and cannot be "
              + "brought up to date: \(error.message)")
        ]
        try read { transaction in try checkData(in: transaction) }
        return faults
      }
    } else {
      try read { transaction in try checkData(in: transaction) }
    }
    // A projection can only be compared with a replay of a sound log.
    guard !faults.contains(where: { $0.kind == .corruptEvent }) else { return faults }
    faults += try verifyProjections()
    return faults
  }

  /// Runs `body` in a write transaction that is then thrown away.
  private func abandoningWrite(_ body: (borrowing WriteTransaction) throws -> Void) throws {
    struct Abandon: Error {}
    do {
      try VLogError.wrapping {
        try environment.write { transaction throws -> Void in
          try body(transaction)
          throw Abandon()
        }
      }
    } catch is Abandon {}
  }

  private func verifyBlobs(
    in transaction: borrowing some Transaction & ~Copyable, faults: inout [VerificationFault]
  ) throws {
    try transaction.forEach(in: schema.blobs) { key, value in
      let actual = Array(SHA256.hash(data: value))
      if !actual.elementsEqual(key) {
        faults.append(
          VerificationFault(
            kind: .blob,
            message: "blob \(BlobHash(bytes: Array(key))?.description ?? "?") holds bytes whose "
              + "SHA-256 is \(BlobHash(bytes: actual)!)"))
      }
    }
  }

  /// Looks every entry of every database up by its key: a scan reads a tree's leaves in order
  /// without the branch keys, and a lookup descends through them, so a damaged branch key
  /// hides entries from lookups (an index entry whose note "has no record") while every scan
  /// reads whole.
  private func verifyLookups(
    in transaction: borrowing some Transaction & ~Copyable, faults: inout [VerificationFault]
  ) throws {
    for database in schema.all {
      var hidden = 0
      var first: [UInt8]?
      try transaction.forEach(in: database) { key, _ in
        guard try !transaction.containsValue(forKey: key, in: database) else { return }
        hidden += 1
        if first == nil { first = Array(key) }
      }
      if let first {
        faults.append(
          VerificationFault(
            kind: .index,
            message: "\(database.name ?? "main"): \(hidden) entries a scan reads are not found "
              + "by their keys, the first \(Hex.string(first)) (a branch page is damaged)"))
      }
    }
  }

  /// Replays the log in a transaction that is thrown away, and compares every projection entry.
  private func verifyProjections() throws -> [VerificationFault] {
    var faults: [VerificationFault] = []
    try abandoningWrite { transaction in
      faults = []
      // Projections a deferred ingest left behind the log are compared once brought up
      // to date, as the next write would.
      _ = try catchUpProjections(in: transaction)
      var stored: [String: [[UInt8]: UInt64]] = [:]
      for database in schema.projections {
        var entries: [[UInt8]: UInt64] = [:]
        try transaction.forEach(in: database) { key, value in
          entries[Array(key)] = Hash.xxh3(value)
        }
        stored[database.name ?? ""] = entries
      }
      _ = try replayLog(into: transaction, progress: nil)
      for database in schema.projections {
        let name = database.name ?? ""
        var expected = stored[name] ?? [:]
        try transaction.forEach(in: database) { key, value in
          let key = Array(key)
          switch expected.removeValue(forKey: key) {
          case nil:
            faults.append(projectionFault(name, key, "is missing"))
          case let hash? where hash != Hash.xxh3(value):
            faults.append(projectionFault(name, key, "differs from a fresh replay"))
          default:
            break
          }
        }
        for key in expected.keys.sorted(by: { $0.lexicographicallyPrecedes($1) }) {
          faults.append(projectionFault(name, key, "is not produced by a replay"))
        }
      }
    }
    return faults
  }

  private func projectionFault(_ database: String, _ key: [UInt8], _ problem: String)
    -> VerificationFault
  {
    let subject: String
    switch database {
    case "notes" where key.count == 16, "noteTexts" where key.count == 16:
      subject = "note \(key.withUnsafeBytes { Identifier(bytes: $0) })"
    case "attachments" where key.count == 16:
      subject = "attachment \(key.withUnsafeBytes { Identifier(bytes: $0) })"
    case "tags":
      subject = "tag \(String(reflecting: String(decoding: key, as: UTF8.self)))"
    default:
      subject = "key " + Hex.string(key)
    }
    return VerificationFault(kind: .projection, message: "\(database): \(subject) \(problem)")
  }
}
