// The reference every VLog figure is a ratio to: raw LMDB, through its C API, putting ~100-byte
// values under big-endian sequence keys, with nothing on top. The same workload through the
// Swift LMDB layer shows what the wrapper costs.

import Benchmark
import BenchmarkSupport
import Foundation
import LMDB

let benchmarks: @Sendable () -> Void = {
  Benchmark.defaultConfiguration = .init(
    metrics: standardMetrics,
    timeUnits: .milliseconds,
    warmupIterations: 1,
    maxDuration: .seconds(20),
    maxIterations: 5
  )

  for durability in [RawLMDB.Durability.durable, .noSync] {
    Benchmark("raw LMDB append, batches of \(batchSize), \(durability)") { benchmark in
      try measureAppend(benchmark) { path in
        try RawLMDB.append(at: path, count: eventCount, durability: durability)
      }
    }
    Benchmark("LMDB layer append, batches of \(batchSize), \(durability)") { benchmark in
      try measureAppend(benchmark) { path in
        try appendThroughWrapper(at: path, count: eventCount, durability: durability)
      }
    }
  }

  Benchmark(
    "raw LMDB one durable put per transaction",
    configuration: .init(maxIterations: 5)
  ) { benchmark in
    try measureAppend(benchmark, count: durableCommits) { path in
      try RawLMDB.append(
        at: path, count: durableCommits, durability: .durable, batchSize: 1)
    }
  }

  var scanned: RawLMDB.Store?
  Benchmark(
    "raw LMDB cursor scan",
    closure: { benchmark in
      guard let scanned else { fatalError("setup did not run") }
      let start = ContinuousClock.now
      benchmark.startMeasurement()
      let bytes = try scanned.scan()
      benchmark.stopMeasurement()
      blackHole(bytes)
      benchmark.measurement(.eventsPerSecond, perSecond(eventCount, since: start))
    },
    setup: {
      let path = temporaryPath("scan")
      try RawLMDB.append(at: path, count: eventCount, durability: .noSync)
      scanned = try RawLMDB.Store(path: path, durability: .noSync)
    },
    teardown: {
      if let store = scanned {
        store.close()
        removeTemporaryItem(atPath: store.path)
      }
      scanned = nil
    }
  )
}

/// The same workload through the Swift LMDB layer.
func appendThroughWrapper(at path: String, count: Int, durability: RawLMDB.Durability) throws {
  let environment = try Environment.open(
    at: path,
    configuration: .init(
      mapSize: 1 << 30, durability: durability == .durable ? .durable : .noSync))
  defer { environment.close() }
  let database = try environment.openDatabase(named: "events", flags: .create)
  var value = [UInt8](repeating: 0x61, count: valueSize)
  var sequence: UInt64 = 0
  while sequence < UInt64(count) {
    let end = min(sequence + UInt64(batchSize), UInt64(count))
    try environment.write { transaction in
      for next in sequence..<end {
        value.withUnsafeMutableBytes { fillValue($0, next) }
        try withUnsafeBytes(of: next.bigEndian) { key in
          try transaction.put(value, forKey: key, in: database, options: .append)
        }
      }
    }
    sequence = end
  }
}
