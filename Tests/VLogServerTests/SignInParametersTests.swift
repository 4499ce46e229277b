import Foundation
import ServerTestSupport
import Testing
import VLog
import VLogServerTesting
import VLogSync
import VLogTesting
import VLogWire

@testable import VLogServer

@Suite("Sign-in parameters and the key derivation")
struct SignInParametersTests {
  static let encryption = EncryptionOptions(cost: .testing, random: systemRandomBytes)

  @Test(
    "Before signing in, a device learns whether an account is encrypted and its salt; a name with no account gets an answer of the same kind, the same every time and on every instance; two accounts with one password get different salts and keys",
    arguments: Backend.allCases)
  func parameters(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      let database = backend == .postgres ? try await TestCluster.shared.newDatabase() : nil
      func open() async throws -> SyncServer {
        if let database {
          return try await SyncServer.open(database: database, configuration: .testing)
        }
        return try SyncServer.open(dataDirectory: root + "/server", configuration: .testing)
      }
      var server = try await open()
      let caller = APICaller(transport: InProcessTransport(server: server))
      let ann = try await caller.createEncryptedAccount(
        username: "ann", password: EncryptedSyncTests.password, options: Self.encryption)
      let bea = try await caller.createEncryptedAccount(
        username: "bea", password: EncryptedSyncTests.password, options: Self.encryption)
      _ = try await caller.createAccount(
        Credentials(username: "cid", password: "correct horse battery")
      ).get()

      let annParameters = try await caller.signInParameters(username: "ann").get()
      #expect(annParameters.encrypted)
      #expect(annParameters.keyDerivation == ann.serverKeys.keyDerivation)
      #expect(annParameters.keyDerivation.version == 2)
      #expect(annParameters.keyDerivation.saltBytes.count == 16)
      let beaParameters = try await caller.signInParameters(username: "BEA").get()
      #expect(beaParameters.keyDerivation.salt != annParameters.keyDerivation.salt)
      #expect(ann.serverKeys.passwordPublicKey != bea.serverKeys.passwordPublicKey)

      // A clear account and names with no account: the shape of an encrypted account's
      // answer, at the cost devices use, the same on every call.
      let clear = try await caller.signInParameters(username: "cid").get()
      #expect(!clear.encrypted)
      var unknown: [String: SignInParameters] = [:]
      for index in 0..<40 {
        let name = "nobody\(index)"
        let answer = try await caller.signInParameters(username: name).get()
        #expect(try await caller.signInParameters(username: name).get() == answer)
        #expect(answer.keyDerivation.version == 2 && answer.keyDerivation.saltBytes.count == 16)
        #expect(answer.keyDerivation.logRounds == KeyDerivation.standardLogRounds)
        unknown[name] = answer
      }
      #expect(Set(unknown.values.map(\.encrypted)) == [true, false])
      #expect(Set(unknown.values.map(\.keyDerivation.salt)).count == 40)
      for answer in [clear] + unknown.values {
        let object = try JSONSerialization.jsonObject(with: Data(try JSONEncoder().encode(answer)))
        #expect((object as? [String: Any])?.keys.sorted() == ["encrypted", "keyDerivation"])
      }
      // A malformed name is refused for its shape, as at sign-in.
      #expect(await caller.signInParameters(username: "no spaces").status == 400)

      // The same answers after a restart, or from another instance on the same database.
      server.close()
      server = try await open()
      defer { server.close() }
      let again = APICaller(transport: InProcessTransport(server: server))
      for (name, answer) in unknown {
        #expect(try await again.signInParameters(username: name).get() == answer)
      }
      #expect(try await again.signInParameters(username: "cid").get() == clear)
    }
  }

  @Test(
    "A new device that knows only the name and the password signs in to an encrypted account and reads its notes, with no word of encryption from the app",
    arguments: Backend.allCases)
  func newDeviceFindsEncryption(backend: Backend) async throws {
    try await withServer(backend: backend, clock: ManualClock(start: Date())) { server in
      try await withTemporaryDirectory { root in
        let transport = InProcessTransport(server: server)
        func device(_ name: String, _ encryption: EncryptionOptions) throws -> (
          NoteStore, SyncAccount
        ) {
          let store = try NoteStore.open(
            at: root + "/" + name, options: NoteStore.Options(durability: .noSync))
          return (
            store,
            try SyncAccount(
              store: store, transport: transport,
              credentials: Credentials(username: "ann", password: EncryptedSyncTests.password),
              stateFile: SyncAccount.stateFile(for: store), encryption: encryption)
          )
        }
        let (firstStore, first) = try device("a", Self.encryption)
        defer { firstStore.close() }
        try await first.createAccount()
        let note = try await firstStore.write { $0.createNote(text: "CanaryFound") }
        try await first.sync()

        let (store, account) = try device(
          "new", EncryptionOptions(cost: .testing, isRequired: false))
        defer { store.close() }
        #expect(await !account.isEncrypted)
        try await account.signIn()
        #expect(await account.isEncrypted)
        #expect(try await account.sync().inSync)
        #expect(try store.note(note)?.text == "CanaryFound")
        let state = try #require(try SyncAccount.loadState(from: SyncAccount.stateFile(for: store)))
        #expect(state.encrypted == true && state.keyDerivationVersion == 2)
      }
    }
  }
}
