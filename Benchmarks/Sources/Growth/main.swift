// What grows as the log grows: the append's rate and the bytes each commit writes, window by
// window, as a store takes a workload of many events in batches of 1,000; with the notes as
// many as the workload makes, or fixed, so that a log's growth is told apart from more notes.
//
//   Growth 1000000            # notes: a tenth of the size, at most 10,000 (tools/compare's)
//   Growth 1000000 1000       # 1,000 notes
//
// Bytes written are `wchar` of /proc/self/io: what the process handed to write(2) and
// pwrite(2), which for LMDB is the dirty pages of each commit and its meta page.

import Foundation
import Workload

/// The process's `wchar`; 0 where there is no `/proc/self/io` (not Linux): the column then
/// reads 0 and the rates stand alone.
func writtenBytes() -> Int {
  guard let text = try? String(contentsOfFile: "/proc/self/io", encoding: .utf8) else { return 0 }
  for line in text.split(separator: "\n") where line.hasPrefix("wchar:") {
    return Int(line.dropFirst(6).trimmingCharacters(in: .whitespaces)) ?? 0
  }
  return 0
}

func run<B: Backend>(_: B.Type, workload: Workload, windows: Int) throws {
  let directory = FileManager.default.temporaryDirectory
    .appendingPathComponent("vlog-growth-\(UUID().uuidString)")
  try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
  // The store goes with the run (a temporary directory: a failed removal leaves it to the
  // system), unless VLOG_GROWTH_KEEP asks to keep it for `mdb_stat`.
  defer {
    if ProcessInfo.processInfo.environment["VLOG_GROWTH_KEEP"] == nil {
      try? FileManager.default.removeItem(at: directory)
    } else {
      print(directory.path)
    }
  }
  let store = try B.open(at: directory.appendingPathComponent("store").path, durability: .full)
  defer { store.close() }
  let batches = stride(from: 0, to: workload.operations.count, by: Workload.batchSize).map {
    workload.operations[$0..<min($0 + Workload.batchSize, workload.operations.count)]
  }
  let perWindow = max(1, batches.count / windows)
  print("| \(B.name) | events | events/s | bytes written / event |")
  print("|---|---:|---:|---:|")
  var index = 0
  while index < batches.count {
    let end = min(index + perWindow, batches.count)
    let bytes = writtenBytes()
    let start = ContinuousClock.now
    var events = 0
    for batch in batches[index..<end] {
      try store.apply(batch)
      events += batch.count
    }
    let seconds = (ContinuousClock.now - start) / .seconds(1)
    let written = writtenBytes() - bytes
    print(
      "| | \(try store.eventCount()) | \(Int(Double(events) / seconds)) |"
        + " \(written / max(1, events)) |")
    index = end
  }
}

let arguments = CommandLine.arguments.dropFirst().compactMap { Int($0) }
let size = arguments.first ?? 1_000_000
let notes = arguments.dropFirst().first
let workload = Workload(size: size, notes: notes)
print("\(size) changes on \(workload.notes) notes, batches of \(Workload.batchSize), durable\n")
let only = ProcessInfo.processInfo.environment["VLOG_COMPARE_ONLY"]
if only == nil || only == RawLMDBBackend.name {
  try run(RawLMDBBackend.self, workload: workload, windows: 10)
  print()
}
if only == nil || only == VLogBackend.name {
  try run(VLogBackend.self, workload: workload, windows: 10)
}
