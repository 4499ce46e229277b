import Foundation
import LMDB
import VLog
import VLogWire

/// The fuzz targets, by the name `VLOG_FUZZ_TARGET` gives. Each takes any bytes, must never
/// trap, and checks what must hold of what it accepts (a decoded value encodes and decodes
/// back to itself); a violated check traps on purpose, for libFuzzer to report.
enum Target: String, CaseIterable {
  /// The log's event encoding (`Event(encoded:)`).
  case event
  /// The binary sync encoding, both directions (`SyncPush(binary:)`, `SyncPage(binary:)`).
  case syncBinary = "sync-binary"
  /// The JSON wire objects: sync, repair and account bodies, errors.
  case wireJSON = "wire-json"
  /// One line of a JSON Lines import: a wire event, converted and validated.
  case importLine = "import-line"
  /// Arbitrary keys and values in every database of a real store, then `verify` and every
  /// query: the decoders of stored records, keys and the log state.
  case store
  /// Any bytes as an LMDB data file, mutations of a real store's file among them: the
  /// page-structure check (`PageStructure`) and salvage's reading (`SalvagedLog`), which read
  /// a file without trusting it, then, for a file the check passes, `verify` through liblmdb.
  case pageStructure = "page-structure"
  /// The live channel's event stream as a client reads it (`LiveStreamParser`), whole and in
  /// pieces.
  case liveStream = "live-stream"

  func run(_ bytes: [UInt8]) {
    switch self {
    case .liveStream: fuzzLiveStream(bytes)
    case .pageStructure: fuzzPageStructure(bytes)
    case .event: fuzzEvent(bytes)
    case .syncBinary: fuzzSyncBinary(bytes)
    case .wireJSON: fuzzWireJSON(bytes)
    case .importLine: fuzzImportLine(bytes)
    case .store: StoreTarget.shared.run(bytes)
    }
  }
}

// Every `try?` below is deliberate: refusing bad bytes with an error is the correct answer, so
// the targets discard errors and look only for traps and for accepted values that do not
// survive a round trip.

/// Fails the run, as a finding: only for a broken property of accepted input.
func finding(_ message: String) -> Never {
  fatalError("finding: \(message)")
}

func fuzzPageStructure(_ bytes: [UInt8]) {
  let (structure, salvaged) = bytes.withUnsafeBytes {
    (PageStructure(file: $0), SalvagedLog(file: $0))
  }
  guard salvaged.events.count == salvaged.sequences.count else {
    finding("salvage found \(salvaged.events.count) events and \(salvaged.sequences.count) places")
  }
  for event in salvaged.events where (try? event.validate()) == nil {
    finding("salvage kept an event that does not validate: \(event)")
  }
  guard structure.isWhole else { return }
  // The last page in use may lie past the file's end (pages a commit took and freed without
  // writing them), never past the map the meta page records.
  guard structure.pageSize > 0,
    UInt64(structure.pagesInUse) <= structure.mapSize / UInt64(structure.pageSize)
  else {
    finding(
      "a whole structure of \(structure.pagesInUse) pages does not fit its map of "
        + "\(structure.mapSize) bytes")
  }
  // A file the check passes is safe to open: open it as a store and verify it.
  let path = FileManager.default.temporaryDirectory
    .appendingPathComponent("vlog-fuzz-pages-\(getpid())").path
  // The last input's directory, if a crash left it: gone or not, creating it says.
  try? FileManager.default.removeItem(atPath: path)
  // The directory is this process's scratch space: an input it cannot write is not one to try.
  guard
    (try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true))
      != nil,
    FileManager.default.createFile(atPath: path + "/data.mdb", contents: Data(bytes))
  else { return }
  // Removing scratch space cannot fail in a way that matters to the input under test.
  defer { try? FileManager.default.removeItem(atPath: path) }
  // Opening refuses what it cannot read, with an error; only a trap or a signal is a finding.
  guard let store = try? NoteStore.open(at: path, options: .init(durability: .noSync)) else {
    return
  }
  defer { store.close() }
  _ = try? store.verify()
}

