import Foundation
import LMDB
import VLog
import VLogWire

/// The seed corpus of each target, from a real store that made every kind of change.
enum Seeds {
  /// Writes `target`'s seeds into `directory`.
  static func write(_ target: Target, into directory: String) throws {
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let store = StoreTarget.shared.store
    try makeChanges(on: store)
    let events = try store.events().map(\.event)
    var seeds: [[UInt8]] = []
    switch target {
    case .liveStream:
      seeds = [
        ([.head(0), .ping, .head(42)] as [LiveMessage]).flatMap { $0.encoded },
        LiveMessage.closed(ErrorBody(code: .unauthorized, message: "the session ended")).encoded,
        Array("event: head\r\ndata:{\"head\":7}\r\n\r\nid: 3\rretry: 1\r\r: ping\n\n".utf8),
      ]
    case .event:
      // And each in the form of an encrypted account's: placeholders and sealed values.
      let sealed: [UInt8] = [0x92, 0x01, 8] + Array("sealed!!".utf8)
      seeds =
        events.map { $0.encoded() }
        + events.map {
          Event(stamp: $0.stamp, change: $0.redacted(.deleted).change, unknownFields: sealed)
            .encoded()
        }
    case .syncBinary:
      seeds = [
        SyncPush(cursor: 3, events: Array(events.prefix(4)), limit: 100).binaryEncoded(),
        SyncPush(cursor: 0, events: []).binaryEncoded(),
        SyncPage(
          events: events, cursor: 9, more: true, serverTime: Date(timeIntervalSince1970: 1e9),
          stored: 2, eventSetDigest: try store.eventSetDigest()
        ).binaryEncoded(),
      ]
    case .wireJSON:
      let encoder = JSONEncoder()
      seeds = [
        Array(try encoder.encode(SyncRequest(cursor: 0, events: Array(events.prefix(3))))),
        Array(
          try encoder.encode(
            SyncResponse(
              events: Array(events.suffix(3)), cursor: 4, more: false,
              serverTime: Date(timeIntervalSince1970: 1e9), stored: 1,
              eventSetDigest: try store.eventSetDigest()))),
        Array(try encoder.encode(CompareRequest(try store.eventSetBuckets()))),
        Array(
          try encoder.encode(
            CompareResponse(
              Comparison(
                ids: [7: Array(events.prefix(2).map(\.stamp))], complete: true,
                eventSetDigest: try store.eventSetDigest())))),
        Array(try encoder.encode(FetchRequest(ids: events.prefix(3).map(\.stamp)))),
        Array(try encoder.encode(FetchResponse(events: Array(events.prefix(2))))),
        Array(try encoder.encode(Credentials(username: "ann", password: "correct horse"))),
      ]
    case .importLine:
      let encoder = JSONEncoder()
      encoder.outputFormatting = .sortedKeys
      seeds = try events.map { Array(try encoder.encode(WireEvent($0))) }
    case .pageStructure:
      // The store's file, after a commit that freed pages (so its free-page tree has entries).
      let path = FileManager.default.temporaryDirectory
        .appendingPathComponent("vlog-fuzz-seed-\(getpid())").path
      // A scratch directory left behind costs nothing; the seeds are what matters.
      defer { try? FileManager.default.removeItem(atPath: path) }
      let seedStore = try NoteStore.open(at: path, options: .init(durability: .noSync))
      try makeChanges(on: seedStore)
      seedStore.close()
      seeds = [Array(try Data(contentsOf: URL(fileURLWithPath: path + "/data.mdb")))]
    case .store:
      let records = try StoreTarget.shared.dump()
      seeds = [StoreTarget.shared.encode(records)]
      // Each database on its own, too.
      for database in StoreTarget.databases.indices {
        seeds.append(StoreTarget.shared.encode(records.filter { $0.database == database }))
      }
    }
    for (index, seed) in seeds.enumerated() where !seed.isEmpty {
      try Data(seed).write(
        to: URL(fileURLWithPath: directory).appendingPathComponent("seed-\(index)"))
    }
  }

  /// Every kind of change, on a few notes.
  static func makeChanges(on store: NoteStore) throws {
    let first = try store.write { $0.createNote(text: "Buy bread\nand milk", tags: ["Home"]) }
    let second = try store.write {
      $0.createNote(text: "Call https://example.com at +1 555 0100", tags: ["work", "Paris"])
    }
    try store.write { changes in
      changes.setText("Buy bread", of: first)
      changes.setArchived(true, of: second)
      changes.setSortDate(Date(timeIntervalSince1970: 1_700_000_000), of: first)
      changes.setTags(["paris", "ideas"], of: first)
    }
    let attachment = try store.write { changes in
      changes.addAttachment(
        Array("png".utf8), mimeType: "image/png", width: 4, height: 3, to: first)
    }
    try store.write { changes in
      _ = changes.addAttachment(Array("jpg".utf8), mimeType: "image/jpeg", to: first)
      changes.renameTag(to: "PARIS")
    }
    try store.write { $0.deleteAttachment(attachment) }
    let third = try store.write { $0.createNote(text: "gone soon") }
    try store.write { $0.deleteNote(third) }
    try store.write { $0.deleteTag(named: "ideas") }
    // The search index, so that the store seeds hold its records too.
    try store.updateSearchIndex()
  }
}
