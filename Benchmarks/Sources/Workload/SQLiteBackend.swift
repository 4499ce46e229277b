// The peer: the same event log and note projections on SQLite (WAL) through GRDB, merged by the
// same per-field last-writer-wins rule with the same stamps and the same event bytes. What a
// Swift developer would otherwise build.

internal import Foundation
internal import GRDB
public import VLog

/// The event log and projections in SQLite, through GRDB.
///
/// Tables: `events` (sequence, 24-byte stamp, encoded event; unique by stamp), `notes` (one row
/// per live note: its five fields, each with the stamp that set it), `noteTags` and `tags`,
/// `attachments`, `blobs`, `tombstones`. The timeline is an index on `(archived, sortDate)`;
/// search is `LIKE`. In WAL mode, with `synchronous = FULL` (a commit is on disk when it
/// returns, as in VLog's durable mode), `NORMAL` (GRDB's default for WAL: a power loss may
/// roll back the last commits) or `OFF`, as ``CommitDurability`` says.
public final class SQLiteBackend: Backend {
  /// The name in reports.
  public static let name = "SQLite (GRDB)"
  let queue: DatabaseQueue
  private var maker = EventMaker(replica: ReplicaID(Identifier(high: 0x5A1, low: 1)))

  init(queue: DatabaseQueue) { self.queue = queue }

  /// See ``Backend``.
  public static func open(at path: String, durability: CommitDurability) throws
    -> SQLiteBackend
  {
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    var configuration = Configuration()
    // WAL and the synchronous level set here, not through `journalMode`, with which GRDB
    // lowers `synchronous` to NORMAL whatever the class asked.
    let synchronous =
      switch durability {
      case .full: "FULL"
      case .normal: "NORMAL"
      case .off: "OFF"
      }
    configuration.prepareDatabase { db in
      try db.execute(sql: "PRAGMA journal_mode = WAL")
      try db.execute(sql: "PRAGMA synchronous = \(synchronous)")
    }
    let queue = try DatabaseQueue(path: path + "/notes.sqlite", configuration: configuration)
    try queue.write { db in
      try db.execute(
        sql: """
          CREATE TABLE IF NOT EXISTS events(
            sequence INTEGER PRIMARY KEY, stamp BLOB NOT NULL UNIQUE, body BLOB NOT NULL);
          CREATE TABLE IF NOT EXISTS notes(
            id BLOB PRIMARY KEY, creationStamp BLOB, creationDate INTEGER,
            text TEXT NOT NULL DEFAULT '', textStamp BLOB NOT NULL DEFAULT x'',
            archived INTEGER NOT NULL DEFAULT 0, archivedStamp BLOB NOT NULL DEFAULT x'',
            sortDate INTEGER, sortDateStamp BLOB NOT NULL DEFAULT x'',
            tags TEXT NOT NULL DEFAULT '', tagsStamp BLOB NOT NULL DEFAULT x'',
            attachments BLOB NOT NULL DEFAULT x'', attachmentsStamp BLOB NOT NULL DEFAULT x''
          ) WITHOUT ROWID;
          CREATE INDEX IF NOT EXISTS timeline ON notes(archived, sortDate DESC);
          CREATE TABLE IF NOT EXISTS noteTags(tag TEXT, note BLOB, PRIMARY KEY(tag, note))
            WITHOUT ROWID;
          CREATE INDEX IF NOT EXISTS noteTagsByNote ON noteTags(note);
          CREATE TABLE IF NOT EXISTS tags(id TEXT PRIMARY KEY, name TEXT, nameStamp BLOB)
            WITHOUT ROWID;
          CREATE TABLE IF NOT EXISTS attachments(
            id BLOB PRIMARY KEY, note BLOB, stamp BLOB, body BLOB) WITHOUT ROWID;
          CREATE INDEX IF NOT EXISTS attachmentsByNote ON attachments(note, stamp);
          CREATE TABLE IF NOT EXISTS blobs(hash BLOB PRIMARY KEY, bytes BLOB) WITHOUT ROWID;
          CREATE TABLE IF NOT EXISTS tombstones(id BLOB PRIMARY KEY, stamp BLOB) WITHOUT ROWID;
          """)
    }
    let (journal, level) = try queue.read { db in
      (
        try String.fetchOne(db, sql: "PRAGMA journal_mode"),
        try Int.fetchOne(db, sql: "PRAGMA synchronous")
      )
    }
    let expected = ["OFF": 0, "NORMAL": 1, "FULL": 2][synchronous]
    precondition(journal == "wal" && level == expected, "not WAL or wrong sync")
    return SQLiteBackend(queue: queue)
  }

