import Foundation
import LMDB
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
        // An edit made before the first sync, of a note whose key the server lost: sealed by
        // a key stored again, not by one nobody keeps.
        try await a.write { $0.setText("edited after the restore", of: second) }
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
          #expect(try store.note(second)?.text == "edited after the restore")
          #expect(try store.note(third)?.text == "after, from b")
        }
        #expect(try Digests(c).state == Digests(a).state)
        #expect(try Digests(b).state == Digests(a).state)
      }
    }
  }
}

extension RestoredServerTests {
  /// The server's record of the account's keys, as a device signed in as ann is told it.
  static func serverEpoch(_ transport: any Transport) async throws -> UInt64 {
    let caller = APICaller(transport: transport)
    let token = try await caller.signIn(
      Credentials(username: "ann", password: try await serverPassword(caller))
    ).get().token
    return try await caller.accountKeys(token: token).get().epoch
  }

  /// The password as the server takes it: an encrypted account's sign-in secret.
  static func serverPassword(_ caller: APICaller) async throws -> String {
    let parameters = try await caller.signInParameters(username: "ann").get()
    let keys = try await PasswordKeys.stretching(
      username: "ann", password: EncryptedSyncTests.password,
      derivation: parameters.keyDerivation)
    return keys.signInSecret
  }

  @Test(
    "Restored from a backup taken before the keys rotated, the server's record is brought forward by a device that knows the password — never back — and every other device follows with none",
    arguments: Backend.allCases)
  func restoredBeforeRotation(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      let storage =
        backend == .lmdb
        ? Storage(backend: backend, location: root + "/server")
        : Storage(backend: backend, location: try await TestCluster.shared.newDatabase())
      let transport = SwitchedTransport()
      var server = try await storage.open()
      transport.current.withLock { $0 = server }
      defer { transport.current.withLock { $0?.close() } }
      let options = NoteStore.Options(durability: .noSync)
      let a = try NoteStore.open(at: root + "/a", options: options)
      let b = try NoteStore.open(at: root + "/b", options: options)
      defer {
        a.close()
        b.close()
      }
      // A knows the password all along; B kept its keys and token, and does not.
      let accountA = try SyncAccount(
        store: a, transport: transport,
        credentials: Credentials(username: "ann", password: EncryptedSyncTests.password),
        stateFile: SyncAccount.stateFile(for: a), encryption: EncryptedSyncTests.encryption)
      try await accountA.createAccount()
      try await accountA.signIn()
      let erased = try await a.write { $0.createNote(text: "deleted after the backup") }
      try await accountA.sync()
      let credentialsB = FileCredentialStore.file(for: b)
      let signingInB = try SyncAccount(
        store: b, transport: transport,
        credentials: Credentials(username: "ann", password: EncryptedSyncTests.password),
        credentialStore: credentialsB, stateFile: SyncAccount.stateFile(for: b),
        encryption: .testingAsTheServerSays)
      try await signingInB.signIn()
      try await signingInB.sync()
      server.close()
      try await storage.backUp()
      server = try await storage.open()
      transport.current.withLock { $0 = server }

      // After the backup: a deletion, so a rotation, which B follows; then a note whose
      // key is wrapped by the new content key.
      let kept = try await a.write { $0.createNote(text: "made before the rotation") }
      try await a.write { $0.deleteNote(erased) }
      try await accountA.sync()
      #expect(try await Self.serverEpoch(transport) == 2)
      let accountB = try SyncAccount(
        store: b, transport: transport, username: "ann", credentialStore: credentialsB,
        stateFile: SyncAccount.stateFile(for: b), encryption: .testingAsTheServerSays)
      try await accountB.sync()
      let late = try await a.write { $0.createNote(text: "made after the rotation") }
      try await accountA.sync()

      server.close()
      try await storage.restore()
      server = try await storage.open()
      transport.current.withLock { $0 = server }
      #expect(try await Self.serverEpoch(transport) == 1)

      // B cannot open the restored record: it is told why, and what to do.
      let refusal = await #expect(throws: APIError.self) { try await accountB.sync() }
      #expect(refusal?.code == .signedOut)
      #expect(
        refusal?.message.contains("restored from a backup") == true,
        "\(String(describing: refusal))")
      #expect(try await Self.serverEpoch(transport) == 1)
      // A brings it forward to the keys it holds (epoch 2), pushes back what was lost — the
      // deletion too, which erases the deleted note's key again, so the keys rotate once more
      // (epoch 3) — and B follows.
      #expect(try await accountA.sync().inSync)
      #expect(try await Self.serverEpoch(transport) == 3)
      #expect(await accountA.state.keysEpoch == 3)
      #expect(try await accountB.sync().inSync)
      #expect(try await accountA.sync().inSync)
      let c = try NoteStore.open(at: root + "/c", options: options)
      defer { c.close() }
      let accountC = try SyncAccount(
        store: c, transport: transport,
        credentials: Credentials(username: "ann", password: EncryptedSyncTests.password),
        stateFile: SyncAccount.stateFile(for: c), encryption: .testingAsTheServerSays)
      try await accountC.signIn()
      #expect(try await accountC.sync().inSync)
      for store in [a, b, c] {
        #expect(try store.note(kept)?.text == "made before the rotation")
        #expect(try store.note(late)?.text == "made after the rotation")
        #expect(try store.note(erased) == nil)
        #expect(try store.verify().isEmpty)
      }
      #expect(try Digests(c).state == Digests(a).state)
      #expect(try Digests(b).state == Digests(a).state)
    }
  }
}

