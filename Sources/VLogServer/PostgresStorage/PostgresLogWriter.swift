internal import Logging
internal import NIOCore
internal import PostgresNIO
internal import VLog

/// Writes to one account's event log on PostgreSQL inside the transaction that holds the
/// account's head row (`SELECT … FOR UPDATE`): a shell around the engine's ``LogBatch``, which
/// decides everything — what is stored, redacted, indexed, queued and released — so that a log
/// holds the same bytes on either backend. This type only reads the facts the batch asks for
/// (``PostgresLogFacts``, one statement per round of questions: before the appends, the
/// deletion markers and newest field changes of everything the events name; while finishing,
/// each round of what is missing) and writes what it decided at ``commit(signaling:)``: the
/// appends, the indexes and the head in one statement, and one per table for what erasure and
/// retention changed.
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
  var redactedCount: Int { batch.redactedCount }
  /// The wall clock of the transaction, in milliseconds: when the blobs it releases were
  /// released.
  let now: Milliseconds

  /// The log's rules for this transaction, and what they decided.
  private var batch: LogBatch
  /// What the batch asked for, as read.
  private var facts = PostgresLogFacts()

  init(
    account: Int64, head: Head, rules: LogRules = .standard, now: Milliseconds,
    connection: PostgresConnection, logger: Logger
  ) {
    self.account = account
    self.now = now
    self.head = head
    self.initialHead = head
    self.connection = connection
    self.logger = logger
    self.batch = LogBatch(lastSequence: head.sequence, tracksFields: true, rules: rules)
  }

  // MARK: - Appending

  /// Reads, in one statement, what appending `events` will look up, and which of them the log
  /// already holds: those it returns.
  mutating func prefetch(for events: [Event]) async throws -> Set<Stamp> {
    try await read(batch.factsToAppend(events), storedAmong: events.map(\.stamp))
  }

  /// Appends an event the log does not hold (``LogBatch/append(_:facts:)``).
  mutating func append(_ event: Event) async throws {
    // The batch looks everything up before it changes anything: run it in place.
    let logged = try await resolve(inPlace: true) { batch, facts in
      try batch.append(event, facts: &facts)
    }
    head.sequence = logged.sequence
    head.digest.add(logged.event.stamp)
    appended += 1
  }

  /// Files a stored tag deletion again, as a migration does
  /// (``LogBatch/refileTagDeletion(_:facts:)``).
  mutating func refileTagDeletion(_ logged: LoggedEvent) async throws {
    try await resolve(inPlace: false) { batch, facts in
      try batch.refileTagDeletion(logged, facts: &facts)
    }
  }

  /// Redacts the replaced changes whose period has passed at `now`
  /// (``LogBatch/applyRetention(_:now:stored:facts:)``).
  @discardableResult
  mutating func applyRetention(_ retention: Duration?, now: Milliseconds) async throws -> Int {
    guard let retention else { return 0 }
    var due: [ReplacedChange] = []
    if let latest = LogBatch.latestDueTime(retention: retention, now: now) {
      let rows = try await connection.query(
        """
        SELECT replaced_at, sequence FROM vlog_superseded
        WHERE account = \(account) AND replaced_at <= \(Int64(clamping: latest))
        """, logger: logger)
      for try await (milliseconds, sequence) in rows.decode((Int64, Int64).self) {
        due.append(
          ReplacedChange(
            milliseconds: try Self.sequence(milliseconds), sequence: try Self.sequence(sequence)))
      }
    }
    return try await resolve(inPlace: false) { batch, facts in
      try batch.applyRetention(retention, now: now, stored: due, facts: &facts)
    }
  }

  /// Runs a step of the batch in rounds (``LogBatch/round(inPlace:facts:_:)``) until it is
  /// done: each round that needs facts reads everything it found missing at once.
  private mutating func resolve<T>(
    inPlace: Bool, _ step: (inout LogBatch, inout PostgresLogFacts) throws -> T
  ) async throws -> T {
    // A step asks for a bounded chain of facts (sequences, then events, then newest changes
    // and references).
    for _ in 0..<16 {
      switch try batch.round(inPlace: inPlace, facts: &facts, step) {
      case .done(let result): return result
      case .needs(let missing): try await read(missing)
      }
    }
    throw StorageError.damaged("account \(account): the log's facts could not be read")
  }

  /// Reads the facts `missing` names, all in one statement (``FactsQuery``, a round trip to
  /// the database per round of the batch's questions, whatever they ask). Returns those of
  /// `ids` the log holds.
  @discardableResult
  private mutating func read(_ missing: MissingLogFacts, storedAmong ids: [Stamp] = [])
    async throws -> Set<Stamp>
  {
    var query = FactsQuery(account: account)
    if !missing.deletions.isEmpty {
      let objects = Array(missing.deletions)
      for object in objects { facts.deletions[object] = (nil, nil) }
      query.deletions = objects.map { ByteBuffer(bytes: $0.bytes) }
    }
    if !missing.fields.isEmpty {
      // Every field of each note at once: a push that sets one usually sets others.
      let notes = Array(Set(missing.fields.map(\.note)))
      for note in notes {
        for field in NoteField.allCases {
          facts.fields[FieldKey(note: note, field: field)] = .some(nil)
        }
      }
      query.fieldNotes = notes.map { ByteBuffer(bytes: $0.identifier.bytes) }
    }
    if !missing.sequences.isEmpty {
      let objects = Array(missing.sequences)
      for object in objects { facts.sequences[object] = [] }
      query.sequenceObjects = objects.map { ByteBuffer(bytes: $0.bytes) }
    }
    if !missing.events.isEmpty {
      let sequences = Array(missing.events)
      for sequence in sequences { facts.events[sequence] = .some(nil) }
      query.events = sequences.map { Int64(clamping: $0) }
    }
    for (hash, excluded) in missing.references {
      facts.references[hash] = (excluded, false)
      let key = ByteBuffer(bytes: hash.bytes)
      query.referencedHashes.append(key)
      for sequence in excluded {
        query.excludedHashes.append(key)
        query.excludedSequences.append(Int64(clamping: sequence))
      }
    }
    query.stored = ids.map { ByteBuffer(bytes: $0.bytes) }
    var stored = Set<Stamp>()
    guard query.asks else { return stored }
    for try await (kind, key, sequence, bytes, field) in try await connection.execute(
      query, logger: logger)
    {
      switch FactsQuery.Kind(rawValue: kind) {
      case .deletion:
        facts.deletions[try Self.identifier(try Self.required(key))] = (
          try sequence.map(Self.sequence), try bytes.map(Self.stamp)
        )
      case .field:
        guard let field, let number = UInt8(exactly: field),
          let noteField = NoteField(rawValue: number)
        else {
          throw StorageError.damaged("vlog_fields holds field \(field.map(String.init) ?? "NULL")")
        }
        let note = NoteID(try Self.identifier(try Self.required(key)))
        facts.fields[FieldKey(note: note, field: noteField)] = FieldChange(
          stamp: try Self.stamp(try Self.required(bytes)),
          sequence: try Self.sequence(try Self.required(sequence)))
      case .sequence:
        facts.sequences[try Self.identifier(try Self.required(key)), default: []].append(
          try Self.sequence(try Self.required(sequence)))
      case .event:
        let sequence = try Self.sequence(try Self.required(sequence))
        facts.events[sequence] = try Self.event(
          record: try Self.required(bytes), sequence: sequence)
      case .reference:
        let hash = try Self.blobHash(try Self.required(key))
        facts.references[hash]?.referenced = true
      case .stored:
        stored.insert(try Self.stamp(try Self.required(key)))
      case nil:
        throw StorageError.damaged("a fact of unknown kind \(kind)")
      }
    }
    return stored
  }

  /// A column the row's kind always fills.
  private static func required<T>(_ value: T?) throws -> T {
    guard let value else { throw StorageError.damaged("a log fact's row lacks a column") }
    return value
  }

  // MARK: - Committing

  /// Finishes the batch (``LogBatch/finish(facts:)``), writes everything it decided — what
  /// erasure and retention changed first, then the appends in one statement — and removes and
  /// returns the blobs no event references any more.
  ///
  /// - Parameter signal: Sent with `NOTIFY` by the statement that moves the head, once the
  ///   log has grown (a round trip saved); delivered, as every notification, when the
  ///   transaction commits.
  mutating func commit(signaling signal: LiveSignal? = nil) async throws -> Set<BlobHash> {
    try await resolve(inPlace: false) { batch, facts in try batch.finish(facts: &facts) }
    let decisions = batch.decisions
    let firstAppended = decisions.appended.first?.sequence ?? .max
    let rewritten = decisions.redacted.filter { $0.key < firstAppended }
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
    if !decisions.deletions.isEmpty {
      let newDeletions = decisions.deletions
      try await connection.query(
        """
        INSERT INTO vlog_deletions (account, object, sequence)
        SELECT \(account), * FROM UNNEST(\(newDeletions.map { ByteBuffer(bytes: $0.object.bytes) })::bytea[],
          \(newDeletions.map { Int64(clamping: $0.sequence) })::int8[])
        ON CONFLICT (account, object) DO UPDATE SET sequence = COALESCE(vlog_deletions.sequence, EXCLUDED.sequence)
        """, logger: logger)
    }
    let erased = decisions.erasedObjects
    if !erased.isEmpty { try await eraseKeys(of: erased) }
    if !decisions.tagDeletions.isEmpty {
      let deletions = Array(decisions.tagDeletions)
      try await connection.query(
        """
        INSERT INTO vlog_deletions (account, object, stamp)
        SELECT \(account), * FROM UNNEST(\(deletions.map { ByteBuffer(bytes: $0.key.bytes) })::bytea[],
          \(deletions.map { ByteBuffer(bytes: $0.value.bytes) })::bytea[])
        ON CONFLICT (account, object) DO UPDATE SET stamp = EXCLUDED.stamp
        """, logger: logger)
    }
    let removed = decisions.removedReferences.flatMap { hash, sequences in
      sequences.map { (hash, $0) }
    }
    if !removed.isEmpty {
      try await connection.query(
        """
        DELETE FROM vlog_blob_references AS r
        USING UNNEST(\(removed.map { ByteBuffer(bytes: $0.0.bytes) })::bytea[],
          \(removed.map { Int64(clamping: $0.1) })::int8[]) AS u(hash, sequence)
        WHERE r.account = \(account) AND r.hash = u.hash AND r.sequence = u.sequence
        """, logger: logger)
    }
    if !decisions.forgottenFields.isEmpty {
      let list = Array(decisions.forgottenFields)
      try await connection.query(
        """
        DELETE FROM vlog_fields AS f
        USING UNNEST(\(list.map { ByteBuffer(bytes: $0.note.identifier.bytes) })::bytea[],
          \(list.map { Int16($0.field.rawValue) })::int2[]) AS u(note, field)
        WHERE f.account = \(account) AND f.note = u.note AND f.field = u.field
        """, logger: logger)
    }
    if !decisions.dequeued.isEmpty {
      let removedSuperseded = decisions.dequeued
      try await connection.query(
        """
        DELETE FROM vlog_superseded AS s
        USING UNNEST(\(removedSuperseded.map { Int64(clamping: $0.milliseconds) })::int8[],
          \(removedSuperseded.map { Int64(clamping: $0.sequence) })::int8[]) AS u(replaced_at, sequence)
        WHERE s.account = \(account) AND s.replaced_at = u.replaced_at AND s.sequence = u.sequence
        """, logger: logger)
    }
    // The common writes in one statement: the new events and their index entries, the
    // newest decisions, the replaced ones, and the head.
    var sequences: [Int64] = []
    var ids: [ByteBuffer] = []
    var records: [ByteBuffer] = []
    for logged in decisions.appended {
      let event = decisions.redacted[logged.sequence] ?? logged.event
      sequences.append(Int64(clamping: logged.sequence))
      ids.append(ByteBuffer(bytes: event.stamp.bytes))
      records.append(Self.record(event))
    }
    let added = decisions.addedReferences.flatMap { hash, sequences in sequences.map { (hash, $0) }
    }
    let dirty = Array(decisions.fields)
    let newObjects = decisions.objects
    let newSuperseded = decisions.replaced
    guard
      head != initialHead || !newObjects.isEmpty || !added.isEmpty || !dirty.isEmpty
        || !newSuperseded.isEmpty
    else { return try await releaseBlobs(decisions.releasedBlobs) }
    // Only a log that grew is announced.
    let notification = head.sequence > initialHead.sequence ? signal?.payload : nil
    let rows = try await connection.execute(
      AppendStatement(
        account: account, sequences: sequences, ids: ids, records: records,
        objects: newObjects.map { ByteBuffer(bytes: $0.object.bytes) },
        objectSequences: newObjects.map { Int64(clamping: $0.sequence) },
        referenceHashes: added.map { ByteBuffer(bytes: $0.0.bytes) },
        referenceSequences: added.map { Int64(clamping: $0.1) },
        fieldNotes: dirty.map { ByteBuffer(bytes: $0.0.note.identifier.bytes) },
        fields: dirty.map { Int16($0.0.field.rawValue) },
        fieldStamps: dirty.map { ByteBuffer(bytes: $0.1.stamp.bytes) },
        fieldSequences: dirty.map { Int64(clamping: $0.1.sequence) },
        replacedAt: newSuperseded.map { Int64(clamping: $0.milliseconds) },
        replacedSequences: newSuperseded.map { Int64(clamping: $0.sequence) },
        head: Int64(clamping: head.sequence), digest: ByteBuffer(bytes: head.digest.bytes),
        notification: notification, channel: LiveSignal.channel),
      logger: logger)
    for try await _ in rows {}
    return try await releaseBlobs(decisions.releasedBlobs)
  }

  /// Erases an encrypted account's keys of deleted objects, and marks its content key due to
  /// rotate if one was there. The account's record of keys is locked first, as the writes of
  /// keys lock it (`PostgresStorage+Keys.swift`): a key stored at the same time waits, and then
  /// sees the deletion.
  private func eraseKeys(of objects: [Identifier]) async throws {
    let locked = try await connection.query(
      "SELECT 1 FROM vlog_account_keys WHERE account = \(account) FOR UPDATE", logger: logger)
    var encrypted = false
    for try await _ in locked { encrypted = true }
    guard encrypted else { return }
    try await connection.query(
      """
      WITH erased AS (
        DELETE FROM vlog_object_keys
        WHERE account = \(account) AND object = ANY(\(objects.map { ByteBuffer(bytes: $0.bytes) })::bytea[])
        RETURNING 1)
      UPDATE vlog_account_keys SET rotation_due = true
      WHERE account = \(account) AND EXISTS (SELECT 1 FROM erased)
      """, logger: logger)
  }

  /// Marks the blobs that lost their last reference in this transaction as released at
  /// ``now``: they wait out the grace period (for an undo), then go. Returns them.
  private func releaseBlobs(_ released: Set<BlobHash>) async throws -> Set<BlobHash> {
    if !released.isEmpty {
      try await connection.query(
        """
        UPDATE vlog_blobs SET released_at = \(Int64(clamping: now.rawValue))
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
      throw StorageError.damaged("an object id in the database is \(buffer.readableBytes) bytes")
    }
    return buffer.withUnsafeReadableBytes { Identifier(bytes: $0) }
  }

  static func stamp(_ buffer: ByteBuffer) throws -> Stamp {
    guard buffer.readableBytes == Stamp.byteCount else {
      throw StorageError.damaged("an event id in the database is \(buffer.readableBytes) bytes")
    }
    return buffer.withUnsafeReadableBytes { Stamp(bytes: $0) }
  }

  static func blobHash(_ buffer: ByteBuffer) throws -> BlobHash {
    guard let hash = BlobHash(bytes: Array(buffer.readableBytesView)) else {
      throw StorageError.damaged("a blob's hash in the database is \(buffer.readableBytes) bytes")
    }
    return hash
  }

  static func sequence(_ value: Int64) throws -> UInt64 {
    guard let sequence = UInt64(exactly: value) else {
      throw StorageError.damaged(
        "the database holds a negative number (\(value)) where a count belongs")
    }
    return sequence
  }
}

/// The facts a ``PostgresLogWriter``'s batch asked for, as read from the database before this
/// transaction wrote anything: a lookup it has not read throws ``MissingLogFacts``, which the
/// writer reads (with everything else missing) before running the step again.
struct PostgresLogFacts: LogFacts {
  /// Each object's deletion marker: a note's or attachment's first deletion, a tag's latest.
  var deletions: [Identifier: (sequence: UInt64?, stamp: Stamp?)] = [:]
  var fields: [FieldKey: FieldChange?] = [:]
  var sequences: [Identifier: [UInt64]] = [:]
  var events: [UInt64: Event?] = [:]
  /// Whether each blob is referenced by an event but those excluded.
  var references: [BlobHash: (excluded: Set<UInt64>, referenced: Bool)] = [:]

  func isDeleted(_ object: Identifier) throws -> Bool {
    guard let marker = deletions[object] else { throw missing(\.deletions, [object]) }
    return marker.sequence != nil
  }

  func tagDeletion(of tagObject: Identifier) throws -> Stamp? {
    guard let marker = deletions[tagObject] else { throw missing(\.deletions, [tagObject]) }
    return marker.stamp
  }

  func newestChanges(to keys: [FieldKey]) throws -> [FieldKey: FieldChange] {
    let unknown = keys.filter { fields[$0] == nil }
    guard unknown.isEmpty else { throw missing(\.fields, Set(unknown)) }
    return Dictionary(keys.compactMap { key in fields[key]?.map { (key, $0) } }) { a, _ in a }
  }

  func sequences(of objects: [Identifier]) throws -> [Identifier: [UInt64]] {
    let unknown = objects.filter { sequences[$0] == nil }
    guard unknown.isEmpty else { throw missing(\.sequences, Set(unknown)) }
    return Dictionary(objects.map { ($0, sequences[$0] ?? []) }) { a, _ in a }
  }

  func events(at wanted: [UInt64]) throws -> [UInt64: Event] {
    let unknown = wanted.filter { events[$0] == nil }
    guard unknown.isEmpty else { throw missing(\.events, Set(unknown)) }
    return Dictionary(wanted.compactMap { sequence in events[sequence]?.map { (sequence, $0) } }) {
      a, _ in a
    }
  }

  func referenced(_ blobs: [BlobHash: Set<UInt64>]) throws -> [BlobHash: Bool] {
    var found: [BlobHash: Bool] = [:]
    var unknown = MissingLogFacts()
    for (hash, excluded) in blobs {
      if let known = references[hash], known.excluded == excluded {
        found[hash] = known.referenced
      } else {
        unknown.references[hash] = excluded
      }
    }
    guard unknown.isEmpty else { throw unknown }
    return found
  }

  private func missing<T>(_ path: WritableKeyPath<MissingLogFacts, Set<T>>, _ values: Set<T>)
    -> MissingLogFacts
  {
    var missing = MissingLogFacts()
    missing[keyPath: path] = values
    return missing
  }
}
