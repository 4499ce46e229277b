import ArgumentParser
import Foundation
import Logging
import VLog
import VLogServer
import VLogSync

/// One event as `vlog log` and `vlog history` print it; `field` and `outcome` only in a
/// history (nil fields are left out of the JSON).
struct EventRow: Encodable {
  let sequence: UInt64
  let time: String
  let counter: UInt16
  let replica: String
  let kind: String
  let note: String?
  let change: String
  var field: String?
  var outcome: String?
  /// Why the event's values were erased (`deleted`, `superseded`), if they were.
  var redacted: String?

  init(_ logged: LoggedEvent, field: String? = nil, outcome: String? = nil) {
    let stamp = logged.event.stamp
    let change = logged.event.change
    sequence = logged.sequence
    time = ISO8601.format(milliseconds: Int64(stamp.time.milliseconds))
    counter = stamp.time.counter
    replica = stamp.replica.description
    kind = change.kind.description
    note = change.noteID?.description
    self.change = logged.event.changeDescription
    redacted = logged.event.redaction?.description
    self.field = field
    self.outcome = outcome
  }
}

/// `vlog log`: the events, in a range of sequence numbers, optionally for one note.
struct Log: StoreCommand {
  static let configuration = CommandConfiguration(
    abstract: "List events: sequence, stamp, replica, kind and value.")
  @OptionGroup var options: StoreOptions
  @Option(name: .long, help: "The first sequence number to list.") var from: UInt64 = 1
  @Option(name: .long, help: "The last sequence number to list.") var to: UInt64?
  @Option(name: .long, help: "Only events about this note (a UUID) or its attachments.") var note:
    NoteID?

  func validate() throws {
    guard from >= 1 else { throw ValidationError("--from starts at 1") }
    if let to, to < from { throw ValidationError("--to (\(to)) is before --from (\(from))") }
  }

  func execute(on store: NoteStore) throws -> CommandOutput {
    let noteID = note
    var rows: [EventRow] = []
    try store.forEachEvent(after: from - 1) { logged in
      if let to, logged.sequence > to { return false }
      let change = logged.event.change
      if let noteID, change.noteID != noteID { return true }
      rows.append(EventRow(logged))
      return true
    }
    let text = table(
      ["SEQ", "TIME", "REPLICA", "CHANGE"],
      rows.map {
        [String($0.sequence), "\($0.time)#\($0.counter)", String($0.replica.prefix(8)), $0.change]
      })
    return CommandOutput(text: rows.isEmpty ? "no events" : text, json: rows)
  }
}

/// `vlog stats`: counts, sizes, map use, replicas and digests.
struct Stats: StoreCommand {
  static let configuration = CommandConfiguration(
    abstract: "Show counts, sizes, map use, replicas and digests.")
  @OptionGroup var options: StoreOptions

  struct Output: Encodable {
    let path: String
    let replica: String
    let events: Int
    let unknownEvents: Int
    let outbox: Int
    let unprojectedEvents: Int
    let notes: Int
    let archivedNotes: Int
    let tags: Int
    let attachments: Int
    let blobs: Int
    let blobBytes: Int
    let tombstones: Int
    let mapSize: Int
    let usedBytes: Int
    let fileBytes: Int
    let reclaimableBytes: Int
    let eventsByReplica: [String: Int]
    let eventSetDigest: String
    let stateDigest: String
  }

