import Foundation
import ServerTestSupport
import Synchronization
import Testing
import VLogTesting

@testable import VLog
@testable import VLogServer

@Suite("Several servers on one database")
struct ScaleOutTests {
  static let replica = ReplicaID(Identifier(high: 0x5CA1E, low: 0))

  /// A text change made by writer `writer`, its `index`th: every id is distinct.
  static func event(writer: Int, index: Int) -> Event {
    Event(
      stamp: Stamp(
        time: HybridTime(milliseconds: 1_790_000_000_000 + UInt64(index), counter: 0),
        replica: ReplicaID(Identifier(high: 0x5CA1E, low: UInt64(writer)))),
      change: .textSet(
        NoteID(Identifier(high: UInt64(writer + 1), low: UInt64(index % 7))),
        text: "writer \(writer) change \(index)"))
  }

  @Test(
    "Three servers on one database, pushing to one account at once: every reader's cursor sees every event once, in the log's order"
  )
  func cursorsNeverSkip() async throws {
    let url = try await TestCluster.shared.newDatabase()
    var opened: [SyncServer] = []
    for _ in 0..<3 {
      opened.append(
        try await SyncServer.open(
          database: url, maximumConnections: 4, configuration: .testing, logger: quietLogger))
    }
    let servers = opened
    defer { for server in servers { server.close() } }
    try await createAccounts(["ann"], in: servers[0].store)

    let writers = 6
    let pushesPerWriter = 25
    let writing = Countdown(writers)
    let readings = try await withThrowingTaskGroup(of: [Stamp]?.self) { group in
      for writer in 0..<writers {
        group.addTask {
          defer { writing.done() }
          for push in 0..<pushesPerWriter {
            let events = (0..<4).map { Self.event(writer: writer, index: push * 4 + $0) }
            // Each push goes to one of the servers, as a load balancer would send it.
            let server = servers[(writer + push) % servers.count]
            let outcome = try await server.store.sync(
              account: 1, pushing: events, after: 0, limit: 1)
            #expect(outcome.stored == 4)
          }
          return nil
        }
      }
      for reader in 0..<3 {
        group.addTask {
          // Follows the log with small pages while the writers push, like a device syncing.
          var seen: [Stamp] = []
          var cursor: UInt64 = 0
          while true {
            let done = writing.isFinished
            let page = try await servers[reader].store.sync(
              account: 1, pushing: [], after: cursor, limit: 5)
            seen += page.events.map(\.stamp)
            cursor = page.cursor
            if done && !page.more { break }
          }
          return seen
        }
      }
      var readings: [[Stamp]] = []
      for try await result in group { if let result { readings.append(result) } }
      return readings
    }
    let log = try await servers[2].store.sync(account: 1, pushing: [], after: 0, limit: 100_000)
    let all = log.events.map(\.stamp)
    #expect(all.count == writers * pushesPerWriter * 4)
    #expect(Set(all).count == all.count)
    #expect(log.head.sequence == UInt64(all.count))
    var digest = EventSetDigest.empty
    for id in all { digest.add(id) }
    #expect(digest == log.head.digest)
    #expect(readings.count == 3)
    for seen in readings {
      #expect(seen == all, "a reader's cursor skipped or repeated an event")
    }
    #expect(try await servers[1].verify().faults.isEmpty)
  }
}

/// How many writers are still writing.
final class Countdown: Sendable {
  private let remaining: Atomic<Int>
  init(_ count: Int) { remaining = Atomic(count) }
  func done() { remaining.subtract(1, ordering: .sequentiallyConsistent) }
  var isFinished: Bool { remaining.load(ordering: .sequentiallyConsistent) == 0 }
}
