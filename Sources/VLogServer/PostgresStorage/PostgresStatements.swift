internal import NIOCore
internal import PostgresNIO

// The statements every sync runs, prepared: each connection has PostgreSQL parse and plan them
// once, and each call sends only its values. Sent as one-off statements, parsing, analysing and
// planning them took about a quarter of PostgreSQL's CPU under the sync load. Each has a fixed
// text, its values in arrays where their number varies, so that one prepared statement serves
// every call.
//
// A connection pooler in front of PostgreSQL must keep a session's prepared statements
// (PgBouncer from 1.21, with `max_prepared_statements` set).

/// An account's head: its last sequence number and its event-set digest.
struct HeadQuery: PostgresPreparedStatement {
  static let sql = "SELECT last_sequence, digest FROM vlog_heads WHERE account = $1"
  static let bindingDataTypes: [PostgresDataType] = [.int8]
  typealias Row = (Int64, ByteBuffer)

  var account: Int64

  func makeBindings() -> PostgresBindings {
    var bindings = PostgresBindings(capacity: 1)
    bindings.append(account)
    return bindings
  }

  func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

/// ``HeadQuery``, locking the head's row until the transaction ends: what orders the pushes to
/// one account.
struct LockedHeadQuery: PostgresPreparedStatement {
  static let sql = HeadQuery.sql + " FOR UPDATE"
  static let bindingDataTypes = HeadQuery.bindingDataTypes
  typealias Row = HeadQuery.Row

  var account: Int64

  func makeBindings() -> PostgresBindings { HeadQuery(account: account).makeBindings() }
  func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

/// The events of an account after a sequence number, up to another, in order, at most `limit`.
struct PageQuery: PostgresPreparedStatement {
  static let sql = """
    SELECT sequence, record FROM vlog_events
    WHERE account = $1 AND sequence > $2 AND sequence <= $3
    ORDER BY sequence LIMIT $4
    """
  static let bindingDataTypes: [PostgresDataType] = [.int8, .int8, .int8, .int8]
  typealias Row = (Int64, ByteBuffer)

  var account: Int64
  var after: Int64
  var through: Int64
  var limit: Int64

  func makeBindings() -> PostgresBindings {
    var bindings = PostgresBindings(capacity: 4)
    bindings.append(account)
    bindings.append(after)
    bindings.append(through)
    bindings.append(limit)
    return bindings
  }

  func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

/// The sign-in tokens stored under any of `hashes`.
struct TokensQuery: PostgresPreparedStatement {
  static let sql = "SELECT hash, account, expires_at FROM vlog_tokens WHERE hash = ANY($1)"
  static let bindingDataTypes: [PostgresDataType] = [.byteaArray]
  typealias Row = (ByteBuffer, Int64, Int64)

  var hashes: [ByteBuffer]

  func makeBindings() -> PostgresBindings {
    var bindings = PostgresBindings(capacity: 1)
    bindings.append(hashes)
    return bindings
  }

  func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

/// Everything a log batch asks about, in one statement: a `UNION ALL` of one part per kind of
/// fact, each row tagged with its ``Kind``'s number and filling the
/// columns its kind uses — a key (an object, a note, a blob's hash or an event's id), a
/// sequence number, bytes (a stamp or a record), a field. A kind asked nothing has an empty
/// array, and its part reads nothing.
///
/// Each part looks its keys up one by one (a `LATERAL` subquery that `OFFSET 0` or `LIMIT 1`
/// keeps from being flattened into a join): the plan is generic, made once for every account,
/// and given `account = $1 AND key = ANY($2)` PostgreSQL may plan to read the whole account
/// and filter, which costs as much as the account is large.
struct FactsQuery: PostgresPreparedStatement {
  /// What a row holds: the number in its first column.
  enum Kind: Int16 {
    case deletion, field, sequence, event, reference
    /// An event the log holds, among those asked about.
    case stored
  }

