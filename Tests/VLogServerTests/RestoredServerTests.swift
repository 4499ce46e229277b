import Foundation
import ServerTestSupport
import Testing
import VLog
import VLogSync
import VLogTesting
import VLogWire

@testable import VLogServer

/// Ordinary life for an operator: the server's storage restored from last night's backup,
/// older than what the devices synced since.
@Suite("A server restored from its backup")
struct RestoredServerTests {
  /// A server's storage that can be backed up and restored: LMDB's directory copied while no
  /// server has it open, a PostgreSQL database copied as a template.
  struct Storage {
    let backend: Backend
    let location: String

    func open() async throws -> SyncServer {
      switch backend {
      case .lmdb:
        return try SyncServer.open(
          dataDirectory: location, configuration: .testing, logger: quietLogger)
      case .postgres:
        return try await SyncServer.open(
          database: location, maximumConnections: 4, configuration: .testing,
          logger: quietLogger)
      }
    }

    private var database: String {
      String(URLComponents(string: location)?.path.dropFirst() ?? "")
    }

    func backUp() async throws {
      switch backend {
      case .lmdb:
        try FileManager.default.copyItem(atPath: location, toPath: location + ".backup")
      case .postgres:
        try await TestCluster.shared.execute(
          "CREATE DATABASE \(database)_backup TEMPLATE \(database)")
      }
    }

    func restore() async throws {
      switch backend {
      case .lmdb:
        try FileManager.default.removeItem(atPath: location)
        try FileManager.default.copyItem(atPath: location + ".backup", toPath: location)
      case .postgres:
        try await TestCluster.shared.execute("DROP DATABASE \(database) WITH (FORCE)")
        try await TestCluster.shared.execute(
          "CREATE DATABASE \(database) TEMPLATE \(database)_backup")
      }
    }
  }

  /// The server's one name to its devices, whatever port each opening of it listens on.
  struct Named: Transport {
    let inner: HTTPTransport
    var server: String { "http://vlog.example" }
    func send(_ request: TransportRequest) async throws -> TransportResponse {
      try await inner.send(request)
    }
  }

  /// The account of `store`, through the server at `baseURL`.
  static func account(_ store: NoteStore, _ baseURL: String, encrypted: Bool) throws
    -> SyncAccount
  {
    try SyncAccount(
      store: store, transport: Named(inner: HTTPTransport(baseURL: baseURL)),
      credentials: Credentials(username: "ann", password: EncryptedSyncTests.password),
      stateFile: SyncAccount.stateFile(for: store),
      encryption: encrypted ? EncryptedSyncTests.encryption : nil)
  }

  @Test(
    "Restored from a backup older than the devices' last syncs, the server gets back from the devices what it lost, every device syncs on with no action, and a new device gets every note",
    arguments: Backend.allCases, [false, true])
  func restored(backend: Backend, encrypted: Bool) async throws {
    try await withTemporaryDirectory { root in
      let storage =
        backend == .lmdb
        ? Storage(backend: backend, location: root + "/server")
        : Storage(backend: backend, location: try await TestCluster.shared.newDatabase())
      let options = NoteStore.Options(durability: .noSync)
      let a = try NoteStore.open(at: root + "/a", options: options)
      let b = try NoteStore.open(at: root + "/b", options: options)
      defer {
        a.close()
        b.close()
      }
      // Before the backup: one note on both devices.
      var server = try await storage.open()
      let first = try await withLiveServer(server) { baseURL in
        let accountA = try Self.account(a, baseURL, encrypted: encrypted)
        try await accountA.createAccount()
        try await accountA.signIn()
        let note = try await a.write { $0.createNote(text: "before the backup") }
        try await accountA.sync()
        let accountB = try Self.account(b, baseURL, encrypted: encrypted)
        try await accountB.signIn()
        try await accountB.sync()
        return note
      }
      server.close()
      try await storage.backUp()
      // After it: edits on both, synced, then lost with the server's disk.
      server = try await storage.open()
      let (second, third) = try await withLiveServer(server) { baseURL in
        let accountA = try Self.account(a, baseURL, encrypted: encrypted)
        let second = try await a.write { $0.createNote(text: "after, from a") }
        try await a.write { $0.setText("edited after the backup", of: first) }
        try await accountA.sync()
        let accountB = try Self.account(b, baseURL, encrypted: encrypted)
        try await accountB.sync()
        let third = try await b.write { $0.createNote(text: "after, from b") }
        try await accountB.sync()
        try await accountA.sync()
        return (second, third)
      }
      server.close()
      try await storage.restore()
      server = try await storage.open()
      defer { server.close() }
      try await withLiveServer(server) { baseURL in
        // Before anything is pushed, the check names what the server lost, for a sync to
        // push back.
        let check = try await Self.account(a, baseURL, encrypted: encrypted).checkSync()
        #expect(!check.inSync)
        let lost = Set(
          check.differences.filter { $0.side == .missingOnServer && $0.repair == .push }
            .compactMap(\.note))
        #expect(lost == [first, second, third], "\(check.differences)")
        for store in [a, b, a] {
          let report = try await Self.account(store, baseURL, encrypted: encrypted).sync()
          #expect(report.inSync, "\(report)")
        }
        let c = try NoteStore.open(at: root + "/c", options: options)
        defer { c.close() }
        let accountC = try Self.account(c, baseURL, encrypted: encrypted)
        try await accountC.signIn()
        #expect(try await accountC.sync().inSync)
        for store in [a, b, c] {
          #expect(try store.note(first)?.text == "edited after the backup")
          #expect(try store.note(second)?.text == "after, from a")
          #expect(try store.note(third)?.text == "after, from b")
        }
        #expect(try Digests(c).state == Digests(a).state)
        #expect(try Digests(b).state == Digests(a).state)
      }
    }
  }
}
