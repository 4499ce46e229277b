import Foundation
import LMDB
import Synchronization
import Testing
import VLogTesting

@Suite("Map growth")
struct MapGrowthTests {
  @Test("a 1 MiB map grows to hold 100,000 values while another task reads")
  func growsWhileReading() async throws {
    try await withTemporaryDirectory { path in
      let environment = try Environment.open(
        at: path, configuration: .init(mapSize: 1 << 20, durability: .noSync))
      defer { environment.close() }
      let database = try environment.openDatabase(named: "values", flags: .create)
      let initialMapSize = try environment.info().mapSize
      #expect(initialMapSize == 1 << 20)

      let batch: UInt64 = 1000
      let total: UInt64 = 100_000
      let writerDone = Atomic<Bool>(false)

      let reader = Task.detached { () throws -> (reads: Int, lastCount: Int) in
        var reads = 0
        var lastCount = 0
        while !writerDone.load(ordering: .acquiring) || reads == 0 {
          let count = try environment.read { transaction -> Int in
            let count = try transaction.count(in: database)
            // Every snapshot holds whole batches, and the newest value in it is intact.
            guard count % Int(batch) == 0 else { throw SnapshotError.partialBatch(count) }
            if count > 0 {
              let last = UInt64(count - 1)
              guard try transaction.value(forKey: key(last), in: database) == value(last) else {
                throw SnapshotError.wrongValue(last)
              }
            }
            return count
          }
          guard count >= lastCount else { throw SnapshotError.wentBackwards(lastCount, count) }
          lastCount = count
          reads += 1
          await Task.yield()
        }
        return (reads, lastCount)
      }

      let writer = Task.detached { () throws -> Int in
        var bodyRuns = 0
        for start in stride(from: 0, to: total, by: Int(batch)) as StrideTo<UInt64> {
          try environment.write { transaction throws in
            bodyRuns += 1
            for number in start..<(start + batch) {
              try transaction.put(
                value(number), forKey: key(number), in: database, options: .append)
            }
          }
        }
        return bodyRuns
      }
      let bodyRuns: Int
      do {
        bodyRuns = try await writer.value
        writerDone.store(true, ordering: .releasing)
      } catch {
        writerDone.store(true, ordering: .releasing)
        throw error
      }
      let (reads, _) = try await reader.value

      let info = try environment.info()
      #expect(info.mapSize >= 8 << 20, "the map grew by doubling")
      #expect(info.mapSize.nonzeroBitCount == 1, "every growth doubled a power of two")
      #expect(bodyRuns > Int(total / batch), "some batches ran again after the map grew")
      #expect(reads > 0)
      try environment.read { transaction throws in
        #expect(try transaction.count(in: database) == Int(total))
        for number in stride(from: 0, to: total, by: 997) as StrideTo<UInt64> {
          #expect(try transaction.value(forKey: key(number), in: database) == value(number))
        }
      }
    }
  }

  @Test("a body that turns the map-full error into its own error is still retried")
  func retriedWhenBodyWrapsTheError() throws {
    struct Wrapped: Error {}
    try withTemporaryEnvironment(.init(mapSize: 1 << 20, durability: .noSync)) {
      environment, _ throws in
      let database = try environment.openDatabase(named: "values", flags: .create)
      var runs = 0
      try environment.write { transaction throws in
        runs += 1
        do {
          for number in 0..<30_000 as Range<UInt64> {
            try transaction.put(value(number), forKey: key(number), in: database, options: .append)
          }
        } catch {
          throw Wrapped()
        }
      }
      #expect(runs > 1)
      #expect(try environment.read { try $0.count(in: database) } == 30_000)
    }
  }