func fuzzEvent(_ bytes: [UInt8]) {
  guard let event = try? Event(encoded: bytes) else { return }
  _ = event.description
  // What a server reads of an encrypted account's event: its sealed values, and whether it
  // carries a value in clear.
  _ = event.sealedValues
  _ = try? event.checkSealed()
  guard (try? event.validate()) != nil else { return }
  guard let again = try? Event(encoded: event.encoded()), again == event else {
    finding("an accepted event does not survive encoding and decoding: \(event)")
  }
}

func fuzzLiveStream(_ bytes: [UInt8]) {
  var whole = LiveStreamParser()
  guard let messages = try? whole.read(bytes) else { return }
  // The same bytes in two pieces, split where the first byte says, read the same.
  let split = bytes.isEmpty ? 0 : Int(bytes[0]) % (bytes.count + 1)
  var pieces = LiveStreamParser()
  guard let first = try? pieces.read(bytes[..<split]),
    let second = try? pieces.read(bytes[split...]),
    first + second == messages
  else { finding("a stream read whole and in two pieces reads differently") }
  // What was read, written again, reads back.
  var again = LiveStreamParser()
  guard let reread = try? again.read(messages.flatMap { $0.encoded }), reread == messages else {
    finding("accepted messages do not survive encoding and reading")
  }
}

func fuzzSyncBinary(_ bytes: [UInt8]) {
  if let push = try? SyncPush(binary: bytes, maximumEvents: 1000) {
    guard let again = try? SyncPush(binary: push.binaryEncoded(), maximumEvents: 1000),
      again == push
    else { finding("an accepted push does not survive encoding and decoding") }
  }
  if let page = try? SyncPage(binary: bytes) {
    guard let again = try? SyncPage(binary: page.binaryEncoded()), again == page else {
      finding("an accepted page does not survive encoding and decoding")
    }
  }
}

func fuzzWireJSON(_ bytes: [UInt8]) {
  if let request = try? WireJSON.decode(SyncRequest.self, from: bytes) {
    _ = try? request.validated(maximumEvents: 1000)
  }
  if let response = try? WireJSON.decode(SyncResponse.self, from: bytes) {
    _ = try? response.validated()
  }
  if let request = try? WireJSON.decode(CompareRequest.self, from: bytes) {
    _ = try? request.validated()
  }
  if let response = try? WireJSON.decode(CompareResponse.self, from: bytes) {
    _ = try? response.validated()
  }
  if let request = try? WireJSON.decode(FetchRequest.self, from: bytes) {
    _ = try? request.validated(maximum: 1000)
  }
  if let response = try? WireJSON.decode(FetchResponse.self, from: bytes) {
    _ = try? response.validated()
  }
  if let credentials = try? WireJSON.decode(Credentials.self, from: bytes) {
    _ = try? credentials.validated(checkingPassword: true)
  }
  _ = try? WireJSON.decode(ErrorBody.self, from: bytes)
}

func fuzzImportLine(_ bytes: [UInt8]) {
  guard let wire = try? JSONDecoder().decode(WireEvent.self, from: Data(bytes)),
    let event = try? wire.event(), (try? event.validate()) != nil
  else { return }
  guard
    let again = try? WireJSON.decode(
      WireEvent.self, from: Array(JSONEncoder().encode(WireEvent(event)))
    ).event(),
    again == event
  else { finding("an accepted line does not survive export and import: \(event)") }
}

/// A real store, reused across runs: each run empties its databases, puts the input's
/// records in, and runs `verify` and every query over them.
final class StoreTarget: @unchecked Sendable {
  static let shared = StoreTarget()

  /// The store's databases, in the order an input's database byte picks them: all of
  /// them, for the environment must be opened with as many as the store opens it with.
  static let databases = [
    "meta", "log", "eventIndex", "blobs", "notes", "tombstones", "attachments",
    "noteAttachments", "tags", "tagNotes", "timeline", "objects", "blobReferences", "fields",
    "superseded", "searchPostings", "searchNotes", "searchOrdinals", "noteTexts", "pendingNotes",
  ]

  let store: NoteStore
  let environment: Environment
  let handles: [Database]
  /// The store's own meta records (format, replica), put back before each run.
  let meta: [([UInt8], [UInt8])]

