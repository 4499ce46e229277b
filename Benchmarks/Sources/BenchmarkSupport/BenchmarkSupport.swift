// Helpers shared by the benchmark suites: the events-per-second metric, measuring a run on a
// fresh directory, and raw LMDB through its C API (the physical limit).

public import Benchmark
internal import CLMDB
internal import Foundation

/// Events per benchmark iteration: `VLOG_BENCHMARK_EVENTS`, 1,000,000 by default.
public let eventCount =
  ProcessInfo.processInfo.environment["VLOG_BENCHMARK_EVENTS"].flatMap(Int.init) ?? 1_000_000
/// Events per transaction in batched benchmarks.
public let batchSize = 10_000
/// Bytes per value in the raw reference: the size of one encoded VLog text edit with its
/// checksum, so that both put the same number of bytes.
public let valueSize = 100
/// Commits measured by the one-change-per-transaction benchmarks.
public let durableCommits = 200

extension BenchmarkMetric {
  /// Items processed per second of the measured region.
  public static let eventsPerSecond = BenchmarkMetric.custom(
    "events/s", polarity: .prefersLarger, useScalingFactor: false)
}

/// The metrics every suite reports.
public let standardMetrics: [BenchmarkMetric] = [
  .wallClock, .cpuTotal, .mallocCountTotal, .peakMemoryResident, .eventsPerSecond,
]

/// Runs `work` on a fresh directory, measuring only `work`, and records events per second.
public func measureAppend(
  _ benchmark: Benchmark, count: Int = eventCount, _ work: (String) throws -> Void
) throws {
  let path = temporaryPath("append")
  defer { removeTemporaryItem(atPath: path) }
  let start = ContinuousClock.now
  benchmark.startMeasurement()
  try work(path)
  benchmark.stopMeasurement()
  benchmark.measurement(.eventsPerSecond, perSecond(count, since: start))
}

/// Items per second since `start`, for the events-per-second metric.
public func perSecond(_ count: Int, since start: ContinuousClock.Instant) -> Int {
  let elapsed = ContinuousClock.now - start
  let seconds =
    Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
  return Int(Double(count) / seconds)
}

/// A fresh path in the temporary directory, not yet created.
public func temporaryPath(_ name: String) -> String {
  FileManager.default.temporaryDirectory
    .appendingPathComponent("vlog-bench-\(name)-\(UUID().uuidString)").path
}

/// The value stored for a sequence number: `valueSize` bytes starting with the number.
public func fillValue(_ buffer: UnsafeMutableRawBufferPointer, _ sequence: UInt64) {
  buffer.storeBytes(of: sequence, as: UInt64.self)
}

/// LMDB through its C API only: the physical limit VLog is measured against.
public enum RawLMDB {
  /// Whether commits are flushed to disk.
  public enum Durability: CustomStringConvertible, Sendable {
    /// Data and meta page flushed at each commit.
    case durable
    /// Data flushed, the meta page not (`MDB_NOMETASYNC`): a power loss may undo the last
    /// commit.
    case noMetaSync
    /// Nothing flushed (`MDB_NOSYNC`).
    case noSync
    /// `durable`, `no-meta-sync` or `no-sync`, for benchmark names.
    public var description: String {
      switch self {
      case .durable: "durable"
      case .noMetaSync: "no-meta-sync"
      case .noSync: "no-sync"
      }
    }
  }

  struct Failure: Error, CustomStringConvertible {
    let operation: String
    let code: Int32
    var description: String { "\(operation): \(String(cString: mdb_strerror(code)))" }
  }

  static func check(_ rc: Int32, _ operation: String) throws {
    if rc != 0 { throw Failure(operation: operation, code: rc) }
  }

  /// An open environment with one database named `events`.
  public final class Store {
    /// The environment's directory.
    public let path: String
    let environment: OpaquePointer
    var database = MDB_dbi()

    /// Opens (creating) an environment with a map of `mapSize` bytes (1 GiB by default) and its
    /// `events` database.
    public init(path: String, durability: Durability, mapSize: Int = 1 << 30) throws {
      try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
      var environment: OpaquePointer?
      try check(mdb_env_create(&environment), "mdb_env_create")
      self.environment = environment!
      self.path = path
      try check(mdb_env_set_mapsize(environment, mapSize), "mdb_env_set_mapsize")
      try check(mdb_env_set_maxdbs(environment, 4), "mdb_env_set_maxdbs")
      let sync: UInt32 =
        switch durability {
        case .durable: 0
        case .noMetaSync: UInt32(MDB_NOMETASYNC)
        case .noSync: UInt32(MDB_NOSYNC)
        }
      let flags = UInt32(MDB_NOTLS) | sync
      try check(mdb_env_open(environment, path, flags, 0o644), "mdb_env_open")
      var transaction: OpaquePointer?
      try check(mdb_txn_begin(environment, nil, 0, &transaction), "mdb_txn_begin")
      try check(
        mdb_dbi_open(transaction, "events", UInt32(MDB_CREATE), &database), "mdb_dbi_open")
      try check(mdb_txn_commit(transaction), "mdb_txn_commit")
    }