extension RestoredServerTests {
  @Test(
    "Restored from a backup taken before a re-keying, the server names keys a lost device may hold: a device with the password refuses them, brings nothing forward and seals nothing with them",
    arguments: Backend.allCases)
  func restoredBeforeRekeying(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      let storage =
        backend == .lmdb
        ? Storage(backend: backend, location: root + "/server")
        : Storage(backend: backend, location: try await TestCluster.shared.newDatabase())
      let transport = SwitchedTransport()
      var server = try await storage.open()
      transport.current.withLock { $0 = server }
      defer { transport.current.withLock { $0?.close() } }
      let options = NoteStore.Options(durability: .noSync)
      let a = try NoteStore.open(at: root + "/a", options: options)
      defer { a.close() }
      let account = try SyncAccount(
        store: a, transport: transport,
        credentials: Credentials(username: "ann", password: EncryptedSyncTests.password),
        stateFile: SyncAccount.stateFile(for: a), encryption: EncryptedSyncTests.encryption)
      try await account.createAccount()
      try await account.signIn()
      try await a.write { $0.createNote(text: "before the backup") }
      try await account.sync()
      server.close()
      try await storage.backUp()
      server = try await storage.open()
      transport.current.withLock { $0 = server }
      try await account.rekey()
      try await account.sync()

      server.close()
      try await storage.restore()
      server = try await storage.open()
      transport.current.withLock { $0 = server }
      let secret = try await a.write { $0.createNote(text: "after the re-keying") }
      let refusal = await #expect(throws: AccountKeyError.self) { try await account.sync() }
      #expect(refusal?.description.contains("re-keying") == true, "\(String(describing: refusal))")
      #expect(await account.state.keysEpoch == 2)
      #expect(try await Self.serverEpoch(transport) == 1)
      // Nothing was pushed: a device opening the restored record gets no trace of the note.
      let c = try NoteStore.open(at: root + "/c", options: options)
      defer { c.close() }
      let accountC = try SyncAccount(
        store: c, transport: transport,
        credentials: Credentials(username: "ann", password: EncryptedSyncTests.password),
        stateFile: SyncAccount.stateFile(for: c), encryption: .testingAsTheServerSays)
      try await accountC.signIn()
      try await accountC.sync()
      #expect(try c.events(withIDs: try a.outbox(limit: 100).map(\.event.stamp)).isEmpty)
      #expect(try c.note(secret) == nil)
    }
  }
}
