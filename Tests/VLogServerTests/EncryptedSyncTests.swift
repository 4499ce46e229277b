import Foundation
import ServerTestSupport
import Testing
import VLog
import VLogSync
import VLogTesting

@testable import VLogServer

@Suite("End-to-end encrypted accounts through SyncAccount")
struct EncryptedSyncTests {
  static let encryption = EndToEndEncryption(cost: .testing, random: systemRandomBytes)
  static let password = "correct horse battery"

  /// A store of its own, and an encrypted account object for it.
  static func device(
    _ name: String, root: String, baseURL: String, password: String? = Self.password,
    credentialStore: (any CredentialStore)? = nil
  ) throws -> (store: NoteStore, account: SyncAccount) {
    let store = try NoteStore.open(
      at: root + "/" + name, options: NoteStore.Options(durability: .noSync))
    let transport = HTTPTransport(baseURL: baseURL)
    let account: SyncAccount
    if let password {
      account = try SyncAccount(
        store: store, transport: transport,
        credentials: Credentials(username: "ann", password: password),
        credentialStore: credentialStore, stateFile: SyncAccount.stateFile(for: store),
        encryption: encryption)
    } else {
      account = try SyncAccount(
        store: store, transport: transport, username: "ann",
        credentialStore: try #require(credentialStore),
        stateFile: SyncAccount.stateFile(for: store), encryption: encryption)
    }
    return (store, account)
  }

  @Test(
    "Two devices of an encrypted account sync texts, tags, edits and a deletion through a live server that stores none of them in clear; the deletion rotates the content key, which the other device follows; a device restarted from its credential store syncs without the password",
    arguments: Backend.allCases)
  func twoDevices(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      let server = try await openServer(backend: backend, directory: root + "/server")
      defer { server.close() }
      try await withLiveServer(server) { baseURL in
        let keptA = FileCredentialStore(path: root + "/credentials-a.json")
        let a = try Self.device("a", root: root, baseURL: baseURL, credentialStore: keptA)
        try await a.account.createAccount()
        #expect(await a.account.recoveryKey != nil && a.account.isEncrypted)
        try await a.account.signIn()
        let (alpha, beta) = try await a.store.write { changes in
          (
            changes.createNote(text: "CanaryNoteAlpha by the lake", tags: ["CanaryTagRed"]),
            changes.createNote(text: "CanaryNoteBeta at dawn", tags: ["CanaryTagBlue", "work"])
          )
        }
        let first = try await a.account.sync()
        #expect(first.pushed > 0 && first.inSync, "\(first)")

        // A second device signs in with the password and reads everything in clear.
        let b = try Self.device("b", root: root, baseURL: baseURL)
        try await b.account.signIn()
        let pulled = try await b.account.sync()
        #expect(pulled.inSync, "\(pulled)")
        #expect(try b.store.note(alpha)?.text == "CanaryNoteAlpha by the lake")
        #expect(try b.store.note(beta)?.tags.map(\.name) == ["CanaryTagBlue", "work"])
        #expect(
          Set(try b.store.tags().map(\.tag.name)) == ["CanaryTagRed", "CanaryTagBlue", "work"])

        // An edit on the second device reaches the first.
        try await b.store.write { $0.setText("CanaryEdit from the second device", of: alpha) }
        try await b.account.sync()
        try await a.account.sync()
        #expect(try a.store.note(alpha)?.text == "CanaryEdit from the second device")

        // A deletion: the first device's sync rotates the content key; the second follows.
        try await a.store.write { $0.deleteNote(beta) }
        try await a.account.sync()
        let keys = try #require(await server.store.encryption(of: Self.number(of: server)))
        #expect(keys.epoch == 2 && !keys.rotationDue)
        let followed = try await b.account.sync()
        #expect(followed.inSync)
        #expect(try b.store.note(beta) == nil)

        // The first device restarts: its keys come from its credential store, not the
        // password, and it syncs a new note the second device reads.
        let restarted = try SyncAccount(
          store: a.store, transport: HTTPTransport(baseURL: baseURL), username: "ann",
          credentialStore: keptA, stateFile: SyncAccount.stateFile(for: a.store),
          encryption: Self.encryption)
        let gamma = try await a.store.write {
          $0.createNote(text: "CanaryNoteGamma after the restart")
        }
        #expect(try await restarted.sync().inSync)
        try await b.account.sync()
        #expect(try b.store.note(gamma)?.text == "CanaryNoteGamma after the restart")
        #expect(try keptA.accountKeys(for: "ann")?.count == 72)

        // Signing out forgets the keys: a device without the password cannot sync.
        try await restarted.signOut()
        #expect(try keptA.accountKeys(for: "ann") == nil)
        let forgotten = try SyncAccount(
          store: a.store, transport: HTTPTransport(baseURL: baseURL), username: "ann",
          credentialStore: keptA, encryption: Self.encryption)
        await #expect(throws: APIError.self) { try await forgotten.sync() }
      }
      // Nothing the server stores says any canary, the password, or a tag's name.
      let stored = try await storedBytes(of: server)
      for canary in [
        "CanaryNote", "CanaryEdit", "CanaryTag", "canarytag", "lake", "dawn", Self.password,
      ] {
        #expect(stored.firstRange(of: Data(canary.utf8)) == nil, "\(backend): \(canary)")
      }
      #expect(try await server.verify().faults.isEmpty)
    }
  }

  static func number(of server: SyncServer) async throws -> UInt64 {
    try #require(try await server.store.account(named: "ann")).number
  }
}
