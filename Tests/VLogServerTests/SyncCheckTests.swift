import Foundation
import ServerTestSupport
import Testing
import VLog
import VLogServerTesting
import VLogSync
import VLogTesting

@testable import VLogServer

/// The proof of sync that names the difference: ``SyncAccount/checkSync()`` against what the
/// two sides hold, read independently of it.
@Suite("A check of sync names what differs")
struct SyncCheckTests {
  static let ann = Credentials(username: "ann", password: "correct horse battery")

  /// Every id a store holds.
  static func ids(of store: NoteStore) throws -> Set<Stamp> {
    Set(try store.events(after: 0).map(\.event.stamp))
  }

  /// Every id the server holds for the account: what a new device that syncs it gets.
  static func serverIDs(_ server: SyncServer, root: String, name: String) async throws
    -> Set<Stamp>
  {
    let reader = try openDevice(
      90, root: root + "/" + name, transport: InProcessTransport(server: server),
      credentials: ann, seed: 90, clock: ManualClock())
    defer { reader.store.close() }
    try await reader.account.signIn()
    try await reader.account.sync()
    return try ids(of: reader.store)
  }

  @Test(
    "Random differences on both sides — the outbox, imported events, events of another device not pulled yet — are named exactly, each with its note and side; the next sync repairs them and a check after it finds none",
    arguments: Backend.allCases, 1...6 as ClosedRange<UInt64>)
  func namesEveryDifference(backend: Backend, seed: UInt64) async throws {
    var configuration = SyncServer.Configuration.testing
    // Small answers, so that a check must ask again for the buckets after the first ones,
    // and (odd seeds) for the events after those a fetch's page held.
    configuration.maximumComparedIDs = Int(seed % 3) * 4 + 1
    if seed % 2 == 1 { configuration.maximumPageBytes = 256 }
    try await withServer(backend: backend, configuration: configuration) { server in
      try await withTemporaryDirectory { root in
        var generator = SeededGenerator(seed: seed)
        let devices = try openDevices(
          2, root: root, transport: { _ in InProcessTransport(server: server) },
          credentials: Self.ann,
          seed: seed)
        let (a, b) = (devices[0], devices[1])
        defer { for device in devices { device.store.close() } }
        try await a.account.createAccount()
        try await b.account.signIn()
        let shared = try makeRandomChanges(on: a.store, count: 20, shared: [], using: &generator)
        try await a.account.sync()
        try await b.account.sync()
        // B pushes changes A has not pulled; A makes changes it has not pushed, and takes in
        // another store's changes (an import) that never were in its outbox.
        _ = try makeRandomChanges(on: b.store, count: 8, shared: shared, using: &generator)
        try await b.account.sync()
        _ = try makeRandomChanges(on: a.store, count: 5, shared: shared, using: &generator)
        let other = try NoteStore.open(
          at: root + "/other",
          options: .init(
            durability: .noSync, dependencies: .testing(clock: ManualClock(), seed: seed + 77)))
        defer { other.close() }
        _ = try makeRandomChanges(on: other, count: 6, shared: [], using: &generator)
        let imported = try other.events(after: 0).map(\.event)
        try await a.store.ingest(imported)

        let check = try await a.account.checkSync()
        let ours = try Self.ids(of: a.store)
        let theirs = try await Self.serverIDs(server, root: root, name: "before")
        #expect(!check.inSync && check.isComplete && check.nextSyncRepairs)
        #expect(Set(check.differences.map(\.id)) == ours.symmetricDifference(theirs))
        let outbox = Set(try a.store.outbox().map(\.event.stamp))
        let importedIDs = Set(imported.map(\.stamp))
        for difference in check.differences {
          let event = try #require(
            try (difference.side == .missingOnServer ? a.store : b.store)
              .events(withIDs: [difference.id]).first)
          #expect(difference.note == event.change.noteID && difference.kind == event.change.kind)
          switch difference.side {
          case .missingOnServer:
            #expect(ours.contains(difference.id) && !theirs.contains(difference.id))
            #expect(
              difference.repair == (outbox.contains(difference.id) ? .pushFromOutbox : .push))
            #expect(outbox.contains(difference.id) || importedIDs.contains(difference.id))
          case .missingOnDevice:
            #expect(theirs.contains(difference.id) && difference.repair == .fetch)
          }
        }
        // Nothing changed by the check.
        #expect(try Self.ids(of: a.store) == ours)
        #expect(Set(try a.store.outbox().map(\.event.stamp)) == outbox)

        try await a.account.sync()
        let after = try await a.account.checkSync()
        #expect(after.inSync && after.differences.isEmpty)
      }
    }
  }

  @Test(
    "A change stamped too far ahead of the server's clock is named, and the check says the next sync does not repair it"
  )
  func stampedAhead() async throws {
    try await withServer { server in
      try await withTemporaryDirectory { root in
        let a = try openDevice(
          0, root: root, transport: InProcessTransport(server: server), credentials: Self.ann,
          seed: 3, clock: ManualClock())
        defer { a.store.close() }
        try await a.account.createAccount()
        let note = try await a.store.write { $0.createNote(text: "now") }
        try await a.account.sync()
        let ahead = Event(
          stamp: Stamp(
            time: HybridTime(
              milliseconds: UInt64(Date().timeIntervalSince1970 * 1000) + 86_400_000,
              counter: 0),
            replica: ReplicaID(Identifier(high: 5, low: 5))),
          change: .textSet(note, text: "tomorrow"))
        try await a.store.ingest([ahead])
        let check = try await a.account.checkSync()
        #expect(
          check.differences == [
            SyncDifference(
              id: ahead.stamp, side: .missingOnServer, kind: .textSet, note: note,
              repair: .pushLater)
          ])
        #expect(check.notes == [note] && !check.nextSyncRepairs)
      }
    }
  }
}

extension SyncCheckTests {
  @Test(
    "On an encrypted account, a deletion a lying server holds that no device made is named, with its note, as one the next sync will never take; the check applies nothing",
    arguments: Backend.allCases)
  func forgedEventNamed(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      try await LyingServerTests.withServer(backend, root: root) { server, baseURL in
        let a = try LyingServerTests.device(
          "a", root: root, transport: HTTPTransport(baseURL: baseURL))
        try await a.account.createAccount()
        try await a.account.signIn()
        let note = try await a.store.write { $0.createNote(text: "CanaryKept") }
        try await a.account.sync()
        #expect(try await a.account.checkSync().inSync)

        let number = try #require(try await server.store.account(named: "ann")).number
        let forged = Event(
          stamp: Stamp(
            time: HybridTime(
              milliseconds: UInt64(Date().timeIntervalSince1970 * 1000), counter: 9),
            replica: ReplicaID(Identifier(high: 0xBAD, low: 0xBAD))),
          change: .noteDeleted(note)
        ).withAuthenticator([UInt8](repeating: 7, count: 16))
        _ = try await server.store.sync(
          account: number, pushing: [forged], after: 0, limit: 1, maximumBytes: 1 << 20,
          retention: (nil, 0))

        let check = try await a.account.checkSync()
        #expect(!check.inSync && check.notes == [note] && !check.nextSyncRepairs)
        let difference = try #require(check.differences.first)
        #expect(check.differences.count == 1)
        #expect(difference.id == forged.stamp && difference.side == .missingOnDevice)
        #expect(difference.kind == .noteDeleted)
        guard case .never(let reason) = difference.repair else {
          Issue.record("\(difference.repair)")
          return
        }
        #expect(reason.contains("refuses"))
        #expect(try a.store.note(note)?.text == "CanaryKept")
      }
    }
  }
}
