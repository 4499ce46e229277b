// One interface over the three implementations the comparison runs: raw LMDB (the limit: the
// same event bytes appended, no projections), VLog, and the same log and projections on SQLite
// through GRDB (the peer).

internal import BenchmarkSupport
internal import Foundation
public import VLog

/// How much a commit survives, in the classes the comparison puts side by side: each
/// implementation's mode of that class.
public enum CommitDurability: String, CaseIterable, Sendable {
  /// On disk when the commit returns: nothing committed is lost, even to a power loss. VLog
  /// `.durable`, LMDB's default, SQLite WAL with `synchronous = FULL`.
  case full
  /// A process crash loses nothing; a power loss may lose the last commits, but never leaves
  /// the store damaged. VLog `.noMetaSync`, LMDB `MDB_NOMETASYNC`, SQLite WAL with
  /// `synchronous = NORMAL` (GRDB's default for a WAL database).
  case normal
  /// A process crash loses nothing; a power loss may lose any commit since the last flush,
  /// and may damage the store. VLog `.noSync`, LMDB `MDB_NOSYNC`, SQLite `synchronous = OFF`.
  case off
}

/// A store the workload runs on.
public protocol Backend: AnyObject {
  /// The name in reports.
  static var name: String { get }
  /// Opens (creating) a store at `path`, committing as `durability` says.
  static func open(at path: String, durability: CommitDurability) throws -> Self
  /// Applies operations as user changes, in one transaction.
  func apply(_ operations: ArraySlice<Operation>) throws
  /// The number of events in the log.
  func eventCount() throws -> Int
  /// Drops the projections and rebuilds them from the log; returns the events replayed.
  func rebuild() throws -> Int
  /// The first page (50) of the timeline; nil if the implementation has no projections.
  func firstTimelinePage() throws -> Int?
  /// The notes with a tag; nil without projections.
  func notes(taggedWith tag: String) throws -> Int?
  /// The first 50 notes whose text contains `word`; nil without projections.
  func search(_ word: String) throws -> Int?
  /// Brings the implementation's text index up to date, after the workload; false if it has
  /// none.
  func buildSearchIndex() throws -> Bool
  /// ``search(_:)`` through the text index; nil without one.
  func searchIndexed(_ word: String) throws -> Int?
  /// Ingests remote events (a sync page) in one transaction, merging them; `more` says that
  /// more pages of the same pull follow (VLog's sync client then defers the projections to
  /// the pull's last page).
  func ingest(_ events: [Event], more: Bool) throws
  /// The ids of the workload's notes.
  func noteIDs() throws -> [NoteID]
  /// Closes the store.
  func close()
}

extension Backend {
  /// Opens (creating) a store at `path`, every commit on disk when it returns or none.
  public static func open(at path: String, durable: Bool) throws -> Self {
    try open(at: path, durability: durable ? .full : .off)
  }
}

// MARK: - VLog

/// VLog itself.
public final class VLogBackend: Backend {
  /// The name in reports.
  public static let name = "VLog"
  let store: NoteStore
  private var ids: [NoteID?] = []

  init(store: NoteStore) { self.store = store }

  /// See ``Backend``.
  public static func open(at path: String, durability: CommitDurability) throws -> VLogBackend {
    let mode: NoteStore.Durability =
      switch durability {
      case .full: .durable
      case .normal: .noMetaSync
      case .off: .noSync
      }
    return VLogBackend(
      store: try NoteStore.open(at: path, options: .init(durability: mode, mapSize: 1 << 30)))
  }

  /// See ``Backend``.
  public func apply(_ operations: ArraySlice<Operation>) throws {
    let known = self.ids
    let created = try store.write { changes -> [Int: NoteID] in
      // Notes created earlier in this batch are edited by the ids their creation returned.
      var created: [Int: NoteID] = [:]
      func id(_ note: Int) -> NoteID { created[note] ?? known[note]! }
      for operation in operations {
        switch operation {
        case .create(let note, let text):
          created[note] = changes.createNote(text: text)
        case .setText(let note, let text): changes.setText(text, of: id(note))
        case .setArchived(let note, let archived): changes.setArchived(archived, of: id(note))
        case .setSortDate(let note, let date): changes.setSortDate(date, of: id(note))
        case .setTags(let note, let tags): changes.setTags(tags, of: id(note))
        case .addAttachment(let note, let bytes, let width, let height):
          changes.addAttachment(
            bytes, mimeType: "image/jpeg", width: width, height: height, to: id(note))
        case .delete(let note): changes.deleteNote(id(note))
        }
      }
      return created
    }
    for (note, id) in created {
      if self.ids.count <= note {
        self.ids += Array(repeating: nil, count: note + 1 - self.ids.count)
      }
      self.ids[note] = id
    }
  }

