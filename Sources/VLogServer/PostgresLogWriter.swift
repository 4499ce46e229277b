internal import Logging
internal import NIOCore
internal import PostgresNIO
internal import VLog

/// Writes to one account's event log on PostgreSQL inside the transaction that holds the
/// account's head row (`SELECT … FOR UPDATE`): the engine's appender (`EventLog.Appender`) over
/// tables instead of LMDB databases, with the same rules — the same events stored, the same
/// redactions, the same replaced-change queue — so that a log holds the same bytes on either
/// backend (a property test pushes the same events to both and compares).
///
/// Reads go to the database in batches: before the appends, the deletion markers and newest
/// field changes of every object the events name; while erasing, each object's events at once.
/// Writes are kept in memory until ``commit()`` sends one statement per table.
struct PostgresLogWriter {
  let account: Int64
  let connection: PostgresConnection
  let logger: Logger
  /// The log's head, with this transaction's appends.
  private(set) var head: Head
  private let initialHead: Head
  /// Events appended so far.
  private(set) var appended = 0
  /// Events redacted so far.
  private(set) var redactedCount = 0

  /// The events appended in this transaction, in order, as they will be stored.
  private var newEvents: [UInt64: Event] = [:]
  private var newSequences: [UInt64] = []
  /// Stored events this transaction redacted, and stored events it read.
  private var rewritten: [UInt64: Event] = [:]
  private var loaded: [UInt64: Event] = [:]
  /// Whether each note or attachment looked up is deleted; the deletions to mark.
  private var deleted: [Identifier: Bool] = [:]
  private var newDeletions: [(object: Identifier, sequence: UInt64)] = []
  /// Each tag object's latest deletion, looked up (nil: none); the ones to write.
  private var tagDeletions: [Identifier: Stamp?] = [:]
  private var newTagDeletions: [Identifier: Stamp] = [:]
  /// Object index entries of the appended events, in order, and by object.
  private var newObjects: [(object: Identifier, sequence: UInt64)] = []
  private var newObjectSequences: [Identifier: [UInt64]] = [:]
  /// Blob references added (of appended events) and removed (of stored events).
  private var addedReferences: [BlobHash: Set<UInt64>] = [:]
  private var removedReferences: [BlobHash: Set<UInt64>] = [:]
  private var releasedCandidates: Set<BlobHash> = []
  /// Each note field's newest change looked up (nil: none), `dirty` ones to write; fields of
  /// deleted notes to remove.
  private var fields: [NoteField: FieldChange?] = [:]
  private var forgottenFields: Set<NoteField> = []
  /// Replaced changes queued (by this transaction) and dequeued (stored ones).
  private var newSuperseded: [Superseded] = []
  private var removedSuperseded: [Superseded] = []
  /// Tags changes naming a deleted tag, to redact at commit if a newer tags change of their
  /// note replaced them.
  private var pendingTagsChecks: [(sequence: UInt64, note: NoteID, stamp: Stamp)] = []

  /// A note's field, as `vlog_fields` keys it.
  struct NoteField: Hashable {
    let note: NoteID
    let field: UInt8
  }

  struct FieldChange {
    var stamp: Stamp
    var sequence: UInt64
    var dirty: Bool
  }

  struct Superseded: Hashable {
    var milliseconds: UInt64
    var sequence: UInt64
  }

  init(account: Int64, head: Head, connection: PostgresConnection, logger: Logger) {
    self.account = account
    self.head = head
    self.initialHead = head
    self.connection = connection
    self.logger = logger
  }

  // MARK: - Appending