  static let sql = """
    (SELECT \(Kind.deletion.rawValue)::int2, d.object, d.sequence, d.stamp, NULL::int2
      FROM UNNEST($2::bytea[]) AS k(object), LATERAL (
        SELECT object, sequence, stamp FROM vlog_deletions
        WHERE account = $1 AND object = k.object OFFSET 0) AS d)
    UNION ALL (SELECT \(Kind.field.rawValue)::int2, f.note, f.sequence, f.stamp, f.field
      FROM UNNEST($3::bytea[]) AS k(note), LATERAL (
        SELECT note, sequence, stamp, field FROM vlog_fields
        WHERE account = $1 AND note = k.note OFFSET 0) AS f)
    UNION ALL (SELECT \(Kind.sequence.rawValue)::int2, o.object, o.sequence, NULL::bytea, NULL::int2
      FROM UNNEST($4::bytea[]) AS k(object), LATERAL (
        SELECT object, sequence FROM vlog_objects
        WHERE account = $1 AND object = k.object OFFSET 0) AS o)
    UNION ALL (SELECT \(Kind.event.rawValue)::int2, NULL::bytea, e.sequence, e.record, NULL::int2
      FROM UNNEST($5::int8[]) AS k(sequence), LATERAL (
        SELECT sequence, record FROM vlog_events
        WHERE account = $1 AND sequence = k.sequence OFFSET 0) AS e)
    UNION ALL (SELECT \(Kind.reference.rawValue)::int2, h.hash, NULL::int8, NULL::bytea, NULL::int2
      FROM UNNEST($6::bytea[]) AS h(hash), LATERAL (
        SELECT 1 FROM vlog_blob_references AS r
        WHERE r.account = $1 AND r.hash = h.hash AND NOT EXISTS (
          SELECT 1 FROM UNNEST($7::bytea[], $8::int8[]) AS x(hash, sequence)
          WHERE x.hash = r.hash AND x.sequence = r.sequence)
        LIMIT 1) AS r)
    UNION ALL (SELECT \(Kind.stored.rawValue)::int2, e.id, NULL::int8, NULL::bytea, NULL::int2
      FROM UNNEST($9::bytea[]) AS k(id), LATERAL (
        SELECT id FROM vlog_events WHERE account = $1 AND id = k.id OFFSET 0) AS e)
    """
  static let bindingDataTypes: [PostgresDataType] = [
    .int8, .byteaArray, .byteaArray, .byteaArray, .int8Array, .byteaArray, .byteaArray,
    .int8Array, .byteaArray,
  ]
  typealias Row = (Int16, ByteBuffer?, Int64?, ByteBuffer?, Int16?)

  var account: Int64
  /// Objects whose deletion markers are asked for.
  var deletions: [ByteBuffer] = []
  /// Notes whose newest field changes are asked for.
  var fieldNotes: [ByteBuffer] = []
  /// Objects whose events' sequence numbers are asked for.
  var sequenceObjects: [ByteBuffer] = []
  /// Events asked for by sequence number.
  var events: [Int64] = []
  /// Blobs asked whether an event references them, apart from the references in
  /// `excludedHashes` and `excludedSequences` (pairs).
  var referencedHashes: [ByteBuffer] = []
  var excludedHashes: [ByteBuffer] = []
  var excludedSequences: [Int64] = []
  /// Events asked whether the log holds them, by id.
  var stored: [ByteBuffer] = []

  /// Whether the statement asks anything.
  var asks: Bool {
    !(deletions.isEmpty && fieldNotes.isEmpty && sequenceObjects.isEmpty && events.isEmpty
      && referencedHashes.isEmpty && stored.isEmpty)
  }

  func makeBindings() -> PostgresBindings {
    var bindings = PostgresBindings(capacity: 9)
    bindings.append(account)
    bindings.append(deletions)
    bindings.append(fieldNotes)
    bindings.append(sequenceObjects)
    bindings.append(events)
    bindings.append(referencedHashes)
    bindings.append(excludedHashes)
    bindings.append(excludedSequences)
    bindings.append(stored)
    return bindings
  }