  /// The id VLog gave the workload's note `index`.
  public func id(ofNote index: Int) -> NoteID { ids[index]! }

  /// See ``Backend``.
  public func eventCount() throws -> Int { try store.eventCount() }
  /// See ``Backend``.
  public func rebuild() throws -> Int { try store.rebuildProjections() }
  /// See ``Backend``.
  public func firstTimelinePage() throws -> Int? { try store.timeline(limit: 50).count }
  /// See ``Backend``.
  public func notes(taggedWith tag: String) throws -> Int? {
    try store.notes(taggedWith: tag).count
  }
  /// See ``Backend``.
  public func search(_ word: String) throws -> Int? { try store.search(word, limit: 50).count }
  /// See ``Backend``.
  public func buildSearchIndex() throws -> Bool {
    try store.updateSearchIndex()
    return true
  }
  /// See ``Backend``: VLog's search always reads its trigram index for such a word.
  public func searchIndexed(_ word: String) throws -> Int? { try search(word) }
  /// See ``Backend``.
  public func ingest(_ events: [Event], more: Bool) throws {
    try store.ingest(events, deferringProjections: more)
  }

  /// Every event of the log, in log order.
  public func events() throws -> [Event] { try store.events().map(\.event) }

  /// See ``Backend``.
  public func noteIDs() throws -> [NoteID] {
    if ids.isEmpty {
      // Reopened: the notes the store has, in any order.
      return try store.timeline(limit: 100_000).map(\.id)
        + store.archivedNotes(limit: 100_000).map(\.id)
    }
    return ids.compactMap { $0 }
  }

  /// See ``Backend``.
  public func close() { store.close() }
}

// MARK: - Raw LMDB

/// The limit: the same event bytes, appended with `MDB_APPEND` under big-endian sequence
/// numbers, with no index and no projections. A rebuild is a scan of the log.
public final class RawLMDBBackend: Backend {
  /// The name in reports.
  public static let name = "raw LMDB"
  let store: RawLMDB.Store
  private var maker = EventMaker(replica: ReplicaID(Identifier(high: 0x1AA, low: 1)))
  private var next: UInt64

  init(store: RawLMDB.Store) throws {
    self.store = store
    next = UInt64(store.count())
  }

  /// See ``Backend``.
  public static func open(at path: String, durability: CommitDurability) throws
    -> RawLMDBBackend
  {
    let mode: RawLMDB.Durability =
      switch durability {
      case .full: .durable
      case .normal: .noMetaSync
      case .off: .noSync
      }
    return try RawLMDBBackend(store: RawLMDB.Store(path: path, durability: mode, mapSize: 16 << 30))
  }

  /// See ``Backend``.
  public func apply(_ operations: ArraySlice<Operation>) throws {
    var values: [[UInt8]] = []
    for operation in operations {
      for event in maker.events(for: operation).events { values.append(event.encoded()) }
    }
    try append(values)
  }

  private func append(_ values: [[UInt8]]) throws {
    try store.append(values, firstKey: next)
    next += UInt64(values.count)
  }

  /// See ``Backend``.
  public func eventCount() throws -> Int { store.count() }
  /// See ``Backend``.
  public func rebuild() throws -> Int { try store.scanCount() }
  /// See ``Backend``.
  public func firstTimelinePage() throws -> Int? { nil }
  /// See ``Backend``.
  public func notes(taggedWith tag: String) throws -> Int? { nil }
  /// See ``Backend``.
  public func search(_ word: String) throws -> Int? { nil }
  /// See ``Backend``.
  public func buildSearchIndex() throws -> Bool { false }
  /// See ``Backend``.
  public func searchIndexed(_ word: String) throws -> Int? { nil }
  /// See ``Backend``.
  public func ingest(_ events: [Event], more: Bool) throws {
    try append(events.map { $0.encoded() })
  }
  /// See ``Backend``.
  public func noteIDs() -> [NoteID] { (0..<10_000).map(EventMaker.noteID) }
  /// See ``Backend``.
  public func close() { store.close() }
}