  /// Reads, in a few statements, what appending `events` will look up: the deletion markers
  /// of the objects and tags they name, and the newest changes of their notes' fields.
  mutating func prefetch(for events: [Event]) async throws {
    var objects = Set<Identifier>()
    var notes = Set<NoteID>()
    for event in events {
      let (first, second) = event.change.objects
      if let first { objects.insert(first) }
      if let second { objects.insert(second) }
      switch event.change {
      case .tagsSet, .tagRenamed: objects.formUnion(event.change.tagObjectIDs)
      default: break
      }
      if case .tagRenamed(let name) = event.change {
        objects.insert(EventLog.tagObject(TagID(name: name)))
      }
      if case .tagDeleted(let name) = event.change {
        objects.insert(EventLog.tagObject(TagID(name: name)))
      }
      if event.change.field != nil, let note = event.change.noteID { notes.insert(note) }
    }
    objects.subtract(deleted.keys)
    if !objects.isEmpty {
      let list = objects.map { ByteBuffer(bytes: $0.bytes) }
      let rows = try await connection.query(
        """
        SELECT object, sequence, stamp FROM vlog_deletions
        WHERE account = \(account) AND object = ANY(\(list))
        """, logger: logger)
      var found: [Identifier: (UInt64?, Stamp?)] = [:]
      for try await (object, sequence, stamp) in rows.decode(
        (ByteBuffer, Int64?, ByteBuffer?).self)
      {
        found[try Self.identifier(object)] = (
          try sequence.map(Self.sequence), try stamp.map(Self.stamp)
        )
      }
      for object in objects {
        let marker = found[object]
        deleted[object] = marker?.0 != nil
        tagDeletions[object] = .some(marker?.1)
      }
    }
    let unknownNotes = notes.filter { fields[NoteField(note: $0, field: 1)] == nil }
    if !unknownNotes.isEmpty {
      let list = unknownNotes.map { ByteBuffer(bytes: $0.identifier.bytes) }
      for note in unknownNotes {
        for field in Change.fields { fields[NoteField(note: note, field: field)] = .some(nil) }
      }
      let rows = try await connection.query(
        """
        SELECT note, field, stamp, sequence FROM vlog_fields
        WHERE account = \(account) AND note = ANY(\(list))
        """, logger: logger)
      for try await (note, field, stamp, sequence) in rows.decode(
        (ByteBuffer, Int16, ByteBuffer, Int64).self)
      {
        guard let field = UInt8(exactly: field) else {
          throw ServerError.storage("vlog_fields holds field \(field)")
        }
        fields[NoteField(note: NoteID(try Self.identifier(note)), field: field)] = FieldChange(
          stamp: try Self.stamp(stamp), sequence: try Self.sequence(sequence), dirty: false)
      }
    }
  }

  /// Appends an event the log does not hold: stored redacted if it changes a deleted object;
  /// a deletion redacts the object's other events.
  mutating func append(_ pushed: Event) async throws {
    let event = try await erasing(pushed)
    let sequence = head.sequence + 1
    head.sequence = sequence
    head.digest.add(event.stamp)
    newEvents[sequence] = event
    newSequences.append(sequence)
    appended += 1
    try await indexObjects(of: event, at: sequence)
    try await trackReplacement(of: event, at: sequence)
  }

  /// The form in which `event` is stored (`EventLog.Appender.erasing`).
  private mutating func erasing(_ event: Event) async throws -> Event {
    guard !event.isRedacted, event.change.deletedObject == nil else { return event }
    if case .tagRenamed(let name) = event.change,
      let deletion = try await tagDeletion(of: EventLog.tagObject(TagID(name: name))),
      event.stamp < deletion
    {
      return event.redacted(.deleted)
    }
    let (first, second) = event.change.objects
    if let first, try await isDeleted(first) { return event.redacted(.deleted) }
    if let second, try await isDeleted(second) { return event.redacted(.deleted) }
    return event
  }

  private mutating func isDeleted(_ object: Identifier) async throws -> Bool {
    if let known = deleted[object] { return known }
    let rows = try await connection.query(
      """
      SELECT sequence FROM vlog_deletions
      WHERE account = \(account) AND object = \(ByteBuffer(bytes: object.bytes))
        AND sequence IS NOT NULL
      """, logger: logger)
    var found = false
    for try await _ in rows { found = true }
    deleted[object] = found
    return found
  }

  private mutating func tagDeletion(of object: Identifier) async throws -> Stamp? {
    if let known = tagDeletions[object] { return known }
    let rows = try await connection.query(
      """
      SELECT stamp FROM vlog_deletions
      WHERE account = \(account) AND object = \(ByteBuffer(bytes: object.bytes))
      """, logger: logger)
    var found: Stamp?
    for try await stamp in rows.decode(ByteBuffer?.self) {
      found = try stamp.map(Self.stamp)
    }
    tagDeletions[object] = .some(found)
    return found
  }

