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
      let password = try PasswordHash(
        hashing: "pw", cost: .testing, salt: [UInt8](repeating: 1, count: 16))
      let accounts: [UInt64] = Array(1...4)
      for account in accounts {
        try await server.store.createAccount(named: "user\(account)", password: password)
      }
      // On LMDB, account 1 has 8 writers and the others 2 each; on PostgreSQL, whose test
      // servers have a pool of 8 connections, 4 and 1: no push waits for a connection, which
      // under a whole suite's load on the shared cluster could outlast the database deadline. Every writer also sends, between
      // its pushes, one that must fail (a cursor past the end of the log), which takes
      // nothing with it.
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
}
