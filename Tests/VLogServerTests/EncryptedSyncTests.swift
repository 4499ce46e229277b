import Foundation
import Logging
import ServerTestSupport
import Testing
import VLog
import VLogSync
import VLogTesting

@testable import VLogServer

@Suite("End-to-end encrypted accounts through SyncAccount")
struct EncryptedSyncTests {
  static let encryption = EncryptionOptions(cost: .testing, random: systemRandomBytes)
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
    "Two devices of an encrypted account sync texts, tags, attachments, edits and a deletion through a live server whose files, database dump, logs and metrics hold none of them in clear; the deletion rotates the content key, which the other device follows; a device restarted from its credential store syncs without the password",
    arguments: Backend.allCases)
  func twoDevices(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      // Every line the server logs, at every level.
      let logs = RecordingLogHandler()
      var logger = Logger(label: "encrypted") { _ in logs.handler }
      logger.logLevel = .trace
      var database: String?
      let server: SyncServer
      switch backend {
      case .lmdb:
        server = try SyncServer.open(
          dataDirectory: root + "/server", configuration: .testing, logger: logger)
      case .postgres:
        let url = try await TestCluster.shared.newDatabase()
        database = url
        server = try await SyncServer.open(
          database: url, configuration: .testing, logger: logger)
      }
      defer { server.close() }
      let metrics = try await withLiveServer(server) { baseURL in
        let keptA = FileCredentialStore(path: root + "/credentials-a.json")
        let a = try Self.device("a", root: root, baseURL: baseURL, credentialStore: keptA)
        try await a.account.createAccount()
        #expect(await a.account.recoveryKey != nil)
        #expect(await a.account.isEncrypted)
        try await a.account.signIn()
        let photo = Array(String(repeating: "CanaryAttachmentBytes ", count: 500).utf8)
        let (alpha, beta, picture, doomed) = try await a.store.write { changes in
          let alpha = changes.createNote(
            text: "CanaryNoteAlpha by the lake", tags: ["CanaryTagRed"])
          let beta = changes.createNote(
            text: "CanaryNoteBeta at dawn", tags: ["CanaryTagBlue", "work"])
          return (
            alpha, beta,
            changes.addAttachment(
              photo, mimeType: "image/canary-png", width: 640, height: 480, to: alpha),
            changes.addAttachment(Array("CanaryDoomedBytes".utf8), mimeType: "text/plain", to: beta)
          )
        }
        let first = try await a.account.sync()
        #expect(first.pushed > 0 && first.inSync && first.blobsUploaded == 2, "\(first)")
        // A second sync uploads nothing again: the sealed bytes have one hash.
        try await a.store.write { $0.setArchived(true, of: alpha) }
        #expect(try await a.account.sync().blobsUploaded == 0)
        let account = try await Self.number(of: server)
        let attachmentKeys = try await server.store.objectKeys(
          of: [picture.identifier, doomed.identifier], account: account)
        #expect(attachmentKeys.keys.count == 2)

        // A second device signs in with the password and reads everything in clear.
        let b = try Self.device("b", root: root, baseURL: baseURL)
        try await b.account.signIn()
        let pulled = try await b.account.sync()
        #expect(pulled.inSync, "\(pulled)")
        #expect(try b.store.note(alpha)?.text == "CanaryNoteAlpha by the lake")
        #expect(try b.store.note(beta)?.tags.map(\.name) == ["CanaryTagBlue", "work"])
        #expect(
          Set(try b.store.tags().map(\.tag.name)) == ["CanaryTagRed", "CanaryTagBlue", "work"])
        // The attachment's metadata arrives with the sync, its bytes when asked for.
        let received = try #require(try b.store.attachment(picture))
        #expect(received.mimeType == "image/canary-png" && received.width == 640)
        #expect(received.byteCount == photo.count)
        #expect(try !b.store.hasBlob(received.blobHash))
        #expect(try await b.account.attachmentData(picture) == photo)
        #expect(try b.store.attachmentData(picture) == photo)

        // An edit on the second device reaches the first.
        try await b.store.write { $0.setText("CanaryEdit from the second device", of: alpha) }
        try await b.account.sync()
        try await a.account.sync()
        #expect(try a.store.note(alpha)?.text == "CanaryEdit from the second device")

        // A deletion: the first device's sync rotates the content key; the second follows.
        try await a.store.write { $0.deleteNote(beta) }
        try await a.account.sync()
        let keys = try #require(await server.store.encryption(of: account))
        #expect(keys.epoch == 2 && !keys.rotationDue)
        // The deleted note's attachment's key went with it; the other attachment's stays.
        let keptKeys = try await server.store.objectKeys(
          of: [picture.identifier, doomed.identifier], account: account)
        #expect(Set(keptKeys.keys.keys) == [picture.identifier])
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
        #expect(try keptA.accountKeys(for: "ann")?.count == 113)

        // Signing out forgets the keys: a device without the password cannot sync.
        try await restarted.signOut()
        #expect(try keptA.accountKeys(for: "ann") == nil)
        let forgotten = try SyncAccount(
          store: a.store, transport: HTTPTransport(baseURL: baseURL), username: "ann",
          credentialStore: keptA, encryption: Self.encryption)
        await #expect(throws: APIError.self) { try await forgotten.sync() }
        let answer = try await HTTPTransport(baseURL: baseURL).send(
          TransportRequest(method: "GET", path: "/metrics"))
        return String(decoding: answer.body, as: UTF8.self)
      }
      // Nothing the server stores, logs or counts says any canary, the password, or a tag's
      // name: in its files (every column of its database), its database's dump (where bytes
      // are hexadecimal), its log lines at every level, its metrics.
      let stored = try await storedBytes(of: server)
      var dump = ""
      if let database { dump = try await Self.dump(database) }
      let logged = logs.recorded.joined(separator: "\n")
      #expect(logged.contains("account created") && metrics.contains("vlog_events_stored_total"))
      for canary in [
        "CanaryNote", "CanaryEdit", "CanaryTag", "canarytag", "lake", "dawn", Self.password,
        "CanaryAttachment", "CanaryDoomed", "canary-png",
      ] {
        #expect(stored.firstRange(of: Data(canary.utf8)) == nil, "\(backend): \(canary)")
        let hex = canary.utf8.map { String(format: "%02x", $0) }.joined()
        #expect(!dump.contains(canary) && !dump.contains(hex), "\(backend) dump: \(canary)")
        #expect(!logged.contains(canary) && !metrics.contains(canary), "\(backend): \(canary)")
      }
      if backend == .postgres { #expect(dump.contains("COPY public.vlog_events")) }
      #expect(try await server.verify().faults.isEmpty)
    }
  }

  @Test(
    "A password change seals the keys to the new password, and the old one opens nothing; the recovery key opens them on a device that lost the password and sets a new one, signing every session out; a wrong recovery key, a mistyped one, a change without the seal or with one for a clear account, are refused",
    arguments: Backend.allCases)
  func passwordAndRecovery(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      let server = try await openServer(backend: backend, directory: root + "/server")
      defer { server.close() }
      let recoveryText = try await withLiveServer(server) { baseURL in
        // A guessable password is refused on the device: nothing reaches the server, so the
        // name stays free.
        let weak = try Self.device("weak", root: root, baseURL: baseURL, password: "ann1990ann1990")
        let refusedCreation = await #expect(throws: APIError.self) {
          try await weak.account.createAccount()
        }
        #expect(refusedCreation?.code == .weakPassword)
        let a = try Self.device("a", root: root, baseURL: baseURL)
        try await a.account.createAccount()
        let recoveryKey = try #require(await a.account.recoveryKey)
        try await a.account.signIn()
        let note = try await a.store.write { $0.createNote(text: "CanaryRecovered text") }
        try await a.account.sync()

        // A password change: the old password neither signs in nor opens the keys.
        let second = "a second password"
        let refusedChange = await #expect(throws: APIError.self) {
          try await a.account.changePassword(from: Self.password, to: "qwertyuiop123")
        }
        #expect(refusedChange?.code == .weakPassword)
        try await a.account.changePassword(from: Self.password, to: second, rekeying: false)
        let old = try Self.device("old", root: root, baseURL: baseURL)
        await #expect(throws: APIError.self) { try await old.account.signIn() }
        let caller = APICaller(transport: HTTPTransport(baseURL: baseURL))
        let oldKeys = try await caller.passwordKeys(username: "ann", password: Self.password)
        let token = await a.account.currentToken ?? ""
        let body = try await caller.accountKeys(token: token).get()
        #expect(throws: AccountKeyError.self) {
          try AccountKeys(opening: body, with: oldKeys, username: "ann")
        }
        let b = try Self.device("b", root: root, baseURL: baseURL, password: second)
        try await b.account.signIn()
        try await b.account.sync()
        #expect(try b.store.note(note)?.text == "CanaryRecovered text")
        // The account keeps writing to the server with the new password after the change.
        try await a.store.write { $0.setArchived(true, of: note) }
        try await a.account.sync()

        // Recovery on a device that lost the password.
        let c = try Self.device("c", root: root, baseURL: baseURL, password: "not the password")
        let stranger = try RecoveryKey(random: systemRandomBytes)
        let refused = await #expect(throws: APIError.self) {
          try await c.account.recover(
            recoveryKey: stranger.description, newPassword: "a stranger's new password")
        }
        #expect(refused?.status == 401)
        var typo = Array(recoveryKey.description)
        typo[3] = typo[3] == "A" ? "B" : "A"
        await #expect(throws: AccountKeyError.self) {
          try await c.account.recover(recoveryKey: String(typo), newPassword: "a third password")
        }
        // A guessable new password is refused on the device, before the recovery key is sent.
        let weakRecovery = await #expect(throws: APIError.self) {
          try await c.account.recover(
            recoveryKey: recoveryKey.description, newPassword: "password1234")
        }
        #expect(weakRecovery?.code == .weakPassword)
        try await c.account.recover(
          recoveryKey: recoveryKey.description.lowercased(), newPassword: "a third password")
        try await c.account.sync()
        #expect(try c.store.note(note)?.isArchived == true)
        // Every other session was signed out, and the second password signs in no more.
        await #expect(throws: APIError.self) { try await b.account.sync() }

        // What the server refuses: a change of an encrypted account's password without its
        // keys sealed to the new one, and a seal for an account that is not encrypted.
        let cToken = try #require(await c.account.currentToken)
        let thirdKeys = try await caller.passwordKeys(
          username: "ann", password: "a third password")
        let unsealed = await caller.changePassword(
          PasswordChange(
            currentPassword: thirdKeys.signInSecret, newPassword: "a fourth password"),
          token: cToken)
        #expect(unsealed.status == 400 && unsealed.error?.body?.field == "keys", "\(unsealed)")
        let clear = try await signUp(caller, "bob")
        let seal = PasswordSeal(
          epoch: 1, passwordPublicKey: thirdKeys.publicKey,
          sealedForPassword: [UInt8](repeating: 0, count: 120),
          passwordAnchor: [UInt8](repeating: 0, count: 32),
          keysAuthenticator: [UInt8](repeating: 0, count: 32), keyDerivation: nil)
        let sealedClear = await caller.changePassword(
          PasswordChange(
            currentPassword: "correct horse battery", newPassword: "another password", keys: seal),
          token: clear)
        #expect(sealedClear.status == 400 && sealedClear.error?.body?.field == "keys")
        // A seal at another epoch changes nothing.
        let stale = await caller.changePassword(
          PasswordChange(
            currentPassword: thirdKeys.signInSecret, newPassword: "a fourth password",
            keys: PasswordSeal(
              epoch: 7, passwordPublicKey: thirdKeys.publicKey,
              sealedForPassword: [UInt8](repeating: 0, count: 120),
              passwordAnchor: [UInt8](repeating: 0, count: 32),
              keysAuthenticator: [UInt8](repeating: 0, count: 32), keyDerivation: nil)),
          token: cToken)
        #expect(stale.status == 409 && stale.error?.body?.code == .keysChanged, "\(stale)")
        try await c.account.sync()
        return recoveryKey.description
      }
      let stored = try await storedBytes(of: server)
      for secret in [
        "CanaryRecovered", Self.password, "a second password", "a third password", recoveryText,
        recoveryText.replacingOccurrences(of: "-", with: ""),
      ] {
        #expect(stored.firstRange(of: Data(secret.utf8)) == nil, "\(backend): \(secret)")
      }
    }
  }

  /// The database at `url` as `pg_dump` writes it.
  static func dump(_ url: String) async throws -> String {
    let versions = try FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")
    let binary = try #require(
      versions.sorted().reversed().map { "/usr/lib/postgresql/\($0)/bin/pg_dump" }
        .first { FileManager.default.isExecutableFile(atPath: $0) })
    let result = try await ChildProcess.runOffPool(binary, ["--dbname=\(url)"])
    #expect(result.status == 0, "\(result.errors)")
    return result.output
  }

  static func number(of server: SyncServer) async throws -> UInt64 {
    try #require(try await server.store.account(named: "ann")).number
  }
}
