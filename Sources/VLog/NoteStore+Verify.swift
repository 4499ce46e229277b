internal import Crypto
internal import Foundation
internal import LMDB

/// One fault that ``NoteStore/verify()`` found.
public struct VerificationFault: Sendable, Hashable, CustomStringConvertible {
  /// What kind of check failed.
  public enum Kind: String, Sendable, Hashable {
    /// A log entry's checksum does not match its bytes, or the entry cannot be decoded.
    case corruptEvent
    /// The event index and the log disagree.
    case index
    /// A projection entry differs from what a fresh replay of the log produces.
    case projection
    /// A blob's bytes do not match their hash.
    case blob
  }

  /// What kind of check failed.
  public let kind: Kind
  /// What is wrong, and where: the event's sequence number, the database and key.
  public let message: String

  /// The kind and the message.
  public var description: String { "\(kind.rawValue): \(message)" }
}

/// What happened to one event in a note's history.
public struct NoteHistoryEntry: Sendable, Hashable {
  /// What became of a change.
  public enum Outcome: String, Sendable, Hashable {
    /// It set the field's current value.
    case won
    /// A change with a newer stamp set the field.
    case lost
    /// The note was deleted, which dominates every change.
    case erasedByDelete
    /// It created the note, or deleted it, or concerns one of its attachments.
    case recorded
  }

  /// The event and its place in the log.
  public let logged: LoggedEvent
  /// The field the event set, if it set one: `text`, `archived`, `sortDate`, `tags`,
  /// `attachments`.
  public let field: String?
  /// What became of it.
  public let outcome: Outcome
}

extension NoteStore {
  /// Every event about a note (its fields, creation, deletion and attachments), in log order,
  /// with which change won each field.
  ///
  /// Reads the whole log: the cost grows with the log.
  public func history(of id: NoteID) throws -> [NoteHistoryEntry] {
    let note = try note(id)
    let isDeleted = try read { transaction in
      try schema.hasTombstone(id.identifier, in: transaction)
    }
    var entries: [NoteHistoryEntry] = []
    try forEachEvent { logged in
      let change = logged.event.change
      guard change.noteID == id else { return true }
      let field: String?
      let winner: Stamp?
      switch change {
      case .textSet: (field, winner) = ("text", note?.stamps.text)
      case .archivedSet: (field, winner) = ("archived", note?.stamps.archived)
      case .sortDateSet: (field, winner) = ("sortDate", note?.stamps.sortDate)
      case .tagsSet: (field, winner) = ("tags", note?.stamps.tags)
      case .attachmentsSet: (field, winner) = ("attachments", note?.stamps.attachments)
      default: (field, winner) = (nil, nil)
      }
      let outcome: NoteHistoryEntry.Outcome
      if field == nil {
        outcome = .recorded
      } else if isDeleted {
        outcome = .erasedByDelete
      } else {
        outcome = winner == logged.event.stamp ? .won : .lost
      }
      entries.append(NoteHistoryEntry(logged: logged, field: field, outcome: outcome))
      return true
    }
    return entries
  }

  /// Checks the store: every event's checksum and encoding, the event index against the log,
  /// every blob against its hash, and every projection entry against a fresh replay of the log.
  ///
  /// The replay runs in a write transaction that is then abandoned, so the store is unchanged
  /// and writers wait meanwhile. Memory grows with the size of the projections.
  ///
  /// - Parameter progress: Called every 10,000 events checked, with the count and the total.
  /// - Returns: The faults found; empty for a healthy store.
  public func verify(progress: ((_ checked: Int, _ total: Int) -> Void)? = nil) throws
    -> [VerificationFault]
  {
    var faults: [VerificationFault] = []
    try read { transaction in
      try verifyLog(in: transaction, faults: &faults, progress: progress)
      try verifyBlobs(in: transaction, faults: &faults)
    }
    // A projection can only be compared with a replay of a sound log.
    guard !faults.contains(where: { $0.kind == .corruptEvent }) else { return faults }
    faults += try verifyProjections()
    return faults
  }

  private func verifyLog(
    in transaction: borrowing ReadTransaction, faults: inout [VerificationFault],
    progress: ((Int, Int) -> Void)?
  ) throws {
    var logged = 0
    let total = try transaction.count(in: schema.log)
    try transaction.forEach(in: schema.log) { key, value in
      let sequence = Keys.sequence(from: key)
      logged += 1
      if logged % 10_000 == 0 { progress?(logged, total) }
      let event: Event
      do throws(VLogError) {
        event = try EventCodec.decode(try LogRecord.event(in: value, sequence: sequence))
      } catch {
        faults.append(VerificationFault(kind: .corruptEvent, message: error.message))
        return
      }
      let indexed = try event.stamp.withKey { stampKey in
        try transaction.withValue(forKey: stampKey, in: schema.eventIndex) {
          $0.map(Keys.sequence(from:))
        }
      }
      if indexed != sequence {
        faults.append(
          VerificationFault(
            kind: .index,
            message: "event \(sequence) (\(event.stamp)) is indexed as "
              + (indexed.map { "event \($0)" } ?? "missing")))
      }
    }
    let indexCount = try transaction.count(in: schema.eventIndex)
    if indexCount != logged {
      faults.append(
        VerificationFault(
          kind: .index, message: "the index has \(indexCount) entries for \(logged) events"))
    }
  }

  private func verifyBlobs(
    in transaction: borrowing ReadTransaction, faults: inout [VerificationFault]
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

  /// Replays the log in a transaction that is thrown away, and compares every projection entry.
  private func verifyProjections() throws -> [VerificationFault] {
    struct Abandon: Error {}
    var faults: [VerificationFault] = []
    do {
      try VLogError.wrapping {
        try environment.write { transaction throws -> Void in
          faults = []
          var stored: [String: [[UInt8]: UInt64]] = [:]
          for database in schema.projections {
            var entries: [[UInt8]: UInt64] = [:]
            try transaction.forEach(in: database) { key, value in
              entries[Array(key)] = XXHash64.hash(value)
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
              case let hash? where hash != XXHash64.hash(value):
                faults.append(projectionFault(name, key, "differs from a fresh replay"))
              default:
                break
              }
            }
            for key in expected.keys.sorted(by: { $0.lexicographicallyPrecedes($1) }) {
              faults.append(projectionFault(name, key, "is not produced by a replay"))
            }
          }
          throw Abandon()
        }
      }
    } catch is Abandon {
      return faults
    }
    return faults
  }

  private func projectionFault(_ database: String, _ key: [UInt8], _ problem: String)
    -> VerificationFault
  {
    let subject: String
    switch database {
    case "notes" where key.count == 16:
      subject = "note \(key.withUnsafeBytes { Identifier(bytes: $0) })"
    case "attachments" where key.count == 16:
      subject = "attachment \(key.withUnsafeBytes { Identifier(bytes: $0) })"
    case "tags":
      subject = "tag \(String(reflecting: String(decoding: key, as: UTF8.self)))"
    default:
      subject = "key " + key.map { String(format: "%02x", $0) }.joined()
    }
    return VerificationFault(kind: .projection, message: "\(database): \(subject) \(problem)")
  }
}
