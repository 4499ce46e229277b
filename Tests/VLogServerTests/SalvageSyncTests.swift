import Foundation
import LMDB
import ServerTestSupport
import Testing
import VLogServerTesting
import VLogSync
import VLogTesting

@testable import VLog
@testable import VLogServer

/// A device whose store the disk damaged: salvaged into a new store, which syncs.
@Suite("Salvage through the server")
struct SalvageSyncTests {
  static let ann = Credentials(username: "ann", password: "correct horse battery")

  @Test(
    "A damaged store salvaged and synced: its unsynced notes reach the server, the events it lost come back, and it converges with the other device",
    arguments: Backend.allCases)
  func salvageAndSync(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      try await withTemporaryDirectory { root in
        let transport = InProcessTransport(server: server)
        let devices = try openDevices(
          2, root: root, transport: { _ in transport }, credentials: Self.ann, seed: 9)
        defer { devices[1].store.close() }
        try await devices[0].account.createAccount()
        for batch in 0..<12 {
          try await devices[0].store.write { changes in
            for index in 0..<50 {
              changes.createNote(
                text: "synced \(batch * 50 + index) " + String(repeating: "·", count: 60))
            }
          }
        }
        #expect(try await devices[0].account.sync().inSync)
        // Made offline, never pushed: only the damaged store has them.
        for index in 0..<20 {
          try await devices[0].store.write { $0.createNote(text: "offline \(index)") }
        }
        let damagedPath = devices[0].store.path
        let unsynced = try devices[0].store.outboxCount()
        #expect(unsynced == 40)
        devices[0].store.close()

        // A leaf page of the log, then the root of its tree, zeroed.
        var file = try [UInt8](Data(contentsOf: URL(fileURLWithPath: damagedPath + "/data.mdb")))
        let structure = file.withUnsafeBytes { PageStructure(file: $0) }
        let logRoot = try #require(structure.trees["log"]?.root)
        let pointer = logRoot * 4096 + 16 + 2
        let node = logRoot * 4096 + (Int(file[pointer]) | Int(file[pointer + 1]) << 8)
        let leaf = Int(file[node]) | Int(file[node + 1]) << 8 | Int(file[node + 2]) << 16
        for page in [leaf, logRoot] {
          for offset in page * 4096..<(page + 1) * 4096 { file[offset] = 0 }
        }
        try Data(file).write(to: URL(fileURLWithPath: damagedPath + "/data.mdb"))
        try? FileManager.default.removeItem(atPath: damagedPath + "/lock.mdb")
        #expect(try !NoteStore.structureFaults(at: damagedPath).isEmpty)

        let report = try NoteStore.salvage(from: damagedPath, to: root + "/salvaged")
        #expect(report.lostEvents > 0, "\(report)")
        let state = try #require(
          try SyncState.load(from: SyncAccount.stateFile(forStoreAt: damagedPath)))
        try state.restarted().write(to: SyncAccount.stateFile(forStoreAt: root + "/salvaged"))
        let clock = ManualClock()
        let store = try NoteStore.open(
          at: root + "/salvaged",
          options: .init(durability: .noSync, dependencies: .testing(clock: clock, seed: 99)))
        defer { store.close() }
        let account = try SyncAccount(
          store: store, transport: transport, credentials: Self.ann,
          stateFile: SyncAccount.stateFile(for: store), now: { clock.now },
          encryption: .testingAsTheServerSays)
        let synced = try await account.sync()
        #expect(synced.inSync, "\(synced)")
        #expect(try store.outboxCount() == 0)
        #expect(try store.timeline(limit: 1000).count == 620)

        let received = try await devices[1].account.sync()
        #expect(received.inSync)
        #expect(try devices[1].store.timeline(limit: 1000).count == 620)
        #expect(try Digests(devices[1].store).state == Digests(store).state)
        #expect(try Digests(devices[1].store).events == Digests(store).events)
      }
    }
  }
}