  /// See ``Backend``.
  public func apply(_ operations: ArraySlice<Operation>) throws {
    var maker = self.maker
    defer { self.maker = maker }
    try queue.write { db in
      for operation in operations {
        let (events, blob) = maker.events(for: operation)
        if let (hash, bytes) = blob {
          try db.cachedStatement(sql: "INSERT OR IGNORE INTO blobs VALUES (?, ?)")
            .execute(arguments: [Data(hash.bytes), Data(bytes)])
        }
        for event in events { try Self.append(event, in: db) }
      }
    }
  }

  /// See ``Backend``.
  public func ingest(_ events: [Event], more: Bool) throws {
    try queue.write { db in for event in events { try Self.append(event, in: db) } }
  }

  /// Appends an event to the log unless it is there, and merges it into the projections.
  static func append(_ event: Event, in db: Database) throws {
    let stamp = Data(stampBytes(event.stamp))
    try db.cachedStatement(sql: "INSERT OR IGNORE INTO events(stamp, body) VALUES (?, ?)")
      .execute(arguments: [stamp, Data(event.encoded())])
    guard db.changesCount == 1 else { return }
    try merge(event, stamp: stamp, in: db)
  }

  /// The projection update of one event: the same rules as VLog's projector.
  static func merge(_ event: Event, stamp: Data, in db: Database) throws {
    func id(_ note: NoteID) -> Data { Data(note.identifier.bytes) }
    func set(_ field: String, _ value: (any DatabaseValueConvertible)?, of note: NoteID) throws {
      try db.cachedStatement(
        sql: "UPDATE notes SET \(field) = ?, \(field)Stamp = ? WHERE id = ? AND \(field)Stamp < ?"
      ).execute(arguments: [value, stamp, id(note), stamp])
    }
    switch event.change {
    case .noteCreated(let note, let date):
      guard
        try Int.fetchOne(
          db, sql: "SELECT 1 FROM tombstones WHERE id = ?", arguments: [id(note)]) == nil
      else { return }
      try db.cachedStatement(
        sql: """
          INSERT INTO notes(id, creationStamp, creationDate, sortDate) VALUES (?, ?, ?, ?)
          ON CONFLICT(id) DO UPDATE SET creationStamp = excluded.creationStamp,
            creationDate = excluded.creationDate
          WHERE excluded.creationStamp < creationStamp
          """
      ).execute(arguments: [id(note), stamp, milliseconds(date), milliseconds(date)])
    case .textSet(let note, let text, _): try set("text", text, of: note)
    case .archivedSet(let note, let archived): try set("archived", archived, of: note)
    case .sortDateSet(let note, let date): try set("sortDate", milliseconds(date), of: note)
    case .tagsSet(let note, let names):
      for name in names {
        try db.cachedStatement(
          sql: """
            INSERT INTO tags VALUES (?, ?, ?) ON CONFLICT(id) DO UPDATE SET
              name = excluded.name, nameStamp = excluded.nameStamp
            WHERE excluded.nameStamp > nameStamp
            """
        ).execute(arguments: [name.lowercased(), name, stamp])
      }
      try set("tags", names.joined(separator: "\n"), of: note)
      guard db.changesCount == 1 else { return }
      try db.cachedStatement(sql: "DELETE FROM noteTags WHERE note = ?")
        .execute(arguments: [id(note)])
      for name in Set(names.map { $0.lowercased() }) {
        try db.cachedStatement(sql: "INSERT INTO noteTags VALUES (?, ?)")
          .execute(arguments: [name, id(note)])
      }
    case .attachmentsSet(let note, let attachments):
      try set("attachments", Data(attachments.flatMap(\.identifier.bytes)), of: note)
    case .noteDeleted(let note):
      try db.cachedStatement(
        sql: """
          INSERT INTO tombstones VALUES (?, ?) ON CONFLICT(id) DO UPDATE SET stamp = excluded.stamp
          WHERE excluded.stamp < stamp
          """
      ).execute(arguments: [id(note), stamp])
      try db.cachedStatement(sql: "DELETE FROM notes WHERE id = ?").execute(arguments: [id(note)])
      try db.cachedStatement(sql: "DELETE FROM noteTags WHERE note = ?")
        .execute(arguments: [id(note)])
    case .attachmentAdded(let attachment):
      try db.cachedStatement(
        sql: """
          INSERT INTO attachments VALUES (?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET
            stamp = excluded.stamp, body = excluded.body WHERE excluded.stamp < stamp
          """
      ).execute(arguments: [
        Data(attachment.id.identifier.bytes), id(attachment.noteID), stamp,
        Data(event.encoded()),
      ])
    case .attachmentDeleted(let attachment):
      try db.cachedStatement(sql: "INSERT OR IGNORE INTO tombstones VALUES (?, ?)")
        .execute(arguments: [Data(attachment.identifier.bytes), stamp])
      try db.cachedStatement(sql: "DELETE FROM attachments WHERE id = ?")
        .execute(arguments: [Data(attachment.identifier.bytes)])
    case .tagRenamed, .tagDeleted, .tagAdded, .tagRemoved, .tagErased, .unknown:
      // The workload changes a note's tags by list.
      break
    }
  }