  func execute(on store: NoteStore) throws -> CommandOutput {
    let stats = try store.statistics()
    let output = Output(
      path: store.path, replica: store.replicaID.description, events: stats.events,
      unknownEvents: stats.unknownEvents, outbox: stats.outbox,
      unprojectedEvents: stats.unprojectedEvents, notes: stats.notes,
      archivedNotes: stats.archivedNotes, tags: stats.tags, attachments: stats.attachments,
      blobs: stats.blobs, blobBytes: stats.blobBytes, tombstones: stats.tombstones,
      mapSize: stats.mapSize, usedBytes: stats.usedBytes, fileBytes: stats.fileBytes,
      reclaimableBytes: stats.reclaimableBytes,
      eventsByReplica: Dictionary(
        uniqueKeysWithValues: stats.eventsByReplica.map { ($0.key.description, $0.value) }),
      eventSetDigest: stats.eventSetDigest.description,
      stateDigest: stats.stateDigest.description)
    var lines = [
      "store           \(output.path)",
      "replica         \(output.replica)",
      "events          \(output.events) (\(output.unknownEvents) of unknown kinds, \(output.outbox) in the outbox"
        + (output.unprojectedEvents > 0
          ? ", \(output.unprojectedEvents) not yet in the projections: a pull in progress)"
          : ")"),
      "notes           \(output.notes) (\(output.archivedNotes) archived)",
      "tags            \(output.tags)",
      "attachments     \(output.attachments) (\(output.blobs) blobs, \(output.blobBytes) bytes)",
      "tombstones      \(output.tombstones)",
      "map             \(output.usedBytes) of \(output.mapSize) bytes used",
      "file            \(output.fileBytes) bytes, \(output.reclaimableBytes) reclaimable by 'vlog compact'",
      "event set       \(output.eventSetDigest)",
      "state           \(output.stateDigest)",
      "replicas        \(output.eventsByReplica.count)",
    ]
    for (replica, count) in output.eventsByReplica.sorted(by: { $0.key < $1.key }) {
      lines.append(
        "  \(replica)  \(count) events\(replica == output.replica ? " (this store)" : "")")
    }
    return CommandOutput(text: lines.joined(separator: "\n"), json: output)
  }
}

/// `vlog rebuild`: drop the projections and replay the log.
struct Rebuild: StoreCommand {
  static let configuration = CommandConfiguration(
    abstract: "Drop the projections and replay the log into them.")
  @OptionGroup var options: StoreOptions

  struct Output: Encodable {
    let events: Int
    let seconds: Double
    let eventsPerSecond: Int
    let stateDigest: String
    let unchanged: Bool
  }

  func execute(on store: NoteStore) throws -> CommandOutput {
    let before = try store.stateDigest()
    let progress = ProgressBar("rebuild", options: options)
    let start = ContinuousClock.now
    let replayed = try store.rebuildProjections { progress.update($0.replayed, of: $0.total) }
    progress.finish()
    let elapsed = ContinuousClock.now - start
    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    let after = try store.stateDigest()
    let output = Output(
      events: replayed, seconds: seconds,
      eventsPerSecond: seconds > 0 ? Int(Double(replayed) / seconds) : replayed,
      stateDigest: after.description, unchanged: before == after)
    let text =
      "replayed \(replayed) events in \(String(format: "%.3f", seconds)) s "
      + "(\(output.eventsPerSecond) events/s); state \(after.description.prefix(16))… "
      + (output.unchanged ? "unchanged" : "CHANGED")
    return CommandOutput(text: text, json: output)
  }
}

