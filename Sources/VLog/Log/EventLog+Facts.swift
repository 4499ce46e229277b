internal import LMDB

extension EventLog {
  /// The log's facts as its LMDB databases hold them inside `transaction`, for its
  /// ``LogBatch``: every lookup is answered at once.
  func facts(in transaction: borrowing some Transaction & ~Copyable) -> StoredLogFacts {
    StoredLogFacts(log: self, reads: TransactionReads(transaction))
  }
}

/// A log's ``LogFacts`` read from its LMDB databases, inside one open transaction (see
/// ``TransactionReads``: made and dropped inside the closure the transaction is lent to).
struct StoredLogFacts: LogFacts {
  let log: EventLog
  let reads: TransactionReads

  func isDeleted(_ object: Identifier) throws -> Bool {
    try log.deletion(of: object, in: reads) != nil
  }

  func tagDeletion(of tagObject: Identifier) throws -> Stamp? {
    try log.tagDeletion(ofObject: tagObject, in: reads)
  }

  func newestChanges(to fields: [FieldKey]) throws -> [FieldKey: FieldChange] {
    var found: [FieldKey: FieldChange] = [:]
    for key in fields {
      if let newest = try log.newestChange(to: key.note, field: key.field, in: reads) {
        found[key] = FieldChange(stamp: newest.stamp, sequence: newest.sequence)
      }
    }
    return found
  }

  func sequences(of objects: [Identifier]) throws -> [Identifier: [UInt64]] {
    var found: [Identifier: [UInt64]] = [:]
    for object in objects where found[object] == nil {
      found[object] = try log.sequences(of: object, in: reads)
    }
    return found
  }

  func events(at sequences: [UInt64]) throws -> [UInt64: Event] {
    var found: [UInt64: Event] = [:]
    for sequence in sequences {
      if let logged = try log.event(at: sequence, in: reads) { found[sequence] = logged.event }
    }
    return found
  }

  func referenced(_ blobs: [BlobHash: Set<UInt64>]) throws -> [BlobHash: Bool] {
    var found: [BlobHash: Bool] = [:]
    for (hash, excluded) in blobs {
      found[hash] = try log.references(hash, excluding: excluded, in: reads)
    }
    return found
  }
}