  /// `EventLog.Appender.indexObjects`.
  private mutating func indexObjects(of event: Event, at sequence: UInt64) async throws {
    let (first, second) = event.change.objects
    if let first { index(first, sequence) }
    if let second { index(second, sequence) }
    switch event.change {
    case .tagsSet, .tagRenamed:
      for object in event.change.tagObjectIDs { index(object, sequence) }
    default: break
    }
    if let hash = event.referencedBlob { addedReferences[hash, default: []].insert(sequence) }
    if case .tagDeleted(let name) = event.change {
      try await eraseTag(TagID(name: name), deletedAt: event.stamp)
    }
    if let object = event.change.deletedObject, try await !isDeleted(object) {
      newDeletions.append((object, sequence))
      deleted[object] = true
      try await erase(object, isNote: event.change.kind == .noteDeleted)
    }
  }

  private mutating func index(_ object: Identifier, _ sequence: UInt64) {
    newObjects.append((object, sequence))
    newObjectSequences[object, default: []].append(sequence)
  }

  /// `EventLog.Appender.eraseTag`.
  private mutating func eraseTag(_ tag: TagID, deletedAt stamp: Stamp) async throws {
    let object = EventLog.tagObject(tag)
    if let latest = try await tagDeletion(of: object), latest >= stamp { return }
    tagDeletions[object] = .some(stamp)
    newTagDeletions[object] = stamp
    let sequences = try await sequences(of: object)
    try await load(sequences)
    for sequence in sequences {
      guard let event = try await event(at: sequence), !event.isRedacted, event.stamp < stamp
      else { continue }
      switch event.change {
      case .tagRenamed:
        try await redact(at: sequence, reason: .deleted)
      case .tagsSet(let note, _):
        pendingTagsChecks.append((sequence, note, event.stamp))
      default: break
      }
    }
  }

  /// `EventLog.Appender.erase`: redacts every event of a deleted object but its deletions.
  private mutating func erase(_ object: Identifier, isNote: Bool) async throws {
    if isNote {
      for field in Change.fields {
        let key = NoteField(note: NoteID(object), field: field)
        fields[key] = .some(nil)
        forgottenFields.insert(key)
      }
    }
    let sequences = try await sequences(of: object)
    try await load(sequences)
    for sequence in sequences { try await redact(at: sequence, reason: .deleted) }
  }

  /// The sequence numbers of the events that change an object, in log order.
  private func sequences(of object: Identifier) async throws -> [UInt64] {
    let rows = try await connection.query(
      """
      SELECT sequence FROM vlog_objects
      WHERE account = \(account) AND object = \(ByteBuffer(bytes: object.bytes))
      ORDER BY sequence
      """, logger: logger)
    var sequences: [UInt64] = []
    for try await sequence in rows.decode(Int64.self) {
      sequences.append(try Self.sequence(sequence))
    }
    return sequences + (newObjectSequences[object] ?? [])
  }

  /// Reads the stored events among `sequences` that this transaction has not read yet.
  private mutating func load(_ sequences: [UInt64]) async throws {
    let missing = sequences.filter {
      newEvents[$0] == nil && rewritten[$0] == nil && loaded[$0] == nil
    }
    guard !missing.isEmpty else { return }
    let rows = try await connection.query(
      """
      SELECT sequence, record FROM vlog_events
      WHERE account = \(account) AND sequence = ANY(\(missing.map { Int64(clamping: $0) }))
      """, logger: logger)
    for try await (sequence, record) in rows.decode((Int64, ByteBuffer).self) {
      let sequence = try Self.sequence(sequence)
      loaded[sequence] = try Self.event(record: record, sequence: sequence)
    }
  }

  /// The event at `sequence`, as this transaction sees it.
  private mutating func event(at sequence: UInt64) async throws -> Event? {
    if let event = newEvents[sequence] ?? rewritten[sequence] ?? loaded[sequence] {
      return event
    }
    try await load([sequence])
    return loaded[sequence]
  }

  /// `EventLog.Appender.redact`: replaces the event at `sequence` with its redacted form.
  @discardableResult
  private mutating func redact(at sequence: UInt64, reason: Event.Redaction) async throws -> Bool {
    guard let event = try await event(at: sequence) else {
      throw ServerError.storage(
        "account \(account): the object index names event \(sequence), which is missing")
    }
    let redacted = event.redacted(reason)
    guard redacted.isRedacted, !event.isRedacted else { return false }
    if newEvents[sequence] != nil {
      newEvents[sequence] = redacted
    } else {
      rewritten[sequence] = redacted
      loaded[sequence] = nil
    }
    if let hash = event.referencedBlob {
      if addedReferences[hash]?.remove(sequence) == nil {
        removedReferences[hash, default: []].insert(sequence)
      }
      releasedCandidates.insert(hash)
    }
    redactedCount += 1
    return true
  }

