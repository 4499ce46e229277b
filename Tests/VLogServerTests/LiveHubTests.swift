import Foundation
import LMDB
import ServerTestSupport
import Testing
import VLogTesting
import VLogWire

@testable import VLog
@testable import VLogServer

@Suite("Live hub")
struct LiveHubTests {
  /// A token hash of its own for each index.
  static func hash(_ index: Int) -> [UInt8] {
    BigEndian.bytes(UInt64(index)) + [UInt8](repeating: 0xA5, count: 24)
  }

  @Test(
    "Resynchronizing ends the channels whose session ended meanwhile and sends every other its account's head, past a batch's size",
    arguments: Backend.allCases)
  func resynchronize(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      let store = server.store
      try await createAccounts(["ann", "bob", "cid"], in: store)
      // Account 1's log holds 2 events, account 2's 1, account 3's none.
      for (account, events) in [(UInt64(1), [liveEvent(1), liveEvent(2)]), (2, [liveEvent(3)])] {
        _ = try await store.sync(
          account: account, pushing: events, after: 0, limit: 0, maximumBytes: .max,
          retention: (nil, 0))
      }
      let heads: [UInt64: UInt64] = [1: 2, 2: 1, 3: 0]
      let now: Int64 = 1_000_000
      let hub = LiveHub(
        limits: .init(total: 10_000, perAccount: 10_000, keepAlive: .seconds(600)),
        now: { now })
      // More sessions than one batch reads. Each channel is valid unless its session is gone
      // (never stored), has expired, or belongs to another account than the channel's.
      let count = LiveHub.resynchronizationBatch + 150
      var expected: [(LiveMailbox, LiveMessage)] = []
      for index in 0..<count {
        let account = UInt64(1 + index % 3)
        let stored = index % 5 != 1
        let expired = index % 7 == 2
        let elsewhere = index % 11 == 3
        if stored {
          try await store.storeToken(
            hash: Self.hash(index), account: elsewhere ? account % 3 + 1 : account,
            expiresAt: expired ? now - 1 : now + 60_000)
        }
        // A second channel of the same session, for some.
        for _ in 0..<(index % 13 == 4 ? 2 : 1) {
          let (_, mailbox) = try hub.open(
            account: account, token: Self.hash(index), expiresAt: .max)
          let valid = stored && !expired && !elsewhere
          expected.append((mailbox, valid ? .head(heads[account]!) : .closed(LiveHub.revoked)))
        }
      }
      try await hub.resynchronize(with: store)
      let wrong = expected.filter { mailbox, message in mailbox.take() != message }.count
      #expect(wrong == 0, "of \(expected.count) channels")
      #expect(expected.contains { $0.1 == .closed(LiveHub.revoked) })
      #expect(expected.contains { $0.1 == .head(0) })
    }
  }
}

@Suite("Live feed")
struct LiveFeedTests {
  /// The stack's depth here: the address of a local.
  @inline(never)
  static func stackAddress() -> UInt {
    var marker = 0
    return withUnsafeMutablePointer(to: &marker) { UInt(bitPattern: $0) }
  }

  @Test("A signal reaches the receiver at the same stack depth however many came before it")
  func receiverDepth() {
    let feed = LiveFeed()
    let depths = Locked<[UInt]>([])
    feed.receive { _ in
      let here = LiveFeedTests.stackAddress()
      depths.withLock { $0.append(here) }
    }
    for sequence in 0..<20_000 {
      feed.send(.head(account: 1, sequence: UInt64(sequence)))
    }
    let seen = depths.withLock { $0 }
    #expect(seen.count == 20_000)
    // Before, the lock wrapped the receiver in two more thunks at each signal: each went
    // through every earlier signal's thunks, ever deeper in the stack.
    #expect(
      Set(seen).count == 1,
      "\(Set(seen).count) depths, from \(seen.first ?? 0) to \(seen.last ?? 0)")
  }
}
