import Foundation
import LMDB
import Testing
import VLogTesting

@Suite("Group commit")
struct GroupCommitTests {
  struct Planted: Error, Equatable {}

  /// Submits `count` writes of `body` while the writer is held, and returns their outcomes in
  /// order of submission once all have finished.
  static func submitHeld<R: Sendable>(
    _ environment: Environment, _ commits: GroupCommit, count: Int,
    _ body: @escaping @Sendable (Int, borrowing WriteTransaction) throws -> R
  ) async throws -> [Result<R, any Error>] {
    let gate = await WriterGate(environment)
    var tasks: [Task<R, any Error>] = []
    for index in 0..<count {
      tasks.append(Task { try await commits.write { try body(index, $0) } })
      // In order: each is pending before the next is submitted.
      while commits.pendingWrites < index + 1 { await Task.yield() }
    }
    try await gate.release()
    var outcomes: [Result<R, any Error>] = []
    for task in tasks { outcomes.append(await task.result) }
    return outcomes
  }

  @Test(
    "Writes submitted while a commit is in flight share the next commit, a group's size at most, each with its own result",
    arguments: [(64, 1), (16, 4)])
  func writesShareCommits(maximumGroup: Int, groups: Int) async throws {
    try await withTemporaryDirectory { path in
      let environment = try Environment.open(at: path, configuration: .init(durability: .noSync))
      defer { environment.close() }
      let database = try environment.openDatabase(named: "values", flags: .create)
      let commits = GroupCommit(environment, maximumGroup: maximumGroup)
      let outcomes = try await Self.submitHeld(environment, commits, count: 50) {
        index, transaction in
        try transaction.put(value(UInt64(index)), forKey: key(UInt64(index)), in: database)
        // Each sees the writes of the group's earlier ones.
        return (transaction: transaction.id, before: try transaction.count(in: database) - 1)
      }
      let results = try outcomes.map { try $0.get() }
      #expect(results.map(\.before) == Array(0..<50))
      #expect(Set(results.map(\.transaction)).count == groups)
      let stored = try environment.read { try entries($0, in: database) }
      #expect(stored.map(\.value) == (0..<50).map { value(UInt64($0)) })
    }
  }

  @Test("A write that throws takes back only its own writes; the rest of its group commits")
  func failureIsolated() async throws {
    try await withTemporaryDirectory { path in
      let environment = try Environment.open(at: path, configuration: .init(durability: .noSync))
      defer { environment.close() }
      let database = try environment.openDatabase(named: "values", flags: .create)
      let commits = GroupCommit(environment)
      let outcomes = try await Self.submitHeld(environment, commits, count: 3) {
        index, transaction in
        try transaction.put(value(UInt64(index)), forKey: key(UInt64(index)), in: database)
        if index == 1 { throw Planted() }
        return transaction.id
      }
      #expect(throws: Planted.self) { try outcomes[1].get() }
      #expect(try outcomes[0].get() == outcomes[2].get())
      let stored = try environment.read { try entries($0, in: database) }
      #expect(stored.map(\.key) == [key(0), key(2)])
    }
  }

  @Test("A group that fills the map grows it and runs again: every write commits once")
  func groupGrowsTheMap() async throws {
    try await withTemporaryDirectory { path in
      let environment = try Environment.open(
        at: path, configuration: .init(mapSize: 1 << 20, durability: .noSync))
      defer { environment.close() }
      let database = try environment.openDatabase(named: "values", flags: .create)
      let commits = GroupCommit(environment)
      // 20 writes of 100 KiB: twice the map.
      let outcomes = try await Self.submitHeld(environment, commits, count: 20) {
        index, transaction in
        try transaction.put(
          value(UInt64(index), size: 100 << 10), forKey: key(UInt64(index)), in: database)
        return transaction.id
      }
      #expect(Set(try outcomes.map { try $0.get() }).count == 1)
      #expect(try environment.info().mapSize > 1 << 20)
      let stored = try environment.read { try entries($0, in: database) }
      #expect(stored.map(\.value) == (0..<20).map { value(UInt64($0), size: 100 << 10) })
    }
  }

  @Test(
    "What follows each commit runs in the order the writes were submitted, before any caller resumes, and only for writes that succeeded"
  )
  func afterCommitInOrder() async throws {
    try await withTemporaryDirectory { path in
      let environment = try Environment.open(at: path, configuration: .init(durability: .noSync))
      defer { environment.close() }
      let database = try environment.openDatabase(named: "values", flags: .create)
      let commits = GroupCommit(environment)
      let followed = LockedBox<[Int]>([])
      let gate = await WriterGate(environment)
      var tasks: [Task<[Int], any Error>] = []
      for index in 0..<10 {
        tasks.append(
          Task {
            _ = try await commits.write(
              { transaction in
                try transaction.put(
                  value(UInt64(index)), forKey: key(UInt64(index)), in: database)
                if index == 4 { throw Planted() }
                return index
              },
              afterCommit: { index in followed.append(index) })
            // Resumed once every write of the group is followed.
            return followed.value
          })
        while commits.pendingWrites < index + 1 { await Task.yield() }
      }
      try await gate.release()
      for (index, task) in tasks.enumerated() {
        if index == 4 {
          await #expect(throws: Planted.self) { try await task.value }
        } else {
          #expect(try await task.value == [0, 1, 2, 3, 5, 6, 7, 8, 9])
        }
      }
    }
  }

  @Test("A group whose transaction cannot begin fails every write of it, with the reason")
  func groupFailure() async throws {
    try await withTemporaryDirectory { path in
      try Environment.open(at: path, configuration: .init(durability: .noSync)).close()
      let environment = try Environment.open(
        at: path, configuration: .init(durability: .noSync, isReadOnly: true))
      defer { environment.close() }
      let commits = GroupCommit(environment)
      let outcomes = try await Self.submitHeld(environment, commits, count: 3) { _, _ in true }
      for outcome in outcomes {
        #expect(throws: LMDBError.self) { try outcome.get() }
      }
    }
  }
}