    /// Closes the environment.
    public func close() { mdb_env_close(environment) }

    /// The number of entries.
    public func count() -> Int {
      var transaction: OpaquePointer?
      mdb_txn_begin(environment, nil, UInt32(MDB_RDONLY), &transaction)
      var stat = MDB_stat()
      mdb_stat(transaction, database, &stat)
      mdb_txn_abort(transaction)
      return stat.ms_entries
    }

    /// Reads every entry with a cursor, touching each value's bytes, and returns the count.
    public func scanCount() throws -> Int {
      var count = 0
      var checksum: UInt8 = 0
      try forEachEntry { _, value in
        for byte in UnsafeRawBufferPointer(start: value.mv_data, count: value.mv_size) {
          checksum &+= byte
        }
        count += 1
      }
      blackHole(checksum)
      return count
    }

    /// Calls `body` with each entry's key and value, in key order, in one read transaction.
    private func forEachEntry(_ body: (MDB_val, MDB_val) -> Void) throws {
      var transaction: OpaquePointer?
      try check(
        mdb_txn_begin(environment, nil, UInt32(MDB_RDONLY), &transaction), "mdb_txn_begin")
      defer { mdb_txn_abort(transaction) }
      var cursor: OpaquePointer?
      try check(mdb_cursor_open(transaction, database, &cursor), "mdb_cursor_open")
      defer { mdb_cursor_close(cursor) }
      var key = MDB_val()
      var value = MDB_val()
      var operation = MDB_FIRST
      while true {
        let rc = mdb_cursor_get(cursor, &key, &value, operation)
        if rc == MDB_NOTFOUND { return }
        try check(rc, "mdb_cursor_get")
        body(key, value)
        operation = MDB_NEXT
      }
    }

    /// Appends values under big-endian keys from `firstKey` with `MDB_APPEND`, in one
    /// transaction.
    public func append(_ values: [[UInt8]], firstKey: UInt64) throws {
      var transaction: OpaquePointer?
      try check(mdb_txn_begin(environment, nil, 0, &transaction), "mdb_txn_begin")
      var sequence = firstKey
      for bytes in values {
        var bigEndian = sequence.bigEndian
        let rc = withUnsafeMutableBytes(of: &bigEndian) { key in
          bytes.withUnsafeBytes { value in
            var key = MDB_val(mv_size: 8, mv_data: key.baseAddress)
            var data = MDB_val(
              mv_size: value.count, mv_data: UnsafeMutableRawPointer(mutating: value.baseAddress))
            return mdb_put(transaction, database, &key, &data, UInt32(MDB_APPEND))
          }
        }
        if rc != 0 {
          mdb_txn_abort(transaction)
          throw Failure(operation: "mdb_put", code: rc)
        }
        sequence += 1
      }
      try check(mdb_txn_commit(transaction), "mdb_txn_commit")
    }

    /// Reads every entry with a cursor and returns the total bytes seen.
    public func scan() throws -> Int {
      var total = 0
      try forEachEntry { key, value in total &+= key.mv_size &+ value.mv_size }
      return total
    }
  }

  /// Appends `count` values under big-endian keys 0..<count with `MDB_APPEND`, committing
  /// every `batchSize` puts.
  public static func append(
    at path: String, count: Int, durability: Durability, batchSize: Int = batchSize
  ) throws {
    let store = try Store(path: path, durability: durability)
    defer { store.close() }
    let value = UnsafeMutableRawBufferPointer.allocate(byteCount: valueSize, alignment: 8)
    defer { value.deallocate() }
    value.initializeMemory(as: UInt8.self, repeating: 0x61)
    var sequence: UInt64 = 0
    while sequence < UInt64(count) {
      var transaction: OpaquePointer?
      try check(mdb_txn_begin(store.environment, nil, 0, &transaction), "mdb_txn_begin")
      let end = min(sequence + UInt64(batchSize), UInt64(count))
      for next in sequence..<end {
        fillValue(value, next)
        var bigEndian = next.bigEndian
        let rc = withUnsafeMutableBytes(of: &bigEndian) { key in
          var key = MDB_val(mv_size: 8, mv_data: key.baseAddress)
          var data = MDB_val(mv_size: valueSize, mv_data: value.baseAddress)
          return mdb_put(transaction, store.database, &key, &data, UInt32(MDB_APPEND))
        }
        if rc != 0 {
          mdb_txn_abort(transaction)
          throw Failure(operation: "mdb_put", code: rc)
        }
      }
      try check(mdb_txn_commit(transaction), "mdb_txn_commit")
      sequence = end
    }
  }
}

/// Removes a benchmark's temporary store; a failure is reported on standard error, not thrown,
/// so that it never hides the benchmark's own error.
public func removeTemporaryItem(atPath path: String) {
  guard FileManager.default.fileExists(atPath: path) else { return }
  do {
    try FileManager.default.removeItem(atPath: path)
  } catch {
    FileHandle.standardError.write(Data("warning: could not remove \(path): \(error)\n".utf8))
  }
}
