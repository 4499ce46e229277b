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
  /// A server on `backend`'s storage under `root`, behind one transport whatever its
  /// openings: backed up and restored as an operator does, closed meanwhile.
  final class Server: Sendable {
    let storage: Storage
    let transport = SwitchedTransport()

    init(backend: Backend, root: String) async throws {
      storage =
        backend == .lmdb
        ? Storage(backend: backend, location: root + "/server")
        : Storage(backend: backend, location: try await TestCluster.shared.newDatabase())
      let server = try await storage.open()
      transport.current.withLock { $0 = server }
    }

    func backUp() async throws { try await closed { try await self.storage.backUp() } }
    func restore() async throws { try await closed { try await self.storage.restore() } }
    func close() { transport.current.withLock { $0?.close() } }

    private func closed(_ change: () async throws -> Void) async throws {
      close()
      try await change()
      let server = try await storage.open()
      transport.current.withLock { $0 = server }
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
    try await passwordKeys(caller).signInSecret
  }

  /// The keys drawn from ann's password.
  static func passwordKeys(_ caller: APICaller) async throws -> PasswordKeys {
    let parameters = try await caller.signInParameters(username: "ann").get()
    return try await PasswordKeys.stretching(
      username: "ann", password: EncryptedSyncTests.password,
      derivation: parameters.keyDerivation)
  }

  /// The keys of `objects` as the server holds them, opened as a device that signs in with
  /// the password opens them.
  static func serverObjectKeys(_ objects: [Identifier], _ transport: any Transport)
    async throws -> [Identifier: ObjectKey]
  {
    let caller = APICaller(transport: transport)
    let password = try await passwordKeys(caller)
    let token = try await caller.signIn(
      Credentials(username: "ann", password: password.signInSecret)
    ).get().token
    let keys = try AccountKeys(
      opening: try await caller.accountKeys(token: token).get(), with: password, username: "ann")
    let wrapped = try await caller.lookUpObjectKeys(objects, token: token).get()
    var opened: [Identifier: ObjectKey] = [:]
    for (object, bytes) in try wrapped.validated(maximum: .max) {
      opened[object] = try keys.unwrap(bytes, of: object)
    }
    return opened
  }

  /// Keeps the key rotations a device sends.
  final class RotationRecorder: Transport, Sendable {
    let base: any Transport
    let rotations = Locked<[KeyRotation]>([])
    init(_ base: any Transport) { self.base = base }
    var server: String { base.server }
    func send(_ request: TransportRequest) async throws -> TransportResponse {
      if request.method == "PUT", request.path == "/v1/accounts/current/keys" {
        let rotation = try JSONDecoder().decode(KeyRotation.self, from: Data(request.body))
        rotations.withLock { $0.append(rotation) }
      }
      return try await base.send(request)
    }
  }

  @Test(
    "Restored from a backup taken before the keys rotated, the server's record is brought forward by a device that knows the password — never back — and every other device follows with none",
    arguments: Backend.allCases)
  func restoredBeforeRotation(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      let server = try await Server(backend: backend, root: root)
      defer { server.close() }
      let transport = server.transport
      let options = NoteStore.Options(durability: .noSync)
      let a = try NoteStore.open(at: root + "/a", options: options)
      let b = try NoteStore.open(at: root + "/b", options: options)
      defer {
        a.close()
        b.close()
      }
      // A knows the password all along; B kept its keys and token, and does not.
      let recorder = RotationRecorder(transport)
      let accountA = try SyncAccount(
        store: a, transport: recorder,
        credentials: Credentials(username: "ann", password: EncryptedSyncTests.password),
        stateFile: SyncAccount.stateFile(for: a), encryption: EncryptedSyncTests.encryption)
      try await accountA.createAccount()
      try await accountA.signIn()
      let erased = try await a.write { $0.createNote(text: "deleted after the backup") }
      let kept = try await a.write { $0.createNote(text: "made before the backup") }
      try await accountA.sync()
      let credentialsB = FileCredentialStore.file(for: b)
      let signingInB = try SyncAccount(
        store: b, transport: transport,
        credentials: Credentials(username: "ann", password: EncryptedSyncTests.password),
        credentialStore: credentialsB, stateFile: SyncAccount.stateFile(for: b),
        encryption: .testingAsTheServerSays)
      try await signingInB.signIn()
      try await signingInB.sync()
      // D kept its keys too, and last syncs between the two rotations to come.
      let d = try NoteStore.open(at: root + "/d", options: options)
      defer { d.close() }
      let credentialsD = FileCredentialStore.file(for: d)
      let signingInD = try SyncAccount(
        store: d, transport: transport,
        credentials: Credentials(username: "ann", password: EncryptedSyncTests.password),
        credentialStore: credentialsD, stateFile: SyncAccount.stateFile(for: d),
        encryption: .testingAsTheServerSays)
      try await signingInD.signIn()
      try await signingInD.sync()
      try await server.backUp()

      // After the backup: two deletions, so two rotations (epochs 2 and 3). D follows the
      // first, B both. Then a note whose key is wrapped by the newest content key.
      try await a.write { $0.deleteNote(erased) }
      try await accountA.sync()
      #expect(try await Self.serverEpoch(transport) == 2)
      let accountD = try SyncAccount(
        store: d, transport: transport, username: "ann", credentialStore: credentialsD,
        stateFile: SyncAccount.stateFile(for: d), encryption: .testingAsTheServerSays)
      try await accountD.sync()
      let second = try await a.write { $0.createNote(text: "deleted after the first rotation") }
      try await accountA.sync()
      try await a.write { $0.deleteNote(second) }
      try await accountA.sync()
      #expect(try await Self.serverEpoch(transport) == 3)
      let accountB = try SyncAccount(
        store: b, transport: transport, username: "ann", credentialStore: credentialsB,
        stateFile: SyncAccount.stateFile(for: b), encryption: .testingAsTheServerSays)
      try await accountB.sync()
      let late = try await a.write { $0.createNote(text: "made after the rotations") }
      try await accountA.sync()

      try await server.restore()
      #expect(try await Self.serverEpoch(transport) == 1)
      // The restored record still holds the deleted note's key, as the backup does.
      let original = try await Self.serverObjectKeys(
        [erased.identifier, kept.identifier], transport)
      #expect(original.count == 2)

      // B cannot open the restored record: it is told why, and what to do.
      let refusal = await #expect(throws: APIError.self) { try await accountB.sync() }
      #expect(refusal?.code == .signedOut)
      #expect(
        refusal?.message.contains("restored from a backup") == true,
        "\(String(describing: refusal))")
      #expect(try await Self.serverEpoch(transport) == 1)
      // A brings it forward to the keys it holds (epoch 3), pushes back what was lost — the
      // deletions too, which erase the deleted notes' keys again, so the keys rotate once more
      // (epoch 4) — and B follows by the link, with no password.
      #expect(try await accountA.sync().inSync)
      #expect(try await Self.serverEpoch(transport) == 4)
      #expect(await accountA.state.keysEpoch == 4)
      // Brought forward straight from epoch 1 to 3, not through keys of its own for epoch 2
      // (D holds the real ones): the kept note's key re-wrapped, the deleted note's replaced
      // by one that opens nothing, so that no key a device holds opens the deleted note in the
      // restored copy.
      let forward = try #require(recorder.rotations.withLock { $0.first { $0.nextEpoch == 3 } })
      #expect(forward.epoch == 1)
      let caller = APICaller(transport: transport)
      let keys2 = try AccountKeys(
        opening: try #require(Data(base64Encoded: forward.sealedForPassword)).map { $0 },
        with: try await Self.passwordKeys(caller), username: "ann")
      #expect(keys2.epoch == 3)
      let wrapped = try forward.validated().keys
      #expect(
        try keys2.unwrap(try #require(wrapped[kept.identifier]), of: kept.identifier)
          == original[kept.identifier])
      #expect(
        try keys2.unwrap(try #require(wrapped[erased.identifier]), of: erased.identifier)
          != original[erased.identifier])
      #expect(try await accountB.sync().inSync)
      #expect(try await accountA.sync().inSync)
      // D's keys of epoch 2 lead nowhere now: it opens the later keys with the password once.
      let stale = await #expect(throws: APIError.self) { try await accountD.sync() }
      #expect(stale?.code == .signedOut)
      try await accountD.signIn(password: EncryptedSyncTests.password)
      #expect(try await accountD.sync().inSync)
      let c = try NoteStore.open(at: root + "/c", options: options)
      defer { c.close() }
      let accountC = try SyncAccount(
        store: c, transport: transport,
        credentials: Credentials(username: "ann", password: EncryptedSyncTests.password),
        stateFile: SyncAccount.stateFile(for: c), encryption: .testingAsTheServerSays)
      try await accountC.signIn()
      #expect(try await accountC.sync().inSync)
      for store in [a, b, c, d] {
        #expect(try store.note(kept)?.text == "made before the backup")
        #expect(try store.note(late)?.text == "made after the rotations")
        #expect(try store.note(erased) == nil)
        #expect(try store.note(second) == nil)
        #expect(try store.verify().isEmpty)
      }
      #expect(try Digests(c).state == Digests(a).state)
      #expect(try Digests(b).state == Digests(a).state)
      #expect(try Digests(d).state == Digests(a).state)
    }
  }
}