  static func stampBytes(_ stamp: Stamp) -> [UInt8] {
    var bytes: [UInt8] = []
    bytes.reserveCapacity(24)
    withUnsafeBytes(of: stamp.time.rawValue.bigEndian) { bytes += $0 }
    bytes += stamp.replica.identifier.bytes
    return bytes
  }

  /// See ``Backend``.
  public func eventCount() throws -> Int {
    try queue.read { db in try Int.fetchOne(db, sql: "SELECT count(*) FROM events") ?? 0 }
  }

  /// See ``Backend``.
  public func rebuild() throws -> Int {
    try queue.write { db in
      try db.execute(
        sql: """
          DELETE FROM notes; DELETE FROM noteTags; DELETE FROM tags; DELETE FROM attachments;
          DELETE FROM tombstones;
          """)
      var replayed = 0
      let rows = try Row.fetchCursor(db, sql: "SELECT stamp, body FROM events ORDER BY sequence")
      while let row = try rows.next() {
        let stamp: Data = row[0]
        let body: Data = row[1]
        try Self.merge(try Event(encoded: Array(body)), stamp: stamp, in: db)
        replayed += 1
      }
      return replayed
    }
  }

  /// See ``Backend``.
  public func firstTimelinePage() throws -> Int? {
    try queue.read { db in
      try Row.fetchAll(
        db,
        sql: """
          SELECT id, substr(text, 1, 200), sortDate, tags, attachments,
            (SELECT group_concat(hex(a.id)) FROM attachments a
             WHERE a.note = notes.id AND a.stamp > notes.attachmentsStamp) FROM notes
          WHERE archived = 0 ORDER BY sortDate DESC LIMIT 50
          """
      ).count
    }
  }

  /// See ``Backend``.
  public func notes(taggedWith tag: String) throws -> Int? {
    try queue.read { db in
      try Row.fetchAll(
        db,
        sql: """
          SELECT n.id, substr(n.text, 1, 200), n.sortDate, n.tags FROM noteTags t
          JOIN notes n ON n.id = t.note WHERE t.tag = ? ORDER BY n.sortDate DESC
          """, arguments: [tag.lowercased()]
      ).count
    }
  }

  /// See ``Backend``.
  public func search(_ word: String) throws -> Int? {
    try queue.read { db in
      try Row.fetchAll(
        db,
        sql: """
          SELECT id, substr(text, 1, 200), sortDate FROM notes WHERE text LIKE ?
          ORDER BY sortDate DESC LIMIT 50
          """, arguments: ["%\(word)%"]
      ).count
    }
  }

  /// See ``Backend``: an FTS5 table with the trigram tokenizer over the notes' texts, filled
  /// from the notes table (the workload's appends do not maintain it).
  public func buildSearchIndex() throws -> Bool {
    try queue.write { db in
      try db.execute(
        sql: """
          CREATE VIRTUAL TABLE IF NOT EXISTS notesFTS USING fts5(id UNINDEXED, text,
            tokenize = 'trigram');
          DELETE FROM notesFTS;
          INSERT INTO notesFTS(id, text) SELECT id, text FROM notes;
          """)
    }
    return true
  }

  /// See ``Backend``: FTS5's trigram index, then the same order and page as ``search(_:)``.
  public func searchIndexed(_ word: String) throws -> Int? {
    try queue.read { db in
      try Row.fetchAll(
        db,
        sql: """
          SELECT n.id, substr(n.text, 1, 200), n.sortDate FROM notesFTS f
          JOIN notes n ON n.id = f.id WHERE notesFTS MATCH ?
          ORDER BY n.sortDate DESC LIMIT 50
          """, arguments: ["text: \"\(word)\""]
      ).count
    }
  }

  /// See ``Backend``.
  public func noteIDs() throws -> [NoteID] {
    try queue.read { db in try Data.fetchAll(db, sql: "SELECT id FROM notes") }
      .compactMap { data in
        data.count == 16
          ? NoteID(
            Identifier(
              high: data.prefix(8).reduce(0) { $0 << 8 | UInt64($1) },
              low: data.suffix(8).reduce(0) { $0 << 8 | UInt64($1) })) : nil
      }
  }

  /// Moves the write-ahead log into the database file and empties it, so that the file's size
  /// is the data's.
  public func checkpoint() throws {
    _ = try queue.writeWithoutTransaction { try $0.checkpoint(.truncate) }
  }

  /// See ``Backend``.
  public func close() {
    do {
      try queue.close()
    } catch {
      FileHandle.standardError.write(Data("warning: closing the SQLite store: \(error)\n".utf8))
    }
  }
}