  /// `EventLog.Appender.trackReplacement`.
  private mutating func trackReplacement(of event: Event, at sequence: UInt64) async throws {
    guard let field = event.change.field, let note = event.change.noteID,
      event.redaction != .deleted
    else { return }
    let key = NoteField(note: note, field: field)
    guard let newest = try await newestChange(key) else {
      fields[key] = FieldChange(stamp: event.stamp, sequence: sequence, dirty: true)
      return
    }
    if event.stamp > newest.stamp {
      fields[key] = FieldChange(stamp: event.stamp, sequence: sequence, dirty: true)
      newSuperseded.append(
        Superseded(milliseconds: event.stamp.time.milliseconds, sequence: newest.sequence))
    } else if !event.isRedacted {
      newSuperseded.append(
        Superseded(milliseconds: newest.stamp.time.milliseconds, sequence: sequence))
    }
  }

  private mutating func newestChange(_ key: NoteField) async throws -> FieldChange? {
    if let known = fields[key] { return known }
    let rows = try await connection.query(
      """
      SELECT stamp, sequence FROM vlog_fields
      WHERE account = \(account) AND note = \(ByteBuffer(bytes: key.note.identifier.bytes))
        AND field = \(Int16(key.field))
      """, logger: logger)
    var found: FieldChange?
    for try await (stamp, sequence) in rows.decode((ByteBuffer, Int64).self) {
      found = FieldChange(
        stamp: try Self.stamp(stamp), sequence: try Self.sequence(sequence), dirty: false)
    }
    fields[key] = .some(found)
    return found
  }

  /// `EventLog.Appender.applyRetention`: redacts the replaced changes whose period has passed
  /// at `now`, each checked against its field's newest change first.
  @discardableResult
  mutating func applyRetention(_ retention: Duration?, now: UInt64) async throws -> Int {
    guard let retention else { return 0 }
    let period = retention.wholeMilliseconds
    var due: [(entry: Superseded, stored: Bool)] = []
    if period == 0 || now >= period {
      let latest = period == 0 ? Int64.max : Int64(clamping: now - period)
      let rows = try await connection.query(
        """
        SELECT replaced_at, sequence FROM vlog_superseded
        WHERE account = \(account) AND replaced_at <= \(latest)
        """, logger: logger)
      for try await (milliseconds, sequence) in rows.decode((Int64, Int64).self) {
        let entry = Superseded(
          milliseconds: try Self.sequence(milliseconds), sequence: try Self.sequence(sequence))
        due.append((entry, true))
      }
    }
    let stillQueued = newSuperseded.filter {
      !EventLog.isDue($0.milliseconds, retention: retention, now: now)
    }
    for entry in newSuperseded
    where EventLog.isDue(entry.milliseconds, retention: retention, now: now) {
      due.append((entry, false))
    }
    newSuperseded = stillQueued
    guard !due.isEmpty else { return 0 }
    due.sort {
      ($0.entry.milliseconds, $0.entry.sequence) < ($1.entry.milliseconds, $1.entry.sequence)
    }
    try await load(due.map(\.entry.sequence))
    var redacted = 0
    for (entry, stored) in due {
      if stored { removedSuperseded.append(entry) }
      guard let event = try await event(at: entry.sequence), !event.isRedacted,
        let field = event.change.field, let note = event.change.noteID,
        let newest = try await newestChange(NoteField(note: note, field: field)),
        newest.stamp > event.stamp
      else { continue }
      if try await redact(at: entry.sequence, reason: .superseded) { redacted += 1 }
    }
    return redacted
  }

  // MARK: - Committing

