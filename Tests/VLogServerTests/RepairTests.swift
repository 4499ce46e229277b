import Foundation
import ServerTestSupport
import Testing
import VLogServerTesting
import VLogSync
import VLogTesting

@testable import VLog
@testable import VLogServer

/// Anti-entropy: a sync that ends with the event sets different compares them bucket by bucket
/// and exchanges exactly the events one side lacks.
@Suite("Anti-entropy repair")
struct RepairTests {
  static let ann = Credentials(username: "ann", password: "correct horse battery")

  /// `count` events of notes made on a store of their own, as `vlog export` would give them.
  static func foreignEvents(
    count: Int, root: String, clock: ManualClock = ManualClock(), seed: UInt64 = 77
  ) throws -> [Event] {
    let store = try NoteStore.open(
      at: root + "/foreign-\(seed)",
      options: .init(durability: .noSync, dependencies: .testing(clock: clock, seed: seed)))
    defer { store.close() }
    for index in 0..<count {
      try store.write { $0.createNote(text: "imported \(index)", tags: ["import"]) }
    }
    return try store.events().map(\.event)
  }

  @Test(
    "Imported events the server lacks are pushed, and another device receives them",
    arguments: Backend.allCases)
  func importedEventsArePushed(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      try await withTemporaryDirectory { root in
        let devices = try openDevices(
          2, root: root, transport: { _ in InProcessTransport(server: server) },
          credentials: Self.ann, seed: 5)
        defer { for device in devices { device.store.close() } }
        try await devices[0].account.createAccount()
        try await devices[0].store.write { $0.createNote(text: "local") }
        let imported = try Self.foreignEvents(count: 20, root: root)
        try await devices[0].store.ingest(imported)
        // Before, these were never in the outbox: the sync pushed only the local note and
        // ended with different digests, for ever.
        let report = try await devices[0].account.sync()
        #expect(report.pushed == 2)
        #expect(report.repaired == imported.count)
        #expect(report.inSync)
        let again = try await devices[0].account.sync()
        #expect(again.repaired == 0 && again.inSync && again.calls == 1)
        let received = try await devices[1].account.sync()
        #expect(received.inSync && received.applied == imported.count + 2)
        #expect(try Digests(devices[1].store).state == Digests(devices[0].store).state)
      }
    }
  }

  @Test(
    "Events behind the cursor that the store lacks are fetched by id", arguments: Backend.allCases)
  func missingEventsAreFetched(backend: Backend) async throws {
    var configuration = SyncServer.Configuration.testing
    // Small pages of bytes, so that fetching takes several calls.
    configuration.maximumPageBytes = 200
    try await withServer(backend: backend, configuration: configuration) { server in
      try await withTemporaryDirectory { root in
        let devices = try openDevices(
          2, root: root, transport: { _ in InProcessTransport(server: server) },
          credentials: Self.ann, seed: 6)
        defer { for device in devices { device.store.close() } }
        try await devices[0].account.createAccount()
        for index in 0..<15 { try await devices[0].store.write { $0.createNote(text: "\(index)") } }
        try await devices[0].account.sync()
        // The second device restored from a backup: its state says it has read the whole log,
        // its store has none of it.
        let serverState = await devices[0].account.state
        var state = SyncState(username: "ann")
        state.cursor = serverState.cursor
        try JSONEncoder().encode(state).write(
          to: URL(fileURLWithPath: SyncAccount.stateFile(for: devices[1].store)))
        let restored = try SyncAccount(
          store: devices[1].store, transport: InProcessTransport(server: server),
          credentials: Self.ann, stateFile: SyncAccount.stateFile(for: devices[1].store),
          now: { devices[1].clock.now }, encryption: .testingAsTheServerSays)
        let report = try await restored.sync()
        let held = try devices[0].store.lastSequence()
        #expect(UInt64(report.fetched) == held && report.repaired == 0, "\(report)")
        #expect(report.inSync)
        #expect(try Digests(devices[1].store) == Digests(devices[0].store))
      }
    }
  }

  @Test(
    "Differences beyond the server's id limit are repaired over several comparisons",
    arguments: Backend.allCases)
  func manyDifferences(backend: Backend) async throws {
    var configuration = SyncServer.Configuration.testing
    configuration.maximumComparedIDs = 4
    try await withServer(backend: backend, configuration: configuration) { server in
      try await withTemporaryDirectory { root in
        let devices = try openDevices(
          2, root: root, transport: { _ in InProcessTransport(server: server) },
          credentials: Self.ann, seed: 7)
        defer { for device in devices { device.store.close() } }
        try await devices[0].account.createAccount()
        // Ten notes on the server, three of whose events the first device has already.
        for index in 0..<10 { try await devices[1].store.write { $0.createNote(text: "\(index)") } }
        try await devices[1].account.sync()
        let imported = try Self.foreignEvents(count: 30, root: root)
        try await devices[0].store.ingest(imported)
        try await devices[0].store.ingest(
          Array(try devices[1].store.events().map(\.event).prefix(3)))
        let report = try await devices[0].account.sync()
        #expect(report.repaired == imported.count)
        #expect(report.inSync)
        let other = try await devices[1].account.sync()
        #expect(other.inSync)
        #expect(try Digests(devices[1].store) == Digests(devices[0].store))
      }
    }
  }

  @Test(
    "An imported event stamped beyond the server's skew bound waits; the rest is repaired",
    arguments: Backend.allCases)
  func futureImportIsDeferred(backend: Backend) async throws {
    let serverClock = ManualClock()
    try await withServer(backend: backend, clock: serverClock) { server in
      try await withTemporaryDirectory { root in
        let device = try openDevice(
          0, root: root, transport: InProcessTransport(server: server), credentials: Self.ann,
          seed: 8, clock: ManualClock())
        defer { device.store.close() }
        try await device.account.createAccount()
        let ahead = ManualClock()
        ahead.advance(by: 3600)
        let future = try Self.foreignEvents(count: 1, root: root, clock: ahead, seed: 78)
        let present = try Self.foreignEvents(count: 3, root: root)
        try await device.store.ingest(future + present)
        let report = try await device.account.sync()
        #expect(report.repaired == present.count)
        #expect(report.deferred == future.count)
        #expect(!report.inSync)
        // Once the server's clock reaches it, it goes too.
        device.clock.advance(by: 3600)
        serverClock.advance(by: 3600)
        let later = try await device.account.sync()
        #expect(later.repaired == future.count && later.inSync)
      }
    }
  }

  @Test("The bucket digests add up to the event-set digest, and ids land in their buckets")
  func bucketsAddUp() throws {
    try withTemporaryDirectory { root in
      let events = try Self.foreignEvents(count: 50, root: root)
      let store = try NoteStore.open(at: root + "/store", options: .init(durability: .noSync))
      defer { store.close() }
      try store.ingest(events)
      let buckets = try store.eventSetBuckets()
      #expect(buckets.total == (try store.eventSetDigest()))
      let some = buckets.digests.indices.filter { buckets.digests[$0] != .empty }.prefix(3)
      let ids = try store.eventIDs(inBuckets: some)
      #expect(!ids.isEmpty)
      #expect(ids.allSatisfy { some.contains(EventSetBuckets.bucket(of: $0)) })
      var rebuilt = EventSetBuckets()
      for event in events { rebuilt.add(event.stamp) }
      #expect(rebuilt == buckets)
      #expect(events.allSatisfy { Stamp(hex: $0.stamp.hex) == $0.stamp })
      #expect(Stamp(hex: "zz") == nil)
    }
  }
}