  @Test("a write that needs more than the maximum map size fails and commits nothing")
  func stopsAtMaximum() throws {
    let configuration = Environment.Configuration(
      mapSize: 1 << 20, maximumMapSize: 4 << 20, durability: .noSync)
    try withTemporaryEnvironment(configuration) { environment, _ throws in
      let database = try environment.openDatabase(named: "values", flags: .create)
      let error = #expect(throws: LMDBError.self) {
        try environment.write { transaction throws in
          for number in 0..<100_000 as Range<UInt64> {
            try transaction.put(value(number), forKey: key(number), in: database, options: .append)
          }
        }
      }
      #expect(error?.code == .mapFull)
      #expect(error?.message.contains("raise maximumMapSize (now 4 MiB)") == true)
      #expect(try environment.info().mapSize == 4 << 20)
      #expect(try environment.read { try $0.count(in: database) } == 0)
    }
  }

  /// In a child process whose address space has room for the map but not for its double:
  /// liblmdb unmaps the file before it maps it anew, so a handle kept after the failed remap
  /// has no map, and the next transaction on it dies by a signal. The environment must close
  /// instead, and open again at the size the file records, with everything committed.
  @Test(
    "a map that cannot grow closes the environment, which opens again whole",
    .disabled(if: runsUnderSanitizer, "sanitizers' shadow memory takes the address space"))
  func failedGrowthCloses() async {
    await #expect(processExitsWith: .success) {
      try withTemporaryDirectory { path in
        // A growth that succeeds after all stops at 64 MiB rather than fill the disk.
        let configuration = Environment.Configuration(
          mapSize: 32 << 20, maximumMapSize: 64 << 20, durability: .noSync)
        let environment = try Environment.open(at: path, configuration: configuration)
        let closeHandlerRan = RanFlag()
        environment.onClose { closeHandlerRan.set() }
        let database = try environment.openDatabase(named: "values", flags: .create)
        let payload = [UInt8](repeating: 7, count: 1000)
        // Room for allocations while the map fills, not for the map's second 32 MiB.
        var committed: UInt64 = 0
        let failure = try withAddressSpaceLimited(toCurrentPlus: 16 << 20) {
          #expect(throws: LMDBError.self) {
            while true {
              try environment.write { transaction throws in
                for number in committed..<(committed + 64) {
                  try transaction.put(
                    payload, forKey: key(number), in: database, options: .append)
                }
              }
              committed += 64
            }
          }
        }
        #expect(failure?.operation == "grow the map")
        #expect(failure?.message.contains("so the environment was closed; open it again") == true)
        #expect(committed > 20_000, "the first 32 MiB filled before the growth failed")
        #expect(!environment.isOpen)
        #expect(closeHandlerRan.isSet)
        let closed = #expect(throws: LMDBError.self) {
          try environment.read { try $0.count(in: database) }
        }
        #expect(closed?.code == .environmentClosed)
        // Closed, though still held: not open in this process, for a compaction either.
        #expect(throws: Never.self) { try Environment.refuseIfOpenInThisProcess(path) }
        let reopened = try Environment.open(at: path, configuration: configuration)
        defer { reopened.close() }
        #expect(reopened !== environment)
        let values = try reopened.openDatabase(named: "values")
        #expect(try reopened.read { try $0.count(in: values) } == Int(committed))
        try reopened.write { transaction throws in
          for number in committed..<(committed + 1000) {
            try transaction.put(payload, forKey: key(number), in: values, options: .append)
          }
        }
        #expect(try reopened.info().mapSize > 32 << 20, "the map grew once it had room")
      }
    }
  }

  /// As ``failedGrowthCloses()``, for the other remap: another process (`mdb_load`) grew the
  /// map and wrote past this process's map, so the next transaction here must adopt the size
  /// the file records — which the child's address space has no room for.
  @Test(
    "a map another process grew that this one cannot map closes the environment",
    .disabled(if: runsUnderSanitizer, "sanitizers' shadow memory takes the address space"))
  func failedAdoptionCloses() async {
    await #expect(processExitsWith: .success) {
      try withTemporaryDirectory { path in
        let configuration = Environment.Configuration(mapSize: 1 << 20, durability: .noSync)
        let environment = try Environment.open(at: path, configuration: configuration)
        let database = try environment.openDatabase(named: "values", flags: .create)
        try environment.write { transaction throws in
          for number in 0..<10 as Range<UInt64> {
            try transaction.put(value(number), forKey: key(number), in: database)
          }
        }
        // 2,000 values of 1,000 bytes, in a map of 1 GiB: past this process's 1 MiB map.
        var dump = "VERSION=3\nformat=bytevalue\nmapsize=1073741824\ntype=btree\nHEADER=END\n"
        let filler = String(repeating: "ab", count: 1000)
        for number in 0..<2000 {
          dump += " " + String(format: "%08x", number) + "\n " + filler + "\n"
        }
        dump += "DATA=END\n"
        let dumpPath = path + "/filler.dump"
        try dump.write(toFile: dumpPath, atomically: false, encoding: .utf8)
        let loaded = try ChildProcess.run(
          "/usr/bin/mdb_load", ["-f", dumpPath, "-s", "filler", path])
        #expect(loaded.status == 0, "mdb_load said: \(loaded.errors)")
        let failure = try withAddressSpaceLimited(toCurrentPlus: 16 << 20) {
          #expect(throws: LMDBError.self) {
            try environment.read { try $0.count(in: database) }
          }
        }
        #expect(failure?.operation == "adopt the map size")
        #expect(failure?.message.contains("so the environment was closed; open it again") == true)
        #expect(!environment.isOpen)
        let reopened = try Environment.open(at: path, configuration: configuration)
        defer { reopened.close() }
        let values = try reopened.openDatabase(named: "values")
        let fillers = try reopened.openDatabase(named: "filler")
        #expect(try reopened.read { try $0.count(in: values) } == 10)
        #expect(try reopened.read { try $0.count(in: fillers) } == 2000)
      }
    }
  }
}

/// A flag a `@Sendable` closure can set.
final class RanFlag: Sendable {
  private let value = Mutex(false)
  func set() { value.withLock { $0 = true } }
  var isSet: Bool { value.withLock { $0 } }
}

enum SnapshotError: Error {
  case partialBatch(Int)
  case wrongValue(UInt64)
  case wentBackwards(Int, Int)
}
