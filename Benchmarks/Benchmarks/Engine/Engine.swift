// The VLog engine against the raw LMDB reference (suite LMDBReference): batched user changes
// with projections, one durable change per transaction, rebuild, and open + first page.

import Benchmark
import BenchmarkSupport
import Foundation
import VLog

/// The notes the edits go to.
let notesInWorkload = 10_000

/// Texts of 47 bytes: a text-edit event is then 96 bytes, 100 with its checksum, the same as
/// a value of the raw reference.
let texts = (0..<64).map { index in
  let prefix = "Edit \(index) of the shopping list: "
  return prefix + String(repeating: "x", count: 47 - prefix.utf8.count)
}

func openStore(_ path: String, _ durability: NoteStore.Durability) throws -> NoteStore {
  try NoteStore.open(at: path, options: .init(durability: durability, mapSize: 1 << 30))
}

/// Creates the workload's notes, in batches.
func createNotes(_ store: NoteStore) throws -> [NoteID] {
  var ids: [NoteID] = []
  while ids.count < notesInWorkload {
    let batch = try store.write { changes in
      (0..<min(batchSize, notesInWorkload - ids.count)).map { index in
        changes.createNote(text: texts[index % texts.count])
      }
    }
    ids += batch
  }
  return ids
}

/// How a workload's edits fall on its notes.
enum Spread: CustomStringConvertible {
  /// Each batch's edits spread over all the notes: the worst case for the projections, as
  /// almost every edit touches a note the batch has not loaded yet.
  case allNotes
  /// Each batch's edits go to 10 notes, as typing does: runs of edits to the same notes.
  case fewNotes

  var description: String {
    self == .allNotes ? "spread over 10,000 notes" : "10 notes per batch"
  }

  func note(_ index: Int, of notes: [NoteID]) -> NoteID {
    switch self {
    case .allNotes: notes[(index &* 7919) % notes.count]
    case .fewNotes: notes[(index / 1000 &* 7919) % notes.count]
    }
  }
}

/// Appends `count` text edits to `notes`, `perTransaction` to a transaction.
func appendEdits(
  _ store: NoteStore, _ notes: [NoteID], count: Int, perTransaction: Int,
  spread: Spread = .allNotes
) throws {
  var done = 0
  while done < count {
    let size = min(perTransaction, count - done)
    try store.write { changes in
      for index in done..<(done + size) {
        changes.setText(texts[index % texts.count], of: spread.note(index, of: notes))
      }
    }
    done += size
  }
}

/// A store of `eventCount` events, built once per process for the read-side benchmarks.
func buildLargeStore() throws -> String {
  let path = temporaryPath("engine-large")
  let store = try openStore(path, .noSync)
  let notes = try createNotes(store)
  try appendEdits(
    store, notes, count: max(0, eventCount - 2 * notes.count), perTransaction: batchSize)
  store.close()
  return path
}

let benchmarks: @Sendable () -> Void = {
  Benchmark.defaultConfiguration = .init(
    metrics: standardMetrics,
    timeUnits: .milliseconds,
    warmupIterations: 1,
    maxDuration: .seconds(30),
    maxIterations: 5
  )

  // Each workload's raw LMDB reference runs next to it (benchmarks run in name order), so the
  // ratios are not skewed by the machine's speed drifting over the run.
  for durability in [NoteStore.Durability.durable, .noSync] {
    let rawDurability: RawLMDB.Durability = durability == .durable ? .durable : .noSync
    let workload = "append, batches of \(batchSize), \(durability)"
    Benchmark(
      "\(workload) · 1 raw LMDB, same bytes",
      configuration: .init(warmupIterations: 1, maxIterations: 3)
    ) { benchmark in
      try measureAppend(benchmark) { path in
        try RawLMDB.append(at: path, count: eventCount, durability: rawDurability)
      }
    }
    for (rank, spread) in [Spread.fewNotes, .allNotes].enumerated() {
      Benchmark(
        "\(workload) · \(rank + 2) VLog, \(spread)",
        configuration: .init(warmupIterations: 0, maxIterations: 3)
      ) { benchmark in
        let path = temporaryPath("engine-append")
        defer { removeTemporaryItem(atPath: path) }
        let store = try openStore(path, durability)
        defer { store.close() }
        let notes = try createNotes(store)
        let start = ContinuousClock.now
        benchmark.startMeasurement()
        try appendEdits(store, notes, count: eventCount, perTransaction: batchSize, spread: spread)
        benchmark.stopMeasurement()
        benchmark.measurement(.eventsPerSecond, perSecond(eventCount, since: start))
      }
    }
  }

  Benchmark("one durable change per transaction · 1 raw LMDB") { benchmark in
    try measureAppend(benchmark, count: durableCommits) { path in
      try RawLMDB.append(at: path, count: durableCommits, durability: .durable, batchSize: 1)
    }
  }

  Benchmark("one durable change per transaction · 2 VLog") { benchmark in
    let path = temporaryPath("engine-durable")
    defer { removeTemporaryItem(atPath: path) }
    let store = try openStore(path, .durable)
    defer { store.close() }
    let notes = try store.write { changes in
      (0..<100).map { changes.createNote(text: texts[$0 % texts.count]) }
    }
    let start = ContinuousClock.now
    benchmark.startMeasurement()
    try appendEdits(store, notes, count: durableCommits, perTransaction: 1)
    benchmark.stopMeasurement()
    benchmark.measurement(.eventsPerSecond, perSecond(durableCommits, since: start))
  }

  var largeStore: String?
  let setUpLargeStore: Benchmark.BenchmarkSetupHook = {
    if largeStore == nil { largeStore = try buildLargeStore() }
  }
  let removeLargeStore: Benchmark.BenchmarkTeardownHook = {
    if let path = largeStore { removeTemporaryItem(atPath: path) }
    largeStore = nil
  }

  Benchmark(
    "rebuild projections · VLog",
    configuration: .init(warmupIterations: 0, maxIterations: 3),
    closure: { benchmark in
      let store = try openStore(largeStore!, .durable)
      defer { store.close() }
      let start = ContinuousClock.now
      benchmark.startMeasurement()
      let replayed = try store.rebuildProjections()
      benchmark.stopMeasurement()
      benchmark.measurement(.eventsPerSecond, perSecond(replayed, since: start))
    }, setup: setUpLargeStore, teardown: removeLargeStore)

  Benchmark(
    "open a store and read the first timeline page · VLog",
    configuration: .init(timeUnits: .microseconds, maxIterations: 20),
    closure: { benchmark in
      let store = try openStore(largeStore!, .durable)
      let page = try store.timeline(limit: 50)
      store.close()
      precondition(page.count == 50)
      blackHole(page)
    }, setup: setUpLargeStore, teardown: removeLargeStore)
}
