// The notes-app workload on raw LMDB, VLog and SQLite through GRDB as package-benchmark
// benchmarks (append, rebuild, queries, ingest for each), at a small size (`VLOG_PEER_EVENTS`, 2,000 by default), so that CI runs them and
// checks their allocation counts against the committed thresholds in `Thresholds/`:
//
//   swift package -c release benchmark thresholds check --target Peer
//
// The full comparison with ratios and sizes up to 1,000,000 events is `tools/compare`.

import Benchmark
import BenchmarkSupport
import Foundation
import VLog
import Workload

/// Operations in the workload: `VLOG_PEER_EVENTS`, 2,000 by default.
let peerEvents =
  ProcessInfo.processInfo.environment["VLOG_PEER_EVENTS"].flatMap(Int.init) ?? 2_000

let workload = Workload(size: peerEvents)

/// Builds a populated store outside the measured region.
func populated<B: Backend>(_ backend: B.Type, at path: String) throws -> B {
  let store = try B.open(at: path, durable: false)
  try workload.apply(to: store)
  return store
}

func register<B: Backend>(_ backend: B.Type, as name: String) {
  Benchmark("\(name)-append") { benchmark in
    let path = temporaryPath("peer-append")
    defer { removeTemporaryItem(atPath: path) }
    let store = try B.open(at: path, durable: false)
    defer { store.close() }
    benchmark.startMeasurement()
    try workload.apply(to: store)
    benchmark.stopMeasurement()
  }

  Benchmark("\(name)-rebuild") { benchmark in
    let path = temporaryPath("peer-rebuild")
    defer { removeTemporaryItem(atPath: path) }
    let store = try populated(B.self, at: path)
    defer { store.close() }
    benchmark.startMeasurement()
    blackHole(try store.rebuild())
    benchmark.stopMeasurement()
  }

  Benchmark("\(name)-queries") { benchmark in
    let path = temporaryPath("peer-queries")
    defer { removeTemporaryItem(atPath: path) }
    let store = try populated(B.self, at: path)
    defer { store.close() }
    benchmark.startMeasurement()
    blackHole(try store.firstTimelinePage())
    blackHole(try store.notes(taggedWith: "work"))
    blackHole(try store.search(Workload.rareWord))
    benchmark.stopMeasurement()
  }

  // SQLite's ingest allocates a few percent more or less from run to run of the same code
  // (39,685 to 42,523 in its last four threshold rewrites): its check allows 10 %. VLog's
  // does too: its samples count 5,255 to 5,259 allocations, but about one run in ten has one
  // sample 150 to 280 higher (allocations are counted for the whole process; the cause is not
  // known), and of three samples that one is the p90.
  var ingest = Benchmark.defaultConfiguration
  if name == "SQLite" || name == "VLog" {
    ingest.thresholds = [.mallocCountTotal: .init(relative: [.p90: 10.0])]
  }
  Benchmark("\(name)-ingest", configuration: ingest) { benchmark in
    let path = temporaryPath("peer-ingest")
    defer { removeTemporaryItem(atPath: path) }
    let store = try populated(B.self, at: path)
    defer { store.close() }
    let remote = Workload.remoteEvents(count: 1000, ids: try store.noteIDs(), now: Date())
    benchmark.startMeasurement()
    try store.ingest(remote, more: false)
    benchmark.stopMeasurement()
  }
}

let benchmarks: @Sendable () -> Void = {
  // Allocation counts are the same from run to run and machine to machine (but the ingests',
  // above); 5 % either way fails the check. Time is not a metric here: it varies too much to check, and
  // `tools/compare` measures it.
  Benchmark.defaultConfiguration = .init(
    metrics: [.mallocCountTotal],
    timeUnits: .milliseconds,
    warmupIterations: 0,
    maxDuration: .seconds(10),
    maxIterations: 3,
    thresholds: [.mallocCountTotal: .init(relative: [.p90: 5.0])]
  )
  register(RawLMDBBackend.self, as: "RawLMDB")
  register(VLogBackend.self, as: "VLog")
  register(SQLiteBackend.self, as: "SQLite")
}
