import Foundation
import ServerTestSupport
import Testing
import VLog
import VLogSync
import VLogTesting
import VLogWire

@testable import VLogServer

/// Ordinary life for a device: a clock set hours wrong — a wrong time zone, a dead battery, a
/// clock set by hand.
@Suite("A device whose clock is wrong")
struct WrongClockTests {
  /// A store whose clock is `hours` off the real time.
  static func store(at path: String, hours: Double) throws -> NoteStore {
    try NoteStore.open(
      at: path,
      options: NoteStore.Options(
        durability: .noSync,
        dependencies: NoteStore.Dependencies(
          now: { Date().addingTimeInterval(hours * 3600) },
          makeIdentifier: NoteStore.Dependencies.live.makeIdentifier)))
  }

  @Test(
    "A device 2 h fast pushes and pulls, its changes stamped again and then made by the server's clock, as sync --check predicted; a device 3 h slow that edits a note after seeing an edit made since wins with it, on every device",
    arguments: Backend.allCases, [false, true])
  func wrongClocks(backend: Backend, encrypted: Bool) async throws {
    try await withTemporaryDirectory { root in
      let server = try await openServer(backend: backend, directory: root + "/server")
      defer { server.close() }
      let right = try Self.store(at: root + "/right", hours: 0)
      let fast = try Self.store(at: root + "/fast", hours: 2)
      let slow = try Self.store(at: root + "/slow", hours: -3)
      defer {
        for store in [right, fast, slow] { store.close() }
      }
      try await withLiveServer(server) { baseURL in
        func account(_ store: NoteStore) throws -> SyncAccount {
          try RestoredServerTests.account(store, baseURL, encrypted: encrypted)
        }
        try await account(right).createAccount()
        try await account(right).signIn()
        let shared = try await right.write { $0.createNote(text: "shared") }
        try await account(right).sync()
        // Fast: a change made before it ever reached the server is stamped 2 h ahead.
        let early = try await fast.write { $0.createNote(text: "made 2 h ahead") }
        try await account(fast).signIn()
        let check = try await account(fast).checkSync()
        #expect(
          check.differences.filter { $0.note == early }.map(\.repair).allSatisfy {
            $0 == .restampAndPush
          } && check.nextSyncRepairs, "\(check.differences)")
        let first = try await account(fast).sync()
        #expect(first.inSync && first.restamped == 2, "\(first)")
        #expect(try fast.note(shared)?.text == "shared")
        // Now it stamps by the server's clock: the next change goes as it is.
        let later = try await fast.write { $0.createNote(text: "made after") }
        let second = try await account(fast).sync()
        #expect(second.inSync && second.restamped == 0 && second.pushed == 2, "\(second)")
        // Slow: it sees the edit made on the right clock, then edits the same note.
        try await account(slow).signIn()
        try await account(slow).sync()
        try await right.write { $0.setText("edited on the right clock", of: shared) }
        try await account(right).sync()
        try await account(slow).sync()
        try await slow.write { $0.setText("edited after, on the slow clock", of: shared) }
        try await account(slow).sync()
        for store in [right, fast, right, slow] { try await account(store).sync() }
        for store in [right, fast, slow] {
          #expect(try store.note(shared)?.text == "edited after, on the slow clock")
          #expect(try store.note(shared)?.conflicts.isEmpty == true)
          #expect(try store.note(early)?.text == "made 2 h ahead")
          #expect(try store.note(later)?.text == "made after")
        }
        #expect(try Digests(fast).state == Digests(right).state)
        #expect(try Digests(slow).state == Digests(right).state)
      }
    }
  }
}
