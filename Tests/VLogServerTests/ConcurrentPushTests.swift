import Foundation
import ServerTestSupport
import Testing
import VLogTesting

@testable import VLog
@testable import VLogServer

@Suite("Concurrent pushes")
struct ConcurrentPushTests {
  @Test(
    "Pushes at once from many accounts and to one account all land, in gapless order, each answered with its own outcome; one that fails fails alone",
    arguments: Backend.allCases)
  func pushesAtOnce(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      let accounts: [UInt64] = Array(1...4)
      try await createAccounts(accounts.map { "user\($0)" }, in: server.store)
      // On LMDB, account 1 has 8 writers and the others 2 each; on PostgreSQL, whose test
      // servers have a pool of 8 connections, 4 and 1: no push waits for a connection, which
      // under a whole suite's load on the shared cluster could outlast the database deadline.
      // Every writer also sends, between its pushes, one that must fail (a cursor past the end
      // of the log), which takes nothing with it.
      let (shared, others) = backend == .lmdb ? (8, 6) : (4, 3)
      let writers =
        (0..<shared).map { (writer: $0, account: UInt64(1)) }
        + (shared..<(shared + others)).map {
          (writer: $0, account: accounts[1 + ($0 - shared) % 3])
        }
      let pushes = 10
      let perPush = 5
      let stores = try await withThrowingTaskGroup(of: [Int].self) { group in
        for (writer, account) in writers {
          group.addTask {
            var stored: [Int] = []
            for push in 0..<pushes {
              let events = (0..<perPush).map {
                ScaleOutTests.event(writer: writer, index: push * perPush + $0)
              }
              let outcome = try await server.store.sync(
                account: account, pushing: events, after: 0, limit: 0)
              stored.append(outcome.stored)
              await #expect(throws: StorageError.self) {
                try await server.store.sync(
                  account: account,
                  pushing: [ScaleOutTests.event(writer: writer, index: 10_000 + push)],
                  after: 1_000_000, limit: 0)
              }
            }
            return stored
          }
        }
        var all: [Int] = []
        for try await stored in group { all += stored }
        return all
      }
      #expect(stores == Array(repeating: perPush, count: writers.count * pushes))
      for account in accounts {
        let expected = writers.filter { $0.account == account }.count * pushes * perPush
        let log = try await server.store.sync(
          account: account, pushing: [], after: 0, limit: 100_000)
        #expect(log.head.sequence == UInt64(expected))
        #expect(log.events.count == expected)
        // Every writer's events in its own order, and none of the failed pushes'.
        var byWriter: [UInt64: [String]] = [:]
        for event in log.events {
          guard case .textSet(_, let text, _) = event.change else { continue }
          byWriter[event.stamp.replica.identifier.low, default: []].append(text)
        }
        for (writer, texts) in byWriter {
          #expect(
            texts == (0..<(pushes * perPush)).map { "writer \(writer) change \($0)" })
        }
      }
      #expect(try await server.verify().faults.isEmpty)
    }
  }

  @Test(
    "What a push decides from earlier pushes' facts is the same on both backends: a change to a note deleted by an earlier push is stored erased, and its text's newest change stays the newest",
    arguments: Backend.allCases)
  func factsOfEarlierPushes(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      try await createAccounts(["ann"], in: server.store)
      let note = NoteID(Identifier(high: 0xFAC7, low: 1))
      func event(_ milliseconds: UInt64, _ change: Change) -> Event {
        Event(
          stamp: Stamp(
            time: HybridTime(milliseconds: 1_790_000_000_000 + milliseconds, counter: 0),
            replica: ReplicaID(Identifier(high: 0xFAC7, low: 2))),
          change: change)
      }
      // One push each: every later one reads what the earlier ones stored.
      let pushes = [
        event(1, .noteCreated(note, creationDate: Date(milliseconds: 1_790_000_000_000))),
        event(3, .textSet(note, text: "newer")),
        event(2, .textSet(note, text: "older, arriving later")),
        event(4, .noteDeleted(note)),
        event(5, .textSet(note, text: "after the deletion")),
      ]
      for push in pushes {
        _ = try await server.store.sync(account: 1, pushing: [push], after: 0, limit: 0)
      }
      let log = try await server.store.sync(account: 1, pushing: [], after: 0, limit: 100)
      #expect(log.events.count == pushes.count)
      // The deletion erased what came before it, and what came after arrives erased.
      #expect(log.events.filter { $0.redaction == .deleted }.count == 4)
      #expect(log.events.last?.stamp == pushes.last?.stamp)
      #expect(log.events.last?.redaction == .deleted)
      #expect(try await server.verify().faults.isEmpty)
    }
  }
}
