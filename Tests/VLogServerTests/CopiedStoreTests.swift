import Foundation
import LMDB
import ServerTestSupport
import Testing
import VLogSync
import VLogTesting
import VLogWire

@testable import VLog
@testable import VLogServer

/// Ordinary life for a user: a store copied to a second device — a phone restored from its
/// backup, a home folder copied to a new laptop, a cloned virtual machine — and both copies
/// writing, with the clock that stamps them giving both the same times.
@Suite("A store copied to a second device")
struct CopiedStoreTests {
  /// Copies the store at `source` to `destination` as a cloned disk does: the copy's file
  /// keeps the identity the store recorded, so the store cannot tell it is a copy.
  static func clone(_ source: String, to destination: String) throws {
    try FileManager.default.copyItem(atPath: source, toPath: destination)
    let identity = try #require(NoteStore.fileIdentity(of: destination))
    let environment = try Environment.open(at: destination, configuration: .init())
    defer { environment.close() }
    let meta = try environment.openDatabase(named: "meta", flags: [])
    try environment.write { transaction in
      try transaction.put(identity, forKey: Keys.Meta.file, in: meta)
    }
  }

  /// The texts of the notes a store shows.
  static func texts(_ store: NoteStore) throws -> Set<String> {
    Set(try store.timeline(limit: 100).compactMap { try store.note($0.id)?.text })
  }

  @Test(
    "Copies that write in the same millisecond under one replica id lose nothing: a copy its file tells takes a new replica id when opened, a clone the server tells (it refuses the ids it holds with other changes) moves its changes to a new one, and every device ends with every note",
    arguments: Backend.allCases, [false, true])
  func copied(backend: Backend, encrypted: Bool) async throws {
    try await withTemporaryDirectory { root in
      let server = try await openServer(backend: backend, directory: root + "/server")
      defer { server.close() }
      // One instant for every store's clock: the copies stamp alike.
      let instant = Date()
      let options = NoteStore.Options(
        durability: .noSync,
        dependencies: NoteStore.Dependencies(
          now: { instant }, makeIdentifier: NoteStore.Dependencies.live.makeIdentifier))
      let original = try NoteStore.open(at: root + "/a", options: options)
      try await withLiveServer(server) { baseURL in
        let account = try RestoredServerTests.account(original, baseURL, encrypted: encrypted)
        try await account.createAccount()
        try await account.signIn()
        try await original.write { $0.createNote(text: "before the copy") }
        try await account.sync()
      }
      original.close()
      try Self.clone(root + "/a", to: root + "/b")
      try FileManager.default.copyItem(atPath: root + "/a", toPath: root + "/c")
      let a = try NoteStore.open(at: root + "/a", options: options)
      let b = try NoteStore.open(at: root + "/b", options: options)
      let c = try NoteStore.open(at: root + "/c", options: options)
      defer {
        for store in [a, b, c] { store.close() }
      }
      #expect(b.replicaID == a.replicaID, "a clone cannot tell")
      #expect(c.replicaID != a.replicaID, "a copy its file tells takes a new replica id")
      // The same instant, the same clock state, the same replica: a and b make the same ids.
      let fromA = try await a.write { $0.createNote(text: "from a") }
      let fromB = try await b.write { $0.createNote(text: "from b") }
      try await c.write { $0.createNote(text: "from c") }
      #expect(try a.events(after: 0).last?.event.stamp == b.events(after: 0).last?.event.stamp)
      #expect(fromA != fromB)
      try await withLiveServer(server) { baseURL in
        func account(_ store: NoteStore) throws -> SyncAccount {
          try RestoredServerTests.account(store, baseURL, encrypted: encrypted)
        }
        #expect(try await account(a).sync().movedToNewReplica == 0)
        let report = try await account(b).sync()
        #expect(report.movedToNewReplica == 2, "\(report)")
        #expect(b.replicaID != a.replicaID)
        #expect(try await account(c).sync().movedToNewReplica == 0)
        for store in [a, b, c] { _ = try await account(store).sync() }
        let d = try NoteStore.open(at: root + "/d", options: options)
        defer { d.close() }
        let accountD = try account(d)
        try await accountD.signIn()
        #expect(try await accountD.sync().inSync)
        let all: Set = ["before the copy", "from a", "from b", "from c"]
        for store in [a, b, c, d] {
          #expect(try Self.texts(store) == all)
          #expect(try Digests(store).state == Digests(a).state)
          #expect(try store.verify().isEmpty)
        }
      }
    }
  }
}
