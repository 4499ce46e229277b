import Foundation
import LMDB
import ServerTestSupport
import Testing
import VLog
import VLogServerTesting
import VLogSync
import VLogTesting
import VLogWire

@testable import VLogServer

/// A transport to whichever server is open now: the devices keep their accounts while the
/// server is closed, restored and opened again.
final class SwitchedTransport: Transport, Sendable {
  let current = Locked<SyncServer?>(nil)
  var server: String { "http://vlog.example" }

  func send(_ request: TransportRequest) async throws -> TransportResponse {
    guard let server = current.withLock({ $0 }) else {
      throw APIError(.transport, "the server is down")
    }
    return try await InProcessTransport(server: server).send(request)
  }
}

/// Ordinary life at random points of a run, in the style of the simulation: a server
/// restored from a backup taken earlier in the run, and a store copied to another device while
/// both go on writing.
@Suite("Restores and copies at random points of a run")
struct LifeEventHarnessTests {
  static let credentials = Credentials(username: "life", password: "correct horse battery")

  /// Every device holds the same events and shows the same state, verify is clean on each,
  /// and a new device gets the same.
  static func expectConverged(
    _ devices: [Device], root: String, transport: any Transport, seed: UInt64,
    using generator: inout SeededGenerator
  ) async throws {
    try await syncUntilQuiet(devices, using: &generator)
    let late = try openDevice(
      99, root: root, transport: transport, credentials: credentials, seed: seed,
      clock: ManualClock())
    defer { late.store.close() }
    try await late.account.signIn()
    _ = try await late.account.sync()
    let expected = try Digests(devices[0].store)
    for device in devices + [late] {
      let digests = try Digests(device.store)
      #expect(digests.events == expected.events, "seed \(seed)")
      #expect(digests.state == expected.state, "seed \(seed)")
      #expect(try device.store.verify().isEmpty, "seed \(seed)")
    }
  }

  /// One step of a run: a random device edits or syncs, then every clock moves a second.
  static func randomStep(
    _ devices: [Device], shared: inout [NoteID], using generator: inout SeededGenerator
  ) async throws {
    let device = devices[Int(generator.next() % UInt64(devices.count))]
    if generator.next() % 2 == 0 {
      shared += try makeRandomChanges(
        on: device.store, count: 1 + Int(generator.next() % 3), shared: shared,
        using: &generator)
    } else {
      _ = try await device.account.sync()
    }
    for device in devices { device.clock.advance(by: 1) }
  }

  @Test(
    "The server restored from a backup taken at a random point, later in the run: every device syncs on with no action, and every change is on every device (seeds 3 and 4: an encrypted account, whose keys rotate after deletions)",
    arguments: Backend.allCases, 0..<UInt64(5))
  func restoredAtRandom(backend: Backend, seed: UInt64) async throws {
    let encrypted = seed >= 3
    try await withTemporaryDirectory { root in
      let storage =
        backend == .lmdb
        ? RestoredServerTests.Storage(backend: backend, location: root + "/server")
        : RestoredServerTests.Storage(
          backend: backend, location: try await TestCluster.shared.newDatabase())
      let transport = SwitchedTransport()
      var server = try await storage.open()
      transport.current.withLock { $0 = server }
      defer { transport.current.withLock { $0?.close() } }
      var generator = SeededGenerator(seed: seed)
      let devices = try (0..<3).map {
        try openDevice(
          $0, root: root, transport: transport, credentials: Self.credentials, seed: seed,
          clock: ManualClock(),
          encryption: encrypted && $0 == 0 ? EncryptedSyncTests.encryption : .testingAsTheServerSays
        )
      }
      defer { for device in devices { device.store.close() } }
      if encrypted {
        try await devices[0].account.createAccount()
      } else {
        _ = try await APICaller(transport: transport).createAccount(Self.credentials).get()
      }
      let backup = 4 + Int(generator.next() % 12)
      let restore = backup + 4 + Int(generator.next() % 12)
      var shared: [NoteID] = []
      for step in 0..<(restore + 10) {
        if step == backup || step == restore {
          server.close()
          if step == backup { try await storage.backUp() } else { try await storage.restore() }
          server = try await storage.open()
          transport.current.withLock { $0 = server }
        }
        // After the restore too: a sync never fails for it.
        try await Self.randomStep(devices, shared: &shared, using: &generator)
      }
      try await Self.expectConverged(
        devices, root: root, transport: transport, seed: seed, using: &generator)
    }
  }

  @Test(
    "A store copied at a random point of a run (a clone its file cannot tell, or a copy it can) writes on beside the original, on the same clock, in the same milliseconds: every change is on every device",
    arguments: Backend.allCases, 0..<UInt64(4))
  func copiedAtRandom(backend: Backend, seed: UInt64) async throws {
    try await withServer(backend: backend) { server in
      try await withTemporaryDirectory { root in
        let transport = InProcessTransport(server: server)
        _ = try await APICaller(transport: transport).createAccount(Self.credentials).get()
        var generator = SeededGenerator(seed: seed)
        var devices = try (0..<3).map {
          try openDevice(
            $0, root: root, transport: transport, credentials: Self.credentials, seed: seed,
            clock: ManualClock())
        }
        defer { for device in devices { device.store.close() } }
        let copy = 4 + Int(generator.next() % 12)
        var shared: [NoteID] = []
        for step in 0..<(copy + 20) {
          if step == copy {
            // Device 0 copied to a fourth, on device 0's own clock: both stamp alike.
            let original = devices[0]
            original.store.close()
            if seed % 2 == 0 {
              try CopiedStoreTests.clone(root + "/device-0", to: root + "/device-3")
            } else {
              try FileManager.default.copyItem(
                atPath: root + "/device-0", toPath: root + "/device-3")
            }
            devices[0] = try openDevice(
              0, root: root, transport: transport, credentials: Self.credentials, seed: seed,
              clock: original.clock)
            devices.append(
              try openDevice(
                3, root: root, transport: transport, credentials: Self.credentials,
                seed: seed, clock: original.clock))
            #expect((devices[3].store.replicaID == devices[0].store.replicaID) == (seed % 2 == 0))
          }
          if step >= copy, generator.next() % 3 == 0 {
            // The original and its copy write at once, in the same millisecond.
            for index in [0, 3] {
              shared += try makeRandomChanges(
                on: devices[index].store, count: 1, shared: shared, using: &generator)
            }
            for device in devices { device.clock.advance(by: 1) }
          } else {
            try await Self.randomStep(devices, shared: &shared, using: &generator)
          }
        }
        try await Self.expectConverged(
          devices, root: root, transport: transport, seed: seed, using: &generator)
      }
    }
  }
}