  /// Redacts the tags changes a tag deletion left pending, writes everything this transaction
  /// changed — what erasure and retention changed first, then the appends in one statement —
  /// and returns the blobs no event references any more.
  mutating func commit() async throws -> Set<BlobHash> {
    let checks = pendingTagsChecks
    pendingTagsChecks.removeAll()
    for (sequence, note, stamp) in checks {
      if let newest = try await newestChange(NoteField(note: note, field: 4)),
        newest.stamp > stamp
      {
        try await redact(at: sequence, reason: .deleted)
      }
    }
    if !rewritten.isEmpty {
      let sorted = rewritten.sorted { $0.key < $1.key }
      try await connection.query(
        """
        UPDATE vlog_events AS e SET record = u.record
        FROM UNNEST(\(sorted.map { Int64(clamping: $0.key) })::int8[],
          \(sorted.map { Self.record($0.value) })::bytea[]) AS u(sequence, record)
        WHERE e.account = \(account) AND e.sequence = u.sequence
        """, logger: logger)
    }
    if !newDeletions.isEmpty {
      try await connection.query(
        """
        INSERT INTO vlog_deletions (account, object, sequence)
        SELECT \(account), * FROM UNNEST(\(newDeletions.map { ByteBuffer(bytes: $0.object.bytes) })::bytea[],
          \(newDeletions.map { Int64(clamping: $0.sequence) })::int8[])
        ON CONFLICT (account, object) DO UPDATE SET sequence = COALESCE(vlog_deletions.sequence, EXCLUDED.sequence)
        """, logger: logger)
    }
    if !newTagDeletions.isEmpty {
      let deletions = Array(newTagDeletions)
      try await connection.query(
        """
        INSERT INTO vlog_deletions (account, object, stamp)
        SELECT \(account), * FROM UNNEST(\(deletions.map { ByteBuffer(bytes: $0.key.bytes) })::bytea[],
          \(deletions.map { ByteBuffer(bytes: $0.value.bytes) })::bytea[])
        ON CONFLICT (account, object) DO UPDATE SET stamp = EXCLUDED.stamp
        """, logger: logger)
    }
    let removed = removedReferences.flatMap { hash, sequences in sequences.map { (hash, $0) } }
    if !removed.isEmpty {
      try await connection.query(
        """
        DELETE FROM vlog_blob_references AS r
        USING UNNEST(\(removed.map { ByteBuffer(bytes: $0.0.bytes) })::bytea[],
          \(removed.map { Int64(clamping: $0.1) })::int8[]) AS u(hash, sequence)
        WHERE r.account = \(account) AND r.hash = u.hash AND r.sequence = u.sequence
        """, logger: logger)
    }
    let forgotten = forgottenFields.filter { fields[$0]??.dirty != true }
    if !forgotten.isEmpty {
      let list = Array(forgotten)
      try await connection.query(
        """
        DELETE FROM vlog_fields AS f
        USING UNNEST(\(list.map { ByteBuffer(bytes: $0.note.identifier.bytes) })::bytea[],
          \(list.map { Int16($0.field) })::int2[]) AS u(note, field)
        WHERE f.account = \(account) AND f.note = u.note AND f.field = u.field
        """, logger: logger)
    }
    if !removedSuperseded.isEmpty {
      try await connection.query(
        """
        DELETE FROM vlog_superseded AS s
        USING UNNEST(\(removedSuperseded.map { Int64(clamping: $0.milliseconds) })::int8[],
          \(removedSuperseded.map { Int64(clamping: $0.sequence) })::int8[]) AS u(replaced_at, sequence)
        WHERE s.account = \(account) AND s.replaced_at = u.replaced_at AND s.sequence = u.sequence
        """, logger: logger)
    }
    // The common writes in one statement: the new events and their index entries, the
    // newest changes, the replaced ones, and the head.
    var sequences: [Int64] = []
    var ids: [ByteBuffer] = []
    var records: [ByteBuffer] = []
    for sequence in newSequences {
      guard let event = newEvents[sequence] else { continue }
      sequences.append(Int64(clamping: sequence))
      ids.append(ByteBuffer(bytes: event.stamp.bytes))
      records.append(Self.record(event))
    }
    let added = addedReferences.flatMap { hash, sequences in sequences.map { (hash, $0) } }
    let dirty = fields.compactMap { key, value in value.flatMap { $0.dirty ? (key, $0) : nil } }
    guard
      head != initialHead || !newObjects.isEmpty || !added.isEmpty || !dirty.isEmpty
        || !newSuperseded.isEmpty
    else { return try await releaseBlobs() }
    try await connection.query(
      """
      WITH new_events AS (
        INSERT INTO vlog_events (account, sequence, id, record)
        SELECT \(account), * FROM UNNEST(\(sequences)::int8[], \(ids)::bytea[], \(records)::bytea[])
      ), new_objects AS (
        INSERT INTO vlog_objects (account, object, sequence)
        SELECT \(account), * FROM UNNEST(
          \(newObjects.map { ByteBuffer(bytes: $0.object.bytes) })::bytea[],
          \(newObjects.map { Int64(clamping: $0.sequence) })::int8[])
        ON CONFLICT DO NOTHING
      ), new_references AS (
        INSERT INTO vlog_blob_references (account, hash, sequence)
        SELECT \(account), * FROM UNNEST(\(added.map { ByteBuffer(bytes: $0.0.bytes) })::bytea[],
          \(added.map { Int64(clamping: $0.1) })::int8[])
        ON CONFLICT DO NOTHING
      ), new_fields AS (
        INSERT INTO vlog_fields (account, note, field, stamp, sequence)
        SELECT \(account), * FROM UNNEST(
          \(dirty.map { ByteBuffer(bytes: $0.0.note.identifier.bytes) })::bytea[],
          \(dirty.map { Int16($0.0.field) })::int2[],
          \(dirty.map { ByteBuffer(bytes: $0.1.stamp.bytes) })::bytea[],
          \(dirty.map { Int64(clamping: $0.1.sequence) })::int8[])
        ON CONFLICT (account, note, field)
        DO UPDATE SET stamp = EXCLUDED.stamp, sequence = EXCLUDED.sequence
      ), new_superseded AS (
        INSERT INTO vlog_superseded (account, replaced_at, sequence)
        SELECT \(account), * FROM UNNEST(
          \(newSuperseded.map { Int64(clamping: $0.milliseconds) })::int8[],
          \(newSuperseded.map { Int64(clamping: $0.sequence) })::int8[])
        ON CONFLICT DO NOTHING
      )
      UPDATE vlog_heads SET last_sequence = \(Int64(clamping: head.sequence)),
        digest = \(ByteBuffer(bytes: head.digest.bytes))
      WHERE account = \(account)
      """, logger: logger)
    return try await releaseBlobs()
  }