  init() {
    do {
      let path = FileManager.default.temporaryDirectory
        .appendingPathComponent("vlog-fuzz-\(getpid())").path
      try? FileManager.default.removeItem(atPath: path)
      let options = NoteStore.Options(durability: .noSync)
      store = try NoteStore.open(at: path, options: options)
      environment = try Environment.open(
        at: path,
        configuration: .init(
          mapSize: options.mapSize, maximumMapSize: options.maximumMapSize,
          maximumDatabases: Self.databases.count + 4, durability: .noSync))
      let environment = self.environment
      handles = try Self.databases.map { try environment.openDatabase(named: $0) }
      var meta: [([UInt8], [UInt8])] = []
      let handle = handles[0]
      try environment.read { transaction in
        try transaction.forEach(in: handle) { key, value in meta.append((Array(key), Array(value)))
        }
      }
      self.meta = meta
    } catch {
      fatalError("cannot set up the store target: \(error)")
    }
  }

  /// Splits the input into records: a database byte, a key length byte and the key, a
  /// two-byte value length and the value.
  static func records(_ bytes: [UInt8]) -> [(database: Int, key: [UInt8], value: [UInt8])] {
    var records: [(Int, [UInt8], [UInt8])] = []
    var index = 0
    while index + 4 <= bytes.count {
      let database = Int(bytes[index]) % databases.count
      let keyCount = max(1, Int(bytes[index + 1]))
      index += 2
      let key = Array(bytes[index..<min(bytes.count, index + keyCount)])
      index += key.count
      guard index + 2 <= bytes.count else { break }
      let valueCount = Int(bytes[index]) | Int(bytes[index + 1]) << 8
      index += 2
      let value = Array(bytes[index..<min(bytes.count, index + valueCount)])
      index += value.count
      records.append((database, key.isEmpty ? [0] : key, value))
    }
    return records
  }

  /// The records of a store's databases, in the input format: a seed.
  func encode(_ records: [(database: Int, key: [UInt8], value: [UInt8])]) -> [UInt8] {
    var bytes: [UInt8] = []
    for (database, key, value) in records where key.count <= 255 && value.count <= 0xFFFF {
      bytes += [UInt8(database), UInt8(key.count)] + key
      bytes += [UInt8(value.count & 0xFF), UInt8(value.count >> 8)] + value
    }
    return bytes
  }

  /// Every record of every database of the store as it is now.
  func dump() throws -> [(database: Int, key: [UInt8], value: [UInt8])] {
    var records: [(Int, [UInt8], [UInt8])] = []
    try environment.read { transaction in
      for (index, handle) in handles.enumerated() {
        try transaction.forEach(in: handle) { key, value in
          records.append((index, Array(key), Array(value)))
        }
      }
    }
    return records
  }

  func run(_ bytes: [UInt8]) {
    do {
      try environment.write { transaction in
        for handle in handles { try transaction.removeAll(in: handle) }
        for (key, value) in meta { try transaction.put(value, forKey: key, in: handles[0]) }
        for (database, key, value) in Self.records(bytes) {
          try transaction.put(value, forKey: key, in: handles[database])
        }
      }
    } catch {
      return
    }
    _ = try? store.verify()
    let summaries = (try? store.timeline(limit: 100)) ?? []
    for summary in summaries { _ = try? store.note(summary.id) }
    if let archived = try? store.archivedNotes(limit: 100) {
      for summary in archived { _ = try? store.history(of: summary.id) }
    }
    _ = try? store.tags()
    _ = try? store.search("a")
    _ = try? store.search("note")
    _ = try? store.updateSearchIndex()
    _ = try? store.notes(taggedWith: "a")
    _ = try? store.notes(taggedWith: "a", limit: 2, after: summaries.first?.id)
    _ = try? store.deletedObjects()
    _ = try? store.statistics()
    _ = try? store.stateDigest()
    _ = try? store.eventSetBuckets()
    _ = try? store.events(limit: 1000)
    _ = try? store.outbox(limit: 1000)
    _ = try? store.noteCount()
    _ = try? store.rebuildProjections()
  }
}