extension RestoredServerTests {
  @Test(
    "Restored from a backup taken before a re-keying, the server names keys a lost device may hold: a device with the password refuses them, brings nothing forward and seals nothing with them",
    arguments: Backend.allCases)
  func restoredBeforeRekeying(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      let server = try await Server(backend: backend, root: root)
      defer { server.close() }
      let transport = server.transport
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
      try await server.backUp()
      try await account.rekey()
      try await account.sync()

      try await server.restore()
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

extension RestoredServerTests {
  @Test(
    "After a restore, a device that held a note's key from before opens the events another device sealed with the key it stored again, and seals its own edits with it",
    arguments: Backend.allCases)
  func keyStoredAgainElsewhere(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      let server = try await Server(backend: backend, root: root)
      defer { server.close() }
      let transport = server.transport
      let options = NoteStore.Options(durability: .noSync)
      let a = try NoteStore.open(at: root + "/a", options: options)
      let b = try NoteStore.open(at: root + "/b", options: options)
      defer {
        a.close()
        b.close()
      }
      func account(_ store: NoteStore, _ encryption: EncryptionOptions) throws -> SyncAccount {
        try SyncAccount(
          store: store, transport: transport,
          credentials: Credentials(username: "ann", password: EncryptedSyncTests.password),
          stateFile: SyncAccount.stateFile(for: store), encryption: encryption)
      }
      let accountA = try account(a, EncryptedSyncTests.encryption)
      try await accountA.createAccount()
      try await accountA.signIn()
      try await accountA.sync()
      try await account(b, .testingAsTheServerSays).signIn()
      try await server.backUp()
      // A made the note after the backup, and holds its key from then on.
      let note = try await a.write { $0.createNote(text: "made after the backup") }
      try await accountA.sync()
      try await account(b, .testingAsTheServerSays).sync()
      // More of A's that B never pulls: A's cursor ends past the log B pushes back.
      for index in 0..<3 { try await a.write { $0.createNote(text: "only on a, \(index)") } }
      try await accountA.sync()

      try await server.restore()
      // B, started anew, holds no key of the note: it pushes the note back under a new key,
      // then edits it.
      let accountB = try account(b, .testingAsTheServerSays)
      #expect(try await accountB.sync().inSync)
      try await b.write { $0.setText("edited on b after the restore", of: note) }
      try await accountB.sync()
      // A still holds the key it made, and edits with it: the server's is another now. A
      // opens B's events, and its edit, sealed again with the server's key, opens everywhere.
      try await a.write { $0.setText("edited on a after the restore", of: note) }
      let report = try await accountA.sync()
      #expect(report.cursorReset)
      #expect(report.quarantined == 0, "\(report)")
      let c = try NoteStore.open(at: root + "/c", options: options)
      defer { c.close() }
      let accountC = try account(c, .testingAsTheServerSays)
      try await accountC.signIn()
      #expect(try await accountC.sync().quarantined == 0)
      #expect(try await accountB.sync().quarantined == 0)
      for store in [a, b, c] {
        #expect(try store.note(note)?.text == "edited on a after the restore")
        #expect(try Digests(store).state == Digests(a).state)
      }
    }
  }
}