  /// Removes the blobs that lost their last reference in this transaction; returns them.
  private func releaseBlobs() async throws -> Set<BlobHash> {
    var released: Set<BlobHash> = []
    for hash in releasedCandidates where addedReferences[hash, default: []].isEmpty {
      let excluded = (removedReferences[hash] ?? []).map { Int64(clamping: $0) }
      let rows = try await connection.query(
        """
        SELECT 1 FROM vlog_blob_references
        WHERE account = \(account) AND hash = \(ByteBuffer(bytes: hash.bytes))
          AND sequence <> ALL(\(excluded)::int8[])
        LIMIT 1
        """, logger: logger)
      var referenced = false
      for try await _ in rows { referenced = true }
      if !referenced { released.insert(hash) }
    }
    if !released.isEmpty {
      try await connection.query(
        """
        DELETE FROM vlog_blobs
        WHERE account = \(account) AND hash = ANY(\(released.map { ByteBuffer(bytes: $0.bytes) })::bytea[])
        """, logger: logger)
    }
    return released
  }

  // MARK: - Encoding

  /// A log record: the checksum of the event's bytes, then the bytes (``LogRecord``).
  static func record(_ event: Event) -> ByteBuffer {
    let bytes = event.encoded()
    var buffer = ByteBuffer()
    buffer.reserveCapacity(LogRecord.headerSize + bytes.count)
    buffer.writeInteger(bytes.withUnsafeBytes { LogRecord.checksum($0) })
    buffer.writeBytes(bytes)
    return buffer
  }

  /// The event of a stored record, after checking its checksum.
  static func event(record: ByteBuffer, sequence: UInt64) throws -> Event {
    try record.withUnsafeReadableBytes { raw in
      let bytes = try LogRecord.event(in: raw, sequence: sequence)
      return try EventCodec.decode(bytes)
    }
  }

  static func identifier(_ buffer: ByteBuffer) throws -> Identifier {
    guard buffer.readableBytes == 16 else {
      throw ServerError.storage("an object id in the database is \(buffer.readableBytes) bytes")
    }
    return buffer.withUnsafeReadableBytes { Identifier(bytes: $0) }
  }

  static func stamp(_ buffer: ByteBuffer) throws -> Stamp {
    guard buffer.readableBytes == Stamp.byteCount else {
      throw ServerError.storage("an event id in the database is \(buffer.readableBytes) bytes")
    }
    return buffer.withUnsafeReadableBytes { Stamp(bytes: $0) }
  }

  static func sequence(_ value: Int64) throws -> UInt64 {
    guard let sequence = UInt64(exactly: value) else {
      throw ServerError.storage(
        "the database holds a negative number (\(value)) where a count belongs")
    }
    return sequence
  }
}
