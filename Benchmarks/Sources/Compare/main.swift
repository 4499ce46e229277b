// Runs the notes-app workload on raw LMDB, VLog and SQLite through GRDB, side by side in one
// process, at each size given, and prints a Markdown table of the figures and their ratios.
//
//   .build/release/Compare 10000 100000 1000000 > results.md
//
// Progress goes to standard error. `tools/compare` builds and runs it.

import BenchmarkSupport
import Foundation
import Synchronization
import VLog
import Workload

/// What one implementation measured at one size.
struct Figures {
  var events = 0
  var appendPerSecond = 0.0
  var bytesPerEvent = 0.0
  var durableP50 = 0.0
  var durableP99 = 0.0
  var logAloneP50: Double?
  var rebuildPerSecond = 0.0
  var rebuildPeakMB = 0.0
  var rebuildHeapMB = 0.0
  var openFirstPage: Double?
  var tagged: Double?
  var search: Double?
  var searchIndexBuild: Double?
  var searchIndexed: Double?
  var ingestPerSecond = 0.0
}

func seconds(_ duration: Duration) -> Double {
  Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

func time<R>(_ body: () throws -> R) rethrows -> (R, Double) {
  let start = ContinuousClock.now
  let result = try body()
  return (result, seconds(ContinuousClock.now - start))
}

func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

func percentile(_ values: [Double], _ p: Double) -> Double {
  let sorted = values.sorted()
  return sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
}

/// Resets the process's peak resident size (Linux: `clear_refs` 5), so the next reading of
/// `VmHWM` is the peak of what follows.
func resetPeakMemory() throws {
  try "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
}

struct NoPeakMemory: Error, CustomStringConvertible {
  var line = "VmHWM"
  var description: String { "/proc/self/status has no \(line) line" }
}

/// The peak resident size in MB since the last reset.
func peakMemoryMB() throws -> Double {
  let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
  guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
    let kilobytes = Double(line.split(separator: " ", omittingEmptySubsequences: true)[1])
  else { throw NoPeakMemory(line: "VmHWM") }
  return kilobytes / 1024
}

/// The process's anonymous resident memory in MB (`RssAnon`: the heap and stacks, not the
/// memory-mapped store).
func anonymousMemoryMB() throws -> Double {
  let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
  guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("RssAnon:") }),
    let kilobytes = Double(line.split(separator: " ", omittingEmptySubsequences: true)[1])
  else { throw NoPeakMemory(line: "RssAnon") }
  return kilobytes / 1024
}

/// The peak a sampler has seen so far, and whether it goes on sampling.
final class MemorySampler: Sendable {
  let state: Mutex<(peak: Double, running: Bool)>
  init(peak: Double) { state = Mutex((peak, true)) }
}

/// Runs `body` while a thread samples `RssAnon` every millisecond; returns the result and the
/// largest sample. Run in a process of its own (``rebuildInChild(_:at:)``), so that memory
/// freed by earlier work does not hide what `body` takes.
func withPeakAnonymousMemory<R>(_ body: () throws -> R) throws -> (R, Double) {
  let sampler = MemorySampler(peak: try anonymousMemoryMB())
  let thread = Thread {
    while sampler.state.withLock({ $0.running }) {
      // A sample that cannot be read is skipped: the next one and the final reading count.
      if let now = try? anonymousMemoryMB() {
        sampler.state.withLock { $0.peak = max($0.peak, now) }
      }
      usleep(1000)
    }
  }
  thread.start()
  defer { sampler.state.withLock { $0.running = false } }
  let result = try body()
  let last = try anonymousMemoryMB()
  return (result, sampler.state.withLock { max($0.peak, last) })
}

