import Foundation
import ServerTestSupport
import Testing
import VLog
import VLogServerTesting
import VLogSync
import VLogTesting
import VLogWire

@testable import VLogServer

/// No device sends a password, for a clear account either: it sends a secret stretched from
/// it under the account's salt. A clear account an earlier version made, whose server hashed
/// the password itself, signs in by that hash reproduced on the device (key derivation
/// version 3) and is then moved to the hash of the secret.
@Suite("Sign-in secrets for every account")
struct SignInSecretTests {
  static let password = "correct horse battery"
  static let newPassword = "a new mauve ladder"

  /// Whether any request `transport` carried holds `secret`'s bytes.
  static func carried(_ transport: TamperingTransport, _ secret: String) -> Bool {
    let bytes = Array(secret.utf8)
    return transport.requests.contains { $0.body.firstRange(of: bytes) != nil }
  }

  @Test(
    "A clear account made, signed in to, synced, given a new password and deleted by a device never sends a password; the server keeps the device's salt and only the hash of a secret",
    arguments: Backend.allCases)
  func clearAccountSendsNoPassword(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      try await LyingServerTests.withServer(backend, root: root) { server, baseURL in
        let transport = TamperingTransport(baseURL: baseURL) { $1 }
        let store = try NoteStore.open(
          at: root + "/phone", options: NoteStore.Options(durability: .noSync))
        defer { store.close() }
        let account = try SyncAccount(
          store: store, transport: transport,
          credentials: Credentials(username: "cid", password: Self.password),
          stateFile: SyncAccount.stateFile(for: store), encryption: .testingAsTheServerSays)
        try await account.createAccount()
        #expect(await !account.isEncrypted)
        let record = try #require(try await server.store.account(named: "cid"))
        let derivation = try #require(record.password.derivation)
        #expect(derivation.version == KeyDerivation.currentVersion)
        #expect(derivation.saltBytes.count == KeyDerivation.saltBytes)
        #expect(try !record.password.matches(Self.password))
        let parameters = try await APICaller(transport: transport)
          .signInParameters(username: "cid").get()
        #expect(!parameters.encrypted && parameters.keyDerivation == derivation)

        try await account.signIn()
        try await store.write { _ = $0.createNote(text: "clear and synced") }
        #expect(try await account.sync().inSync)
        // One salt per account: a new password is stretched under the same salt, so that the
        // server does not see when passwords change.
        try await account.changePassword(from: Self.password, to: Self.newPassword)
        #expect(try await server.store.account(named: "cid")?.password.derivation == derivation)
        await account.useToken(nil)
        #expect(try await account.sync().inSync)
        try await account.deleteAccount(password: Self.newPassword)
        #expect(try await server.store.account(named: "cid") == nil)

        #expect(!Self.carried(transport, Self.password))
        #expect(!Self.carried(transport, Self.newPassword))
      }
    }
  }

  @Test(
    "A clear account an earlier version made signs in from a device of this version without its password and moves to a salt of its own; the password itself, and the hash the server kept of it, work until then and never after",
    arguments: Backend.allCases)
  func legacyClearAccountMigrates(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      try await LyingServerTests.withServer(backend, root: root) { server, baseURL in
        let transport = TamperingTransport(baseURL: baseURL) { $1 }
        let caller = APICaller(transport: HTTPTransport(baseURL: baseURL))
        // What a device of the earlier version did: the password itself, at sign-up and at
        // every sign-in.
        let old = Credentials(username: "dee", password: Self.password)
        _ = try await caller.createAccount(old).get()
        let legacy = try #require(try await server.store.account(named: "dee")).password
        #expect(legacy.derivation == nil)
        for _ in 0..<2 { _ = try await caller.signIn(old).get() }
        let parameters = try await caller.signInParameters(username: "dee").get()
        #expect(!parameters.encrypted)
        #expect(parameters.keyDerivation.version == KeyDerivation.serverHashVersion)
        #expect(parameters.keyDerivation.saltBytes == legacy.salt)

        let store = try NoteStore.open(
          at: root + "/phone", options: NoteStore.Options(durability: .noSync))
        defer { store.close() }
        let account = try SyncAccount(
          store: store, transport: transport,
          credentials: Credentials(username: "dee", password: Self.password),
          stateFile: SyncAccount.stateFile(for: store), encryption: .testingAsTheServerSays)
        try await account.signIn()
        try await store.write { _ = $0.createNote(text: "migrated") }
        #expect(try await account.sync().inSync)
        #expect(!Self.carried(transport, Self.password))

        // The record now hashes a secret of a new version 2 derivation the device sent with
        // the sign-in: neither the password itself nor the secret drawn from the hash the
        // server kept before (which a backup still holds) signs in any more.
        let migrated = try #require(try await server.store.account(named: "dee")).password
        let derivation = try #require(migrated.derivation)
        #expect(derivation.version == KeyDerivation.currentVersion)
        #expect(derivation.saltBytes != legacy.salt)
        #expect(try !migrated.matches(Self.password))
        #expect(try !migrated.matches(legacy.signInSecretOfPassword))
        #expect(await caller.signIn(old).status == 401)
        #expect(
          await caller.signIn(
            Credentials(username: "dee", password: legacy.signInSecretOfPassword)
          ).status == 401)
        #expect(
          try await caller.signInParameters(username: "dee").get().keyDerivation == derivation)
        #expect(await account.state.keyDerivation == derivation)
        await account.useToken(nil)
        #expect(try await account.sync().inSync)
        #expect(!Self.carried(transport, Self.password))
      }
    }
  }

  @Test("A new password below the floor is refused on the device for a clear account too")
  func clearAccountPasswordFloor() async throws {
    try await withServer { server in
      let caller = APICaller(transport: InProcessTransport(server: server))
      for weak in ["password", "12345678", "correct horse"] {
        let refused = await #expect(throws: APIError.self) {
          try await caller.createClearAccount(username: "eve", password: weak, cost: .testing)
        }
        #expect(refused?.code == .weakPassword)
      }
      #expect(try await server.store.account(named: "eve") == nil)
      try await caller.createClearAccount(
        username: "eve", password: Self.password, cost: .testing)
      #expect(try await server.store.account(named: "eve") != nil)
    }
  }
}

extension SignInSecretTests {
  @Test(
    "After the operator raises the cost, a check of a hash made at the old cost is padded to the work of the decoy's, so a wrong password for an existing account takes as long as one for a made-up name"
  )
  func paddedChecks() {
    let raised = PasswordCost(logRounds: 18)
    for old in [
      PasswordCost(logRounds: 14), PasswordCost(logRounds: 16), PasswordCost(logRounds: 17),
      PasswordCost(logRounds: 16, blockSize: 8, parallelism: 2),
    ] {
      let padding = old.padding(upTo: raised)
      #expect(old.work + (padding?.work ?? 0) == raised.work, "\(old)")
    }
    #expect(raised.padding(upTo: raised) == nil)
    #expect(PasswordCost(logRounds: 19).padding(upTo: raised) == nil)
    // Past 255 times the old work, as close as a parallelism of 255 comes.
    #expect(PasswordCost(logRounds: 4).padding(upTo: raised)?.parallelism == 255)
  }
}
