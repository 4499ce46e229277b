import Dispatch
import Foundation
import LMDB
import Synchronization
import Testing
import VLogTesting

@Suite("Transactions")
struct TransactionTests {
  @Test("put, get, overwrite and delete round-trip bytes exactly")
  func roundTrip() throws {
    try withTemporaryEnvironment { environment, _ throws in
      let database = try environment.openDatabase(named: "values", flags: .create)
      let binary: [UInt8] = [0, 255, 1, 254, 0, 0]
      try environment.write { transaction throws in
        try transaction.put(binary, forKey: Array("a".utf8), in: database)
        try transaction.put([UInt8](), forKey: Array("empty".utf8), in: database)
        try transaction.put(Data("first".utf8), forKey: Data("b".utf8), in: database)
        try transaction.put(Array("second".utf8), forKey: Array("b".utf8), in: database)
      }
      try environment.read { transaction throws in
        #expect(try transaction.value(forKey: Array("a".utf8), in: database) == binary)
        #expect(try transaction.value(forKey: Array("empty".utf8), in: database) == [])
        #expect(
          try transaction.value(forKey: Array("b".utf8), in: database) == Array("second".utf8))
        #expect(try transaction.value(forKey: Array("missing".utf8), in: database) == nil)
        #expect(try transaction.containsValue(forKey: Array("a".utf8), in: database))
        #expect(try transaction.count(in: database) == 3)
      }
      let deleted = try environment.write { transaction throws in
        (
          try transaction.delete(forKey: Array("a".utf8), in: database),
          try transaction.delete(forKey: Array("a".utf8), in: database)
        )
      }
      #expect(deleted == (true, false))
      #expect(try environment.read { try $0.count(in: database) } == 2)
    }
  }

  @Test("a value reserved in the map and filled in place reads back")
  func reservedPut() throws {
    try withTemporaryEnvironment { environment, _ throws in
      let database = try environment.openDatabase(named: "values", flags: .create)
      try environment.write { transaction throws in
        try transaction.put(forKey: key(1), reservingCount: 4, in: database) { buffer in
          buffer.copyBytes(from: [9, 8, 7, 6])
        }
      }
      #expect(try environment.read { try $0.value(forKey: key(1), in: database) } == [9, 8, 7, 6])
    }
  }

  @Test("a body that throws aborts the transaction and leaves nothing behind")
  func abortOnThrow() throws {
    struct Planned: Error {}
    try withTemporaryEnvironment { environment, _ throws in
      let database = try environment.openDatabase(named: "values", flags: .create)
      try environment.write { try $0.put(value(0), forKey: key(0), in: database) }
      #expect(throws: Planned.self) {
        try environment.write { transaction throws in
          for number in 1...100 as ClosedRange<UInt64> {
            try transaction.put(value(number), forKey: key(number), in: database)
          }
          try transaction.delete(forKey: key(0), in: database)
          throw Planned()
        }
      }
      try environment.read { transaction throws in
        #expect(try transaction.count(in: database) == 1)
        #expect(try transaction.value(forKey: key(0), in: database) == value(0))
      }
    }
  }

  @Test("after a fatal failure a transaction refuses further use and commits nothing")
  func failedTransactionIsNotReused() throws {
    let configuration = Environment.Configuration(
      mapSize: 1 << 20, maximumMapSize: 1 << 20, durability: .noSync)
    try withTemporaryEnvironment(configuration) { environment, _ throws in
      let database = try environment.openDatabase(named: "values", flags: .create)
      var laterError: LMDBError?
      let error = #expect(throws: LMDBError.self) {
        try environment.write { transaction throws in
          do {
            for number in 0..<100_000 as Range<UInt64> {
              try transaction.put(value(number), forKey: key(number), in: database)
            }
          } catch let error as LMDBError where error.code == .mapFull {
            // Swallow the failure and try to carry on: the transaction must refuse.
            do {
              try transaction.put(value(0), forKey: key(0), in: database)
            } catch let error as LMDBError {
              laterError = error
            }
          }
        }
      }
      #expect(error?.code == .mapFull)
      #expect(error?.message.contains("maximumMapSize") == true)
      #expect(laterError?.code == .transactionFailed)
      #expect(laterError?.message.contains("earlier failure") == true)
      #expect(try environment.read { try $0.count(in: database) } == 0)
      // The environment stays usable for the next transaction.
      try environment.write { try $0.put(value(1), forKey: key(1), in: database) }
      #expect(try environment.read { try $0.count(in: database) } == 1)
    }
  }

  @Test("a transaction begun inside another on the same thread is refused, not deadlocked")
  func nestedTransactionsAreRefused() throws {
    try withTemporaryEnvironment { environment, _ throws in
      let database = try environment.openDatabase(named: "values", flags: .create)
      let error = #expect(throws: LMDBError.self) {
        try environment.read { _ in
          try environment.write { try $0.put(value(1), forKey: key(1), in: database) }
        }
      }
      #expect(error?.code == .nestedTransaction)
      let nestedRead = #expect(throws: LMDBError.self) {
        try environment.write { _ in try environment.read { _ in } }
      }
      #expect(nestedRead?.code == .nestedTransaction)
      // Both outer transactions ended cleanly: a new one works.
      try environment.write { try $0.put(value(2), forKey: key(2), in: database) }
      #expect(try environment.read { try $0.count(in: database) } == 1)
    }
  }

  /// Each takes the environment's lock shared, or a lock whose holder may be growing the map:
  /// inside a transaction that would wait behind a growth that waits for the transaction.
  @Test("calls that take the environment's lock are refused inside a transaction")
  func lockTakingCallsAreRefusedInside() throws {
    try withTemporaryEnvironment { environment, _ throws in
      let database = try environment.openDatabase(named: "values", flags: .create)
      let calls: [(String, () throws -> Void)] = [
        ("info", { _ = try environment.info() }),
        ("statistics", { _ = try environment.statistics() }),
        ("sync", { try environment.sync() }),
        ("clearStaleReaders", { _ = try environment.clearStaleReaders() }),
        ("openDatabase", { _ = try environment.openDatabase(named: "values") }),
      ]
      for (name, call) in calls {
        let error = #expect(throws: LMDBError.self, "\(name)") {
          try environment.read { _ in try call() }
        }
        #expect(error?.code == .nestedTransaction, "\(name)")
        #expect(throws: Never.self, "\(name) outside a transaction") { try call() }
      }
      // What a transaction needs of the environment it reads through the transaction.
      let reclaimable = try environment.read { transaction in
        try environment.reclaimableBytes(databases: [database], in: transaction)
      }
      #expect(reclaimable >= 0)
    }
  }

  @Test("a reader keeps its snapshot while a writer commits")
  func readerKeepsSnapshot() throws {
    try withTemporaryEnvironment { environment, _ throws in
      let database = try environment.openDatabase(named: "values", flags: .create)
      try environment.write { try $0.put(Array("old".utf8), forKey: key(1), in: database) }

      let readerHasSnapshot = DispatchSemaphore(value: 0)
      let writerCommitted = DispatchSemaphore(value: 0)
      let readerDone = DispatchSemaphore(value: 0)
      let observed = LockedBox<[[UInt8]?]>([])
      let readerError = LockedBox<(any Error)?>(nil)
      Thread.detachNewThread {
        do {
          try environment.read { transaction throws in
            observed.append(try transaction.value(forKey: key(1), in: database))
            readerHasSnapshot.signal()
            writerCommitted.wait()
            observed.append(try transaction.value(forKey: key(1), in: database))
            observed.append(try transaction.value(forKey: key(2), in: database))
          }
        } catch {
          readerError.set(error)
        }
        readerDone.signal()
      }
      readerHasSnapshot.wait()
      try environment.write { transaction throws in
        try transaction.put(Array("new".utf8), forKey: key(1), in: database)
        try transaction.put(Array("added".utf8), forKey: key(2), in: database)
      }
      writerCommitted.signal()
      readerDone.wait()

      #expect(readerError.value == nil)
      #expect(observed.value == [Array("old".utf8), Array("old".utf8), nil])
      try environment.read { transaction throws in
        #expect(try transaction.value(forKey: key(1), in: database) == Array("new".utf8))
        #expect(try transaction.value(forKey: key(2), in: database) == Array("added".utf8))
      }
    }
  }

  @Test("many concurrent readers see consistent data")
  func concurrentReaders() async throws {
    try await withTemporaryDirectory { path in
      let environment = try Environment.open(at: path, configuration: .init(durability: .noSync))
      defer { environment.close() }
      let database = try environment.openDatabase(named: "values", flags: .create)
      try environment.write { transaction throws in
        for number in 0..<1000 as Range<UInt64> {
          try transaction.put(value(number), forKey: key(number), in: database)
        }
      }
      let totals = try await withThrowingTaskGroup(of: Int.self) { group in
        for reader in 0..<16 {
          group.addTask {
            try environment.read { transaction throws in
              var checked = 0
              for number in stride(from: UInt64(reader), to: 1000, by: 16) {
                guard try transaction.value(forKey: key(number), in: database) == value(number)
                else { return -1 }
                checked += 1
              }
              return checked
            }
          }
        }
        return try await group.reduce(into: [Int]()) { $0.append($1) }
      }
      #expect(totals.count == 16)
      #expect(totals.allSatisfy { $0 > 0 })
      #expect(totals.reduce(0, +) == 1000)
    }
  }
}

/// A value shared between threads in a test.
final class LockedBox<Value: Sendable>: Sendable {
  private let stored: Mutex<Value>
  init(_ value: Value) { stored = Mutex(value) }
  var value: Value { stored.withLock { $0 } }
  func set(_ value: Value) { stored.withLock { $0 = value } }
  func append<Element>(_ element: Element) where Value == [Element] {
    stored.withLock { $0.append(element) }
  }
}