/// The bytes the files under `path` occupy on disk (allocated blocks, as `du` counts them).
func diskBytes(_ path: String) throws -> Double {
  var total = 0.0
  for name in try FileManager.default.subpathsOfDirectory(atPath: path) {
    var info = stat()
    if stat(path + "/" + name, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG {
      total += Double(info.st_blocks) * 512
    }
  }
  return total
}

func log(_ message: String) {
  FileHandle.standardError.write(Data((message + "\n").utf8))
}

/// One implementation's store during a comparison.
final class Subject {
  let type: any Backend.Type
  let path: String
  var store: any Backend
  var figures = Figures()
  var latencies: [Double] = []
  var label: String

  let durability: CommitDurability

  init(_ type: any Backend.Type, size: Int, durability: CommitDurability = .full) throws {
    self.type = type
    self.durability = durability
    path = temporaryPath("compare-\(type.name.filter(\.isLetter))")
    store = try type.open(at: path, durability: durability)
    label = "\(type.name) (\(durability)) at \(size)"
  }

  deinit { removeTemporaryItem(atPath: path) }
}

/// Runs the workload on every implementation, phase by phase, and returns their figures.
func compare(_ types: [any Backend.Type], _ workload: Workload) throws -> [Figures] {
  let subjects = try types.map { try Subject($0, size: workload.operations.count) }
  defer { for subject in subjects { subject.store.close() } }

  try appendAndCommitOneByOne(subjects, workload)
  try commitLogAlone(subjects, workload)
  let ids = try subjects.map { try $0.store.noteIDs() }

  for (index, subject) in subjects.enumerated() {
    // Rebuild, in a process of its own, with its peak memory: all of it, and the anonymous
    // part (the heap, not the mapped file).
    subject.store.close()
    let rebuild = try rebuildInChild(subject.type, at: subject.path)
    subject.figures.rebuildPeakMB = rebuild.peakMB
    subject.figures.rebuildHeapMB = rebuild.heapMB
    subject.figures.rebuildPerSecond = Double(rebuild.replayed) / rebuild.seconds
    log("\(subject.label): rebuild \(Int(subject.figures.rebuildPerSecond)) events/s")

    // Open and read the first page of the timeline: each time a fresh open.
    var opens: [Double] = []
    for _ in 0..<11 {
      let (page, elapsed) = try time { () throws -> Int? in
        let opened = try subject.type.open(at: subject.path, durable: true)
        defer { opened.close() }
        return try opened.firstTimelinePage()
      }
      if page != nil { opens.append(elapsed) }
    }
    subject.figures.openFirstPage = opens.isEmpty ? nil : median(opens) * 1000

    // Queries on an open store.
    subject.store = try subject.type.open(at: subject.path, durability: subject.durability)
    let store = subject.store
    // The text index: built (or brought up to date) once after the workload and the rebuild, then queried.
    let (built, buildTime) = try time { try store.buildSearchIndex() }
    if built {
      subject.figures.searchIndexBuild = buildTime * 1000
      var indexed: [Double] = []
      for _ in 0..<11 {
        let (found, searchTime) = try time { try store.searchIndexed(Workload.rareWord) }
        if let found {
          searchedCheck(found, subject.label)
          indexed.append(searchTime)
        }
      }
      subject.figures.searchIndexed = indexed.isEmpty ? nil : median(indexed) * 1000
    }

    var tagged: [Double] = []
    var searched: [Double] = []
    for query in 0..<11 {
      let (count, elapsed) = try time {
        try store.notes(taggedWith: Workload.tagNames[query % Workload.tagNames.count])
      }
      if count != nil { tagged.append(elapsed) }
      let (found, searchTime) = try time { try store.search(Workload.rareWord) }
      if let found {
        searchedCheck(found, subject.label)
        searched.append(searchTime)
      }
    }
    subject.figures.tagged = tagged.isEmpty ? nil : median(tagged) * 1000
    subject.figures.search = searched.isEmpty ? nil : median(searched) * 1000

    try ingest(into: subject, workload, ids: ids[index])
  }
  return subjects.map(\.figures)
}

/// The one-change transactions each implementation takes in turn.
let oneByOneRounds = 1000

/// Batched user changes, a thousand to a transaction, then the bytes on disk; then one change
/// per transaction, the implementations taking turns commit by commit (in a rotating order),
/// so that each sees the same disk: its fsync latency is bimodal.
func appendAndCommitOneByOne(_ subjects: [Subject], _ workload: Workload) throws {
  for subject in subjects {
    let (_, appendTime) = try time { try workload.apply(to: subject.store) }
    subject.figures.events = try subject.store.eventCount()
    subject.figures.appendPerSecond = Double(subject.figures.events) / appendTime
    subject.figures.bytesPerEvent = try diskBytes(subject.path) / Double(subject.figures.events)
    log("\(subject.label): append \(Int(subject.figures.appendPerSecond)) events/s")
  }
  for round in 0..<oneByOneRounds {
    // Short edits; one in fifty with the word the search looks for, as in the workload.
    let operation = Operation.setText(
      note: workload.liveNotes[round % workload.liveNotes.count],
      text: round % 50 == 7 ? "Edit \(round) \(Workload.rareWord)" : "Edit \(round)")
    for offset in subjects.indices {
      let subject = subjects[(round + offset) % subjects.count]
      subject.latencies.append(try time { try subject.store.apply([operation][...]) }.1)
    }
  }
  for subject in subjects {
    subject.figures.durableP50 = percentile(subject.latencies, 0.5) * 1000
    subject.figures.durableP99 = percentile(subject.latencies, 0.99) * 1000
  }
}

/// What deferring a user change's projections would leave of its durable commit: VLog
/// ingesting one-event pages whose projections wait (the pull's path: the event, its id- and
/// object-index entries and the log's state, durably), taking turns with raw LMDB's one put;
/// every hundredth page brings the projections up to date (not counted). Sets both subjects'
/// `logAloneP50`.
func commitLogAlone(_ subjects: [Subject], _ workload: Workload) throws {
  guard let raw = subjects.first(where: { $0.store is RawLMDBBackend }),
    let vlog = subjects.first(where: { $0.store is VLogBackend }),
    let store = vlog.store as? VLogBackend
  else { return }
  let replica = ReplicaID(Identifier(high: 0xA110, low: 1))
  let start = UInt64(Date().timeIntervalSince1970 * 1000) + 7_200_000
  var rawTimes: [Double] = []
  var logTimes: [Double] = []
  for round in 0..<oneByOneRounds {
    // As the one-by-one rounds edit: one in fifty with the word the search looks for.
    let note = workload.liveNotes[round % workload.liveNotes.count]
    let text = round % 50 == 7 ? "Edit \(round) \(Workload.rareWord)" : "Edit \(round)"
    let operation = Operation.setText(note: note, text: text)
    let event = Event(
      stamp: Stamp(
        time: HybridTime(milliseconds: start + UInt64(round), counter: 0), replica: replica),
      change: .textSet(store.id(ofNote: note), text: text, replacing: nil))
    rawTimes.append(try time { try raw.store.apply([operation][...]) }.1)
    let catchesUp = round % 100 == 99
    let (_, seconds) = try time { try store.ingest([event], more: !catchesUp) }
    if !catchesUp { logTimes.append(seconds) }
  }
  raw.figures.logAloneP50 = percentile(rawTimes, 0.5) * 1000
  vlog.figures.logAloneP50 = percentile(logTimes, 0.5) * 1000
}

/// A sync's worth of remote events, in pages of a thousand, into an open subject.
func ingest(into subject: Subject, _ workload: Workload, ids: [NoteID]) throws {
  let remote = Workload.remoteEvents(
    count: min(10_000, max(1000, workload.operations.count / 10)), ids: ids, now: Date())
  let store = subject.store
  let before = try store.eventCount()
  let (_, ingestTime) = try time {
    for offset in stride(from: 0, to: remote.count, by: 1000) {
      let end = min(offset + 1000, remote.count)
      try store.ingest(Array(remote[offset..<end]), more: end < remote.count)
    }
  }
  subject.figures.ingestPerSecond = Double(remote.count) / ingestTime
  let total = try store.eventCount()
  precondition(total == before + remote.count, "\(subject.label): \(total) events")
  log("\(subject.label): ingest \(Int(subject.figures.ingestPerSecond)) events/s")
}

/// The figures a commit's durability bounds — append, one change per transaction, ingest —
/// for each implementation in its mode of `durability`, measured side by side.
func compareCommits(
  _ types: [any Backend.Type], _ workload: Workload, durability: CommitDurability
) throws -> [Figures] {
  let subjects = try types.map {
    try Subject($0, size: workload.operations.count, durability: durability)
  }
  defer { for subject in subjects { subject.store.close() } }
  try appendAndCommitOneByOne(subjects, workload)
  for subject in subjects {
    try ingest(into: subject, workload, ids: try subject.store.noteIDs())
  }
  return subjects.map(\.figures)
}

struct RebuildFigures {
  var replayed: Int
  var seconds: Double
  var peakMB: Double
  var heapMB: Double
}

struct ChildFailed: Error, CustomStringConvertible {
  var description: String
}

/// Runs the rebuild of the store at `path` in a child process (this program, told so by
/// `VLOG_COMPARE_REBUILD`) and reads its figures from its output.
func rebuildInChild(_ type: any Backend.Type, at path: String) throws -> RebuildFigures {
  let process = Process()
  process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
  process.environment = ProcessInfo.processInfo.environment.merging(
    ["VLOG_COMPARE_REBUILD": "\(type.name)\n\(path)"], uniquingKeysWith: { $1 })
  let output = Pipe()
  process.standardOutput = output
  try process.run()
  let data = output.fileHandleForReading.readDataToEndOfFile()
  process.waitUntilExit()
  let fields = String(decoding: data, as: UTF8.self).split(separator: " ")
  guard process.terminationStatus == 0, fields.count == 4, let replayed = Int(fields[0]),
    let seconds = Double(fields[1]), let peak = Double(fields[2]),
    let heap = Double(fields[3].trimmingCharacters(in: .whitespacesAndNewlines))
  else {
    throw ChildFailed(
      description: "the rebuild of \(type.name) failed: \(String(decoding: data, as: UTF8.self))")
  }
  return RebuildFigures(replayed: replayed, seconds: seconds, peakMB: peak, heapMB: heap)
}

/// The child's side: opens the store, rebuilds it, prints events, seconds, peak resident MB
/// and peak anonymous MB.
func runRebuildChild(_ request: String) throws {
  let parts = request.split(separator: "\n", maxSplits: 1).map(String.init)
  let all: [any Backend.Type] = [RawLMDBBackend.self, VLogBackend.self, SQLiteBackend.self]
  guard parts.count == 2, let type = all.first(where: { $0.name == parts[0] }) else {
    throw ChildFailed(description: "no backend named in \(request)")
  }
  let store = try type.open(at: parts[1], durable: true)
  defer { store.close() }
  try resetPeakMemory()
  let ((replayed, seconds), heap) = try withPeakAnonymousMemory {
    try time { try store.rebuild() }
  }
  print(replayed, seconds, try peakMemoryMB(), heap)
}

/// A search that finds nothing would measure nothing.
func searchedCheck(_ found: Int, _ label: String) {
  precondition(found > 0, "\(label): the search found no note")
}

func format(_ value: Double?, _ digits: Int = 2) -> String {
  guard let value else { return "—" }
  if value >= 1_000_000 { return String(format: "%.2f M", value / 1_000_000) }
  if value >= 10_000 { return String(format: "%.0f k", value / 1000) }
  if value >= 100 { return String(format: "%.0f", value) }
  return String(format: "%.\(digits)f", value)
}

func ratio(_ a: Double?, _ b: Double?) -> String {
  guard let a, let b, b > 0 else { return "—" }
  return String(format: "%.2f", a / b)
}

if let request = ProcessInfo.processInfo.environment["VLOG_COMPARE_REBUILD"] {
  try runRebuildChild(request)
  exit(0)
}

let sizes = CommandLine.arguments.dropFirst().compactMap { Int($0) }
var rows: [String] = []
var commitRows: [String] = []
for size in sizes.isEmpty ? [10_000] : sizes {
  let workload = Workload(size: size)
  // VLOG_COMPARE_ONLY=VLog runs one implementation (to profile it); its columns only.
  let only = ProcessInfo.processInfo.environment["VLOG_COMPARE_ONLY"]
  let all: [any Backend.Type] = [RawLMDBBackend.self, VLogBackend.self, SQLiteBackend.self]
  let types = all.filter { only == nil || $0.name == only }
  let measured = try compare(types, workload)
  func figures(_ type: any Backend.Type) -> Figures {
    types.firstIndex { $0 == type }.map { measured[$0] } ?? Figures()
  }
  let (raw, vlog, sqlite) = (
    figures(RawLMDBBackend.self), figures(VLogBackend.self), figures(SQLiteBackend.self)
  )
  let n = "\(vlog.events)"
  // (figure, unit, raw, VLog, SQLite, larger is better)
  let lines: [(String, String, Double?, Double?, Double?, Bool)] = [
    (
      "append, batches of 1,000 changes, durable", "events/s", raw.appendPerSecond,
      vlog.appendPerSecond, sqlite.appendPerSecond, true
    ),
    (
      "bytes on disk per event", "bytes", raw.bytesPerEvent, vlog.bytesPerEvent,
      sqlite.bytesPerEvent, false
    ),
    (
      "one durable change per transaction, interleaved, p50", "ms", raw.durableP50, vlog.durableP50,
      sqlite.durableP50, false
    ),
    (
      "one durable change per transaction, interleaved, p99", "ms", raw.durableP99, vlog.durableP99,
      sqlite.durableP99, false
    ),
    (
      "one durable change, its log's commit alone (projections deferred), interleaved, p50",
      "ms", raw.logAloneP50, vlog.logAloneP50, nil, false
    ),
    (
      "rebuild projections from the log", "events/s", raw.rebuildPerSecond, vlog.rebuildPerSecond,
      sqlite.rebuildPerSecond, true
    ),
    (
      "rebuild, peak resident memory (with the mapped file)", "MB", raw.rebuildPeakMB,
      vlog.rebuildPeakMB, sqlite.rebuildPeakMB, false
    ),
    (
      "rebuild, peak heap (RssAnon)", "MB", raw.rebuildHeapMB, vlog.rebuildHeapMB,
      sqlite.rebuildHeapMB, false
    ),
    ("open + first timeline page", "ms", nil, vlog.openFirstPage, sqlite.openFirstPage, false),
    ("notes with a tag", "ms", nil, vlog.tagged, sqlite.tagged, false),
    ("text search, first 50 (SQLite: LIKE)", "ms", nil, vlog.search, sqlite.search, false),
    (
      "text index brought up to date after the workload (SQLite: FTS5 built)", "ms", nil,
      vlog.searchIndexBuild, sqlite.searchIndexBuild, false
    ),
    (
      "text search, first 50, indexed (SQLite: FTS5 trigram)", "ms", nil, vlog.searchIndexed,
      sqlite.searchIndexed, false
    ),
    (
      "ingest remote events, pages of 1,000", "events/s", raw.ingestPerSecond, vlog.ingestPerSecond,
      sqlite.ingestPerSecond, true
    ),
  ]
  for (figure, unit, r, v, s, larger) in lines {
    let vsRaw = larger ? ratio(v, r) : ratio(r, v)
    let vsPeer = s == nil ? "—" : (larger ? ratio(v, s) : ratio(s, v)) + "×"
    rows.append(
      "| \(figure) | \(n) | \(unit) | \(format(r)) | \(format(v)) | \(format(s)) | \(vsRaw) | \(vsPeer) |"
    )
  }

  // What a commit's durability bounds, in each class: the full class from the run above, the
  // others measured now, each implementation in its mode of the class.
  var classes = [(CommitDurability.full, raw, vlog, sqlite)]
  if only == nil {
    for durability in [CommitDurability.normal, .off] {
      let measured = try compareCommits(all, workload, durability: durability)
      classes.append((durability, measured[0], measured[1], measured[2]))
    }
  }
  let commitFigures: [(String, String, KeyPath<Figures, Double>, Bool)] = [
    ("append, batches of 1,000 changes", "events/s", \.appendPerSecond, true),
    ("one change per transaction, interleaved, p50", "ms", \.durableP50, false),
    ("one change per transaction, interleaved, p99", "ms", \.durableP99, false),
    ("ingest remote events, pages of 1,000", "events/s", \.ingestPerSecond, true),
  ]
  for (figure, unit, path, larger) in commitFigures {
    for (durability, r, v, s) in classes {
      let (r, v, s) = (r[keyPath: path], v[keyPath: path], s[keyPath: path])
      let vsRaw = larger ? ratio(v, r) : ratio(r, v)
      let vsPeer = larger ? ratio(v, s) : ratio(s, v)
      commitRows.append(
        "| \(figure) | \(durability) | \(n) | \(unit) | \(format(r)) | \(format(v)) | \(format(s)) | \(vsRaw) | \(vsPeer)× |"
      )
    }
  }
}
print("| figure | events | unit | raw LMDB | VLog | SQLite (GRDB) | VLog / raw | VLog vs SQLite |")
print("|---|---:|---|---:|---:|---:|---:|---:|")
for row in rows { print(row) }
print()
print(
  "Each durability class, each implementation in its mode of it: full (on disk when the "
    + "commit returns: VLog `.durable`, LMDB's default, SQLite WAL `synchronous = FULL`), normal "
    + "(a power loss may lose the last commits, never damage the store: VLog `.noMetaSync`, "
    + "LMDB `MDB_NOMETASYNC`, SQLite WAL `synchronous = NORMAL`, GRDB's default), off (a power "
    + "loss may lose any commit and damage the store: VLog `.noSync`, `MDB_NOSYNC`, SQLite "
    + "`synchronous = OFF`). A process crash loses nothing committed in any class.")
print()
print(
  "| figure | class | events | unit | raw LMDB | VLog | SQLite (GRDB) | VLog / raw | VLog vs SQLite |"
)
print("|---|---|---:|---|---:|---:|---:|---:|---:|")
for row in commitRows { print(row) }
if ProcessInfo.processInfo.environment["VLOG_COMPARE_ONLY"] == nil {
  log("16 writers at once against one after another")
  let shared = try await measureSharedCommits()
  print()
  print("| 16 durable `write` calls on one store | ms per 16, median of 101 rounds | ratio |")
  print("|---|---:|---|")
  print(
    "| made at once, from 16 tasks (they share commits) | \(format(shared.together)) | "
      + String(format: "%.2f", shared.apart / shared.together) + "× faster |")
  print("| made one after another (the reference) | \(format(shared.apart)) | 1 |")
}