/// `vlog compact`: rewrite a closed store, or a stopped server's data directory, compactly.
struct Compact: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Rewrite a store (or, with --data, a server's data directory) into a compact file.",
    discussion: """
      LMDB reuses freed pages but never shrinks its file or clears them, so erased content can \
      survive in free pages; after compaction it is not in the file. The store must not be open \
      elsewhere (a server must be stopped: the pause lasts about as long as reading its data \
      once). A crash during compaction leaves the old file or the new one, whole.
      """)
  @OptionGroup var options: StoreOptions
  @Option(
    name: .long, help: "A stopped sync server's data directory to compact instead of a store.",
    completion: .directory)
  var data: String?
  @Option(
    name: .long,
    help: ArgumentHelp(
      "A sync server's PostgreSQL database to compact instead (servers may run).",
      discussion:
        "VACUUM FULL of each vlog_ table: erased rows' bytes leave the table files. Each table "
        + "is locked, no reads and no writes, while it is rewritten.",
      valueName: "url"))
  var database: String?
  @Option(
    name: .long,
    help: ArgumentHelp(
      "With --database: how long to wait for transactions that began before compaction.",
      discussion:
        "A transaction open since before a deletion could still read the deleted rows, and "
        + "VACUUM FULL would copy them; compaction waits for such transactions to end, naming "
        + "them every 10 seconds, and past this many seconds (300 by default) fails having "
        + "rewritten nothing.",
      valueName: "seconds"))
  var wait: Int?

  struct Output: Encodable {
    let path: String
    let bytesBefore: Int
    let bytesAfter: Int
  }

  func run() async throws {
    let path: String
    let sizes: (bytesBefore: Int, bytesAfter: Int)
    guard database != nil || wait == nil else {
      throw CLIError("--wait applies only with --database")
    }
    if let database {
      guard data == nil else { throw CLIError("give --data or --database, not both") }
      if let wait, wait <= 0 {
        throw CLIError("--wait: \(wait) is not a number of seconds above 0")
      }
      var logger = Logger(label: "vlog.compact") { StreamLogHandler.standardError(label: $0) }
      logger.logLevel = .notice
      let result = try await SyncServer.compact(
        database: database, patience: wait.map { .seconds($0) } ?? SyncServer.compactionPatience,
        logger: logger)
      path = result.location
      sizes = (result.bytesBefore, result.bytesAfter)
    } else if let data {
      guard FileManager.default.fileExists(atPath: data + "/data.mdb") else {
        throw CLIError(
          "no server data at '\(data)'; check the path given to 'vlog serve --data'")
      }
      path = data
      try refuseDamagedStructure(data, kind: "server data")
      sizes = try SyncServer.compact(dataDirectory: data)
    } else {
      path = try options.path()
      guard FileManager.default.fileExists(atPath: path + "/data.mdb") else {
        throw CLIError("no store at '\(path)'; check the path")
      }
      try refuseDamagedStructure(path, kind: "store")
      let report = try NoteStore.compact(at: path)
      sizes = (report.bytesBefore, report.bytesAfter)
    }
    let output = Output(path: path, bytesBefore: sizes.bytesBefore, bytesAfter: sizes.bytesAfter)
    try options.emit(
      CommandOutput(
        text:
          "compacted \(path): \(sizes.bytesBefore) → \(sizes.bytesAfter) bytes "
          + "(\(sizes.bytesBefore - sizes.bytesAfter) reclaimed)",
        json: output))
  }
}

struct Salvage: ParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Recover what a damaged store still holds into a new store.",
    discussion: """
      Reads the damaged store's file without trusting its B-trees: every log record whose \
      checksum holds, the attachments' bytes whose hash holds, the store's replica id and \
      account. Writes a new store from them, its notes rebuilt, and says which events were \
      lost. This device's own events go in the new store's outbox; its sync state and \
      credentials are copied with the cursor reset, so 'vlog sync --store OUT' pushes what the \
      server lacks and gets back every event the server has. The damaged store is only read.
      """)

  @Argument(help: "The damaged store's directory.", completion: .directory)
  var damaged: String

  @Argument(
    help: "The new store's directory (must not exist, or be empty).", completion: .directory)
  var out: String

  @Flag(name: .long, help: "Print JSON instead of text.")
  var json = false

  struct Output: Encodable {
    let path: String
    let replica: String?
    let account: String?
    let events: Int
    let pending: Int
    let lostEvents: UInt64
    let missing: [String]
    let loggedEvents: UInt64?
    let blobs: Int
    let missingBlobs: Int
  }

  func run() throws {
    guard FileManager.default.fileExists(atPath: damaged + "/data.mdb") else {
      throw CLIError("no store at '\(damaged)'; check the path")
    }
    let report = try NoteStore.salvage(from: damaged, to: out)
    // The account's state and token, so that the next sync is that account's, from the start.
    if let state = try SyncAccount.loadState(from: SyncAccount.stateFile(forStoreAt: damaged)) {
      try state.restarted().write(to: SyncAccount.stateFile(forStoreAt: out))
    }
    let credentials = FileCredentialStore.file(forStoreAt: damaged).path
    if FileManager.default.fileExists(atPath: credentials) {
      try FileManager.default.copyItem(
        atPath: credentials, toPath: FileCredentialStore.file(forStoreAt: out).path)
    }
    let output = Output(
      path: out, replica: report.replicaID?.description, account: report.account?.description,
      events: report.events, pending: report.pending, lostEvents: report.lostEvents,
      missing: report.missing.map {
        $0.lowerBound == $0.upperBound ? "\($0.lowerBound)" : "\($0.lowerBound)-\($0.upperBound)"
      },
      loggedEvents: report.loggedEvents, blobs: report.blobs, missingBlobs: report.missingBlobs)
    if json {
      try print(CommandOutput(text: "", json: output).jsonText())
    } else {
      print("salvaged \(damaged) into \(out): \(report)")
      print("next: vlog sync --store '\(out)' pushes what the server lacks and gets the rest back")
    }
  }
}
