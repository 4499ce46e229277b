package import LMDB

/// The event log: the truth of a store, and of each account on a server.
///
/// A log is three kinds of entries in one LMDB environment, each under the log's key prefix
/// (empty for a store; the account's number on a server, so that one environment holds many
/// logs and none can reach another's entries):
///
/// | database | key | value |
/// |---|---|---|
/// | entries | prefix + sequence (8 bytes, big-endian) | ``LogRecord``: checksum (4) + encoded event |
/// | index | prefix + event id (the stamp's 24 bytes) | sequence (8 bytes, big-endian) |
/// | state | prefix + `logState` | ``LogState``: clock, event-set digest, counters, outbox watermark |
/// | objects | prefix + bucket (8) + object id (16) + sequence (8) | empty: the events that change a note, attachment or tag (see `EventLog+Erasure.swift`) |
/// | objects | prefix + 0xFF… (8) + object id (16) + 8 zero bytes | the object's first deletion (a tag's: its latest) |
/// | blob references | prefix + SHA-256 (32) + sequence (8) | empty: the `attachmentAdded` events, not redacted, that name the blob |
/// | fields | prefix + note id (16) + field (1) | stamp + sequence of the field's newest change (retention), unless the owner keeps it (``FieldIndex``) |
/// | superseded | prefix + milliseconds (8) + sequence (8) | empty: replaced changes, by when (retention) |
///
/// Invariants, kept by every write through an ``Appender``:
///
/// 1. Sequence numbers are dense from 1, in the order events were appended; an entry is never
///    removed, and changed only to restamp an unacknowledged local event the server refused
///    for clock skew (``Appender/restampOutbox(of:after:wallMilliseconds:in:)``) or to redact
///    it (``Appender/redact(at:reason:in:)``), keeping its id.
/// 2. An event id is in the log at most once: each entry has one index entry and the index has
///    no others.
/// 3. The state's digest is the ``EventSetDigest`` of the ids in the index; `pendingLocal`
///    counts this replica's events after the outbox watermark.
/// 4. Every entry carries a checksum of its event's bytes, checked on every read; a damaged
///    entry is reported (``VLogError/Code/corruptStore``), never decoded.
/// 5. Deleted means gone: once the log holds an object's deletion (`noteDeleted`,
///    `attachmentDeleted`), every other event that changes the object is redacted, those
///    appended later included (see `EventLog+Erasure.swift`).
///
/// `EventLog` is a value holding database handles: make one per use, read and write it inside
/// the caller's transactions. It knows nothing of notes; the projections are applied by whoever
/// appends (``NoteStore``'s write session, or nobody on a server).
package struct EventLog: Sendable {
  let entries: Database
  let index: Database
  let stateDatabase: Database
  let objects: Database
  let blobReferences: Database
  let fields: Database
  let superseded: Database
  /// Where the newest change of each note field is found, when its owner keeps it (a store's
  /// note records do); nil: the log keeps it in `fields`.
  let fieldIndex: (any FieldIndex)?
  /// What every key of this log starts with.
  let prefix: [UInt8]
  /// The rules its appenders follow: ``LogRules/standard`` but in tests.
  package var rules = LogRules.standard
  let stateKey: [UInt8]

  /// A log in three databases, under a key prefix.
  ///
  /// - Parameters:
  ///   - entries: The database of log entries, keyed by sequence number.
  ///   - index: The database from event id to sequence number.
  ///   - state: The database that holds the log's state record (it may hold other records).
  ///   - objects: The database from note and attachment ids to their events and deletions.
  ///   - blobReferences: The database from blob hashes to the events that add them.
  ///   - fields: The database of each note field's newest change.
  ///   - superseded: The database of replaced changes awaiting redaction.
  ///   - fieldIndex: Where each note field's newest change is kept, if not in `fields`: its
  ///     owner then queues replaced changes itself (``Appender/enqueueReplaced(_:)``).
  ///   - prefix: What every key of this log starts with: empty when the databases hold one log.
  package init(
    entries: Database, index: Database, state: Database, objects: Database,
    blobReferences: Database, fields: Database, superseded: Database,
    fieldIndex: (any FieldIndex)? = nil, prefix: [UInt8] = []
  ) {
    self.fieldIndex = fieldIndex
    self.entries = entries
    self.index = index
    self.stateDatabase = state
    self.objects = objects
    self.blobReferences = blobReferences
    self.fields = fields
    self.superseded = superseded
    self.prefix = prefix
    self.stateKey = prefix + Array("logState".utf8)
  }

  // MARK: Keys

  /// The key of the entry at `sequence`.
  func key(sequence: UInt64) -> [UInt8] {
    var key = prefix
    BigEndian.append(sequence, to: &key)
    return key
  }

  /// Lends the key of the entry at `sequence`, without allocating when the prefix is empty.
  @inline(__always)
  func withKey<R>(sequence: UInt64, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    if prefix.isEmpty { return try withUnsafeBytes(of: sequence.bigEndian, body) }
    return try key(sequence: sequence).withUnsafeBytes(body)
  }

  /// Lends the index key of an event id, without allocating when the prefix is empty.
  @inline(__always)
  func withKey<R>(id: Stamp, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    if prefix.isEmpty { return try id.withKey(body) }
    var key = prefix
    id.append(to: &key)
    return try key.withUnsafeBytes(body)
  }

  /// The sequence number an entry's key names.
  ///
  /// - Throws: ``VLogError/Code/corruptStore`` for a key of the wrong length.
  func sequence(fromKey key: UnsafeRawBufferPointer) throws(VLogError) -> UInt64 {
    guard key.count == prefix.count + 8,
      let sequence = BigEndian.read(UInt64.self, from: key, at: prefix.count)
    else {
      throw VLogError(
        .corruptStore, "a log entry's key is \(key.count) bytes, not \(prefix.count + 8)")
    }
    return sequence
  }

  /// The sequence number an index entry holds.
  ///
  /// - Throws: ``VLogError/Code/corruptStore`` for a value that is not 8 bytes.
  static func sequence(fromIndexValue value: UnsafeRawBufferPointer) throws(VLogError) -> UInt64 {
    guard value.count == 8, let sequence = BigEndian.read(UInt64.self, from: value) else {
      throw VLogError(.corruptStore, "an event index entry is \(value.count) bytes, not 8")
    }
    return sequence
  }

  /// The event id an index key names.
  ///
  /// - Throws: ``VLogError/Code/corruptStore`` for a key of the wrong length.
  func id(fromIndexKey key: UnsafeRawBufferPointer) throws(VLogError) -> Stamp {
    guard key.count == prefix.count + Stamp.byteCount else {
      throw VLogError(
        .corruptStore,
        "an event index key is \(key.count) bytes, not \(prefix.count + Stamp.byteCount)")
    }
    return Stamp(bytes: key, at: prefix.count)
  }

  /// The range of this log's entries after `sequence` (less than `UInt64.max`), up to `last`
  /// if given.
  func range(after sequence: UInt64, through last: UInt64? = nil) -> KeyRange {
    let start = key(sequence: sequence + 1)
    if let last { return .from(start, through: key(sequence: last)) }
    return prefix.isEmpty ? .from(start) : .from(start, through: key(sequence: .max))
  }

  /// Every key of this log, well-formed or not, in any of its databases.
  var ownKeys: KeyRange { prefix.isEmpty ? .all : .prefix(prefix) }
}

/// Where a log's owner keeps each note field's newest change (a store: in its note records),
/// for retention and erasure to look up.
package protocol FieldIndex: Sendable {
  /// The newest change to a note's field: its stamp and sequence number.
  func newestChange(
    to note: NoteID, field: NoteField, in transaction: borrowing some Transaction & ~Copyable
  ) throws -> (stamp: Stamp, sequence: UInt64)?
}