  func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

/// The common writes of a sync in one statement: the new events and their index entries (the
/// objects' events, the blobs' references, the notes' newest field changes, the replaced
/// changes), and the head moved, with an optional `NOTIFY` payload sent when the transaction
/// commits.
struct AppendStatement: PostgresPreparedStatement {
  static let sql = """
    WITH new_events AS (
      INSERT INTO vlog_events (account, sequence, id, record)
      SELECT $1, * FROM UNNEST($2::int8[], $3::bytea[], $4::bytea[])
    ), new_objects AS (
      INSERT INTO vlog_objects (account, object, sequence)
      SELECT $1, * FROM UNNEST($5::bytea[], $6::int8[])
      ON CONFLICT DO NOTHING
    ), new_references AS (
      INSERT INTO vlog_blob_references (account, hash, sequence)
      SELECT $1, * FROM UNNEST($7::bytea[], $8::int8[])
      ON CONFLICT DO NOTHING
    ), new_fields AS (
      INSERT INTO vlog_fields (account, note, field, stamp, sequence)
      SELECT $1, * FROM UNNEST($9::bytea[], $10::int2[], $11::bytea[], $12::int8[])
      ON CONFLICT (account, note, field)
      DO UPDATE SET stamp = EXCLUDED.stamp, sequence = EXCLUDED.sequence
    ), new_superseded AS (
      INSERT INTO vlog_superseded (account, replaced_at, sequence)
      SELECT $1, * FROM UNNEST($13::int8[], $14::int8[])
      ON CONFLICT DO NOTHING
    )
    UPDATE vlog_heads SET last_sequence = $15, digest = $16
    WHERE account = $1
    RETURNING CASE WHEN $17::text IS NOT NULL THEN pg_notify($18, $17::text) END
    """
  static let bindingDataTypes: [PostgresDataType] = [
    .int8, .int8Array, .byteaArray, .byteaArray, .byteaArray, .int8Array, .byteaArray,
    .int8Array, .byteaArray, .int2Array, .byteaArray, .int8Array, .int8Array, .int8Array, .int8,
    .bytea, .text, .text,
  ]
  /// The head's row, once: nothing in it is read. (Not `()`: postgres-nio expects no rows of a
  /// statement whose rows are `()`.)
  typealias Row = Bool

  var account: Int64
  var sequences: [Int64]
  var ids: [ByteBuffer]
  var records: [ByteBuffer]
  var objects: [ByteBuffer]
  var objectSequences: [Int64]
  var referenceHashes: [ByteBuffer]
  var referenceSequences: [Int64]
  var fieldNotes: [ByteBuffer]
  var fields: [Int16]
  var fieldStamps: [ByteBuffer]
  var fieldSequences: [Int64]
  var replacedAt: [Int64]
  var replacedSequences: [Int64]
  var head: Int64
  var digest: ByteBuffer
  var notification: String?
  var channel: String

  func makeBindings() -> PostgresBindings {
    var bindings = PostgresBindings(capacity: 18)
    bindings.append(account)
    bindings.append(sequences)
    bindings.append(ids)
    bindings.append(records)
    bindings.append(objects)
    bindings.append(objectSequences)
    bindings.append(referenceHashes)
    bindings.append(referenceSequences)
    bindings.append(fieldNotes)
    bindings.append(fields)
    bindings.append(fieldStamps)
    bindings.append(fieldSequences)
    bindings.append(replacedAt)
    bindings.append(replacedSequences)
    bindings.append(head)
    bindings.append(digest)
    if let notification { bindings.append(notification) } else { bindings.appendNull() }
    bindings.append(channel)
    return bindings
  }

  func decodeRow(_ row: PostgresRow) throws -> Row { true }
}
