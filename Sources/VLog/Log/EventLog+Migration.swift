package import LMDB

extension EventLog {
  /// Rewrites the values of a database in one transaction, in batches of 10,000 entries so that
  /// memory stays bounded however large the database.
  ///
  /// - Parameter transform: The new value for a key and value, or nil to keep the entry.
  package static func rewriteValues(
    in database: Database, transaction: borrowing WriteTransaction,
    _ transform: (_ key: [UInt8], _ value: [UInt8]) -> [UInt8]?
  ) throws {
    let batchSize = 10_000
    var start: [UInt8]? = nil
    while true {
      var batch: [([UInt8], [UInt8])] = []
      try transaction.withEntries(in: database, range: start.map { .from($0) } ?? .all) {
        entries in
        while batch.count < batchSize,
          let entry = try entries.next({ key, value in (Array(key), Array(value)) })
        {
          if entry.0 != start { batch.append(entry) }
        }
      }
      for (key, value) in batch {
        if let rewritten = transform(key, value) {
          try transaction.put(rewritten, forKey: key, in: database)
        }
      }
      guard batch.count == batchSize, let last = batch.last?.0 else { return }
      start = last
    }
  }

  /// Rewrites the events of a log's entries (a store's or a server's `log` database) that
  /// `transform` gives another form of, each with its checksum: what a test builds an older
  /// version's log with. An entry that does not decode is kept.
  package static func rewriteEvents(
    in database: Database, transaction: borrowing WriteTransaction,
    _ transform: (Event) -> Event?
  ) throws {
    try rewriteValues(in: database, transaction: transaction) { _, value in
      // An entry that does not decode is not this helper's to change: left as it is, `verify`
      // reports it.
      guard value.count >= LogRecord.headerSize,
        let event = try? Event(encoded: Array(value[LogRecord.headerSize...])),
        let rewritten = transform(event)
      else { return nil }
      let bytes = rewritten.encoded()
      var record = [UInt8](repeating: 0, count: LogRecord.headerSize + bytes.count)
      record.withUnsafeMutableBytes { LogRecord.write(bytes, into: $0) }
      return record
    }
  }

  /// Moves a store's log from format 1 to 2: every entry's checksum from XXH64 to XXH3, and
  /// the state's event-set digest to XXH3-128, recomputed from the index. An entry whose old
  /// checksum does not match is left as it is, so that it stays reported as damaged.
  package func migrateFromXXH64(in transaction: borrowing WriteTransaction) throws {
    try Self.rewriteValues(in: entries, transaction: transaction) { _, value in
      guard value.count >= LogRecord.headerSize else { return nil }
      return value.withUnsafeBytes { entry -> [UInt8]? in
        let event = UnsafeRawBufferPointer(rebasing: entry[LogRecord.headerSize...])
        guard
          BigEndian.read(UInt32.self, from: entry)
            == UInt32(
              truncatingIfNeeded: Hash.legacyXXH64(event))
        else { return nil }
        var record = [UInt8](repeating: 0, count: value.count)
        record.withUnsafeMutableBytes { LogRecord.write(Array(event), into: $0) }
        return record
      }
    }
    guard try transaction.containsValue(forKey: stateKey, in: stateDatabase) else { return }
    var state = try self.state(in: transaction)
    state.digest = .empty
    try forEachID(in: transaction) { id in id.withKey { state.digest.add(eventID: $0) } }
    try write(state, in: transaction)
  }
}
