// Runs the notes-app workload on raw LMDB, VLog and SQLite through GRDB, side by side in one
// process, at each size given, and prints a Markdown table of the figures and their ratios.
//
//   .build/release/Compare 10000 100000 1000000 > results.md
//
// Progress goes to standard error. `tools/compare` builds and runs it.

import BenchmarkSupport
import Foundation
import VLog
import Workload

/// What one implementation measured at one size.
struct Figures {
  var events = 0
  var appendPerSecond = 0.0
  var durableP50 = 0.0
  var durableP99 = 0.0
  var rebuildPerSecond = 0.0
  var rebuildPeakMB = 0.0
  var openFirstPage: Double?
  var tagged: Double?
  var search: Double?
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
  var description: String { "/proc/self/status has no VmHWM line" }
}

/// The peak resident size in MB since the last reset.
func peakMemoryMB() throws -> Double {
  let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
  guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
    let kilobytes = Double(line.split(separator: " ", omittingEmptySubsequences: true)[1])
  else { throw NoPeakMemory() }
  return kilobytes / 1024
}

func log(_ message: String) {
  FileHandle.standardError.write(Data((message + "\n").utf8))
}

func run<B: Backend>(_ backend: B.Type, _ workload: Workload) throws -> Figures {
  var figures = Figures()
  let path = temporaryPath("compare-\(B.name.filter(\.isLetter))")
  defer { removeTemporaryItem(atPath: path) }
  let label = "\(B.name) at \(workload.operations.count)"

  // Batched user changes, durable, a thousand to a transaction.
  var store = try B.open(at: path, durable: true)
  let (_, appendTime) = try time { try workload.apply(to: store) }
  figures.events = try store.eventCount()
  figures.appendPerSecond = Double(figures.events) / appendTime
  log("\(label): append \(Int(figures.appendPerSecond)) events/s")

  // One durable change per transaction.
  var latencies: [Double] = []
  for index in 0..<200 {
    let operation = Operation.setText(
      note: workload.liveNotes[index % workload.liveNotes.count], text: "Edit \(index)")
    latencies.append(try time { try store.apply([operation][...]) }.1)
  }
  figures.durableP50 = percentile(latencies, 0.5) * 1000
  figures.durableP99 = percentile(latencies, 0.99) * 1000
  let ids = try store.noteIDs()
  store.close()

  // Rebuild, with its peak memory.
  store = try B.open(at: path, durable: true)
  try resetPeakMemory()
  let (replayed, rebuildTime) = try time { try store.rebuild() }
  figures.rebuildPeakMB = try peakMemoryMB()
  figures.rebuildPerSecond = Double(replayed) / rebuildTime
  store.close()
  log("\(label): rebuild \(Int(figures.rebuildPerSecond)) events/s")

  // Open and read the first page of the timeline: each time a fresh open.
  var opens: [Double] = []
  for _ in 0..<11 {
    let (page, elapsed) = try time { () throws -> Int? in
      let opened = try B.open(at: path, durable: true)
      defer { opened.close() }
      return try opened.firstTimelinePage()
    }
    if page != nil { opens.append(elapsed) }
  }
  figures.openFirstPage = opens.isEmpty ? nil : median(opens) * 1000

  // Queries on an open store.
  store = try B.open(at: path, durable: true)
  var tagged: [Double] = []
  var searched: [Double] = []
  for index in 0..<11 {
    let (count, elapsed) = try time {
      try store.notes(taggedWith: Workload.tagNames[index % Workload.tagNames.count])
    }
    if count != nil { tagged.append(elapsed) }
    let (found, searchTime) = try time { try store.search(Workload.rareWord) }
    if found != nil { searchedCheck(found!, label) }
    if found != nil { searched.append(searchTime) }
  }
  figures.tagged = tagged.isEmpty ? nil : median(tagged) * 1000
  figures.search = searched.isEmpty ? nil : median(searched) * 1000

  // A sync's worth of remote events, in pages of a thousand.
  let remote = Workload.remoteEvents(
    count: min(10_000, max(1000, workload.operations.count / 10)), ids: ids, now: Date())
  let (_, ingestTime) = try time {
    for offset in stride(from: 0, to: remote.count, by: 1000) {
      try store.ingest(Array(remote[offset..<min(offset + 1000, remote.count)]))
    }
  }
  figures.ingestPerSecond = Double(remote.count) / ingestTime
  let total = try store.eventCount()
  precondition(total == figures.events + 200 + remote.count, "\(label): \(total) events")
  store.close()
  log("\(label): ingest \(Int(figures.ingestPerSecond)) events/s")
  return figures
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

let sizes = CommandLine.arguments.dropFirst().compactMap { Int($0) }
var rows: [String] = []
for size in sizes.isEmpty ? [10_000] : sizes {
  let workload = Workload(size: size)
  let raw = try run(RawLMDBBackend.self, workload)
  let vlog = try run(VLogBackend.self, workload)
  let sqlite = try run(SQLiteBackend.self, workload)
  let n = "\(vlog.events)"
  // (figure, unit, raw, VLog, SQLite, larger is better)
  let lines: [(String, String, Double?, Double?, Double?, Bool)] = [
    (
      "append, batches of 1,000 changes, durable", "events/s", raw.appendPerSecond,
      vlog.appendPerSecond, sqlite.appendPerSecond, true
    ),
    (
      "one durable change per transaction, p50", "ms", raw.durableP50, vlog.durableP50,
      sqlite.durableP50, false
    ),
    (
      "one durable change per transaction, p99", "ms", raw.durableP99, vlog.durableP99,
      sqlite.durableP99, false
    ),
    (
      "rebuild projections from the log", "events/s", raw.rebuildPerSecond, vlog.rebuildPerSecond,
      sqlite.rebuildPerSecond, true
    ),
    (
      "rebuild, peak resident memory", "MB", raw.rebuildPeakMB, vlog.rebuildPeakMB,
      sqlite.rebuildPeakMB, false
    ),
    ("open + first timeline page", "ms", nil, vlog.openFirstPage, sqlite.openFirstPage, false),
    ("notes with a tag", "ms", nil, vlog.tagged, sqlite.tagged, false),
    ("text search, first 50", "ms", nil, vlog.search, sqlite.search, false),
    (
      "ingest remote events, pages of 1,000", "events/s", raw.ingestPerSecond, vlog.ingestPerSecond,
      sqlite.ingestPerSecond, true
    ),
  ]
  for (figure, unit, r, v, s, larger) in lines {
    let vsRaw = larger ? ratio(v, r) : ratio(r, v)
    let vsPeer = larger ? ratio(v, s) : ratio(s, v)
    rows.append(
      "| \(figure) | \(n) | \(unit) | \(format(r)) | \(format(v)) | \(format(s)) | \(vsRaw) | \(vsPeer)× |"
    )
  }
}
print("| figure | events | unit | raw LMDB | VLog | SQLite (GRDB) | VLog / raw | VLog vs SQLite |")
print("|---|---:|---|---:|---:|---:|---:|---:|")
for row in rows { print(row) }
