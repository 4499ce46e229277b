import Foundation
import ServerTestSupport
import Testing
import VLogServerTesting
import VLogSync
import VLogTesting

@testable import VLog
@testable import VLogServer

@Suite("Credentials across launches")
struct CredentialStoreTests {
  static let ann = Credentials(username: "Ann", password: "correct horse battery")

  private func mode(of path: String) throws -> Int {
    let attributes = try FileManager.default.attributesOfItem(atPath: path)
    return (attributes[.posixPermissions] as? Int) ?? -1
  }

  @Test("the file store keeps tokens per user in a file only its owner can read")
  func fileStore() throws {
    try withTemporaryDirectory { root in
      let store = FileCredentialStore(path: root + "/credentials.json")
      #expect(try store.token(for: "ann") == nil)
      try store.setToken("first", for: "ann")
      try store.setToken("second", for: "bob")
      #expect(try mode(of: store.path) == 0o600)
      #expect(try store.token(for: "ann") == "first")
      #expect(try FileCredentialStore(path: store.path).token(for: "bob") == "second")
      try store.setToken(nil, for: "ann")
      #expect(try store.token(for: "ann") == nil)
      #expect(try store.token(for: "bob") == "second")
      let leftovers = try FileManager.default.contentsOfDirectory(atPath: root)
      #expect(leftovers == ["credentials.json"])
    }
  }

  @Test("a file others can read, another user's or a link is refused, saying why")
  func unsafeFiles() throws {
    try withTemporaryDirectory { root in
      let store = FileCredentialStore(path: root + "/credentials.json")
      try store.setToken("secret", for: "ann")
      try FileManager.default.setAttributes(
        [.posixPermissions: 0o644], ofItemAtPath: store.path)
      let error = #expect(throws: CredentialStoreError.self) { try store.token(for: "ann") }
      #expect(error?.message.contains("mode 644") == true)
      #expect(error?.message.contains(store.path) == true)
      // Writing is refused too, and leaves the file as it was.
      #expect(throws: CredentialStoreError.self) { try store.setToken("other", for: "ann") }
      try FileManager.default.setAttributes(
        [.posixPermissions: 0o600], ofItemAtPath: store.path)
      #expect(try store.token(for: "ann") == "secret")

      let link = FileCredentialStore(path: root + "/link.json")
      try FileManager.default.createSymbolicLink(atPath: link.path, withDestinationPath: store.path)
      let linkError = #expect(throws: CredentialStoreError.self) { try link.token(for: "ann") }
      #expect(linkError?.message.contains("not a regular file") == true)

      try Data("not json".utf8).write(to: URL(fileURLWithPath: root + "/bad.json"))
      let bad = FileCredentialStore(path: root + "/bad.json")
      try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: bad.path)
      let badError = #expect(throws: CredentialStoreError.self) { try bad.token(for: "ann") }
      #expect(badError?.message.contains("not a credentials file") == true)
    }
  }

  @Test(
    "a token survives a restart without the password; signed out, the account asks for it",
    arguments: Backend.allCases)
  func acrossLaunches(backend: Backend) async throws {
    // The store stamps with the real clock: so does the server.
    try await withServer(backend: backend, clock: ManualClock(start: Date())) { server in
      try await withTemporaryDirectory { root in
        let transport = InProcessTransport(server: server)
        let store = try NoteStore.open(
          at: root + "/device", options: NoteStore.Options(durability: .noSync))
        defer { store.close() }
        let credentials = FileCredentialStore.file(for: store)

        // First launch: the user types the password once.
        let first = try SyncAccount(
          store: store, transport: transport, credentials: Self.ann,
          credentialStore: credentials, encryption: .testingAsTheServerSays)
        try await first.createAccount()
        try await first.signIn()
        try await store.write { $0.createNote(text: "before the restart") }
        #expect(try await first.sync().inSync)
        let token = try #require(await first.currentToken)
        #expect(try credentials.token(for: "ann") == token)
        let file = try String(contentsOfFile: credentials.path, encoding: .utf8)
        #expect(!file.contains(Self.ann.password))

        // Second launch: no password, the kept token.
        let second = try SyncAccount(
          store: store, transport: transport, username: "ann", credentialStore: credentials,
          encryption: .testingAsTheServerSays)
        #expect(await second.isSignedIn)
        try await store.write { $0.createNote(text: "after the restart") }
        let report = try await second.sync()
        #expect(report.pushed > 0 && report.inSync)

        // Signing out revokes the token and removes it from the file.
        try await second.signOut()
        #expect(try credentials.token(for: "ann") == nil)
        let caller = APICaller(transport: transport)
        let refused = await caller.sync(SyncPush(cursor: 0, events: []), token: token)
        #expect(refused.status == 401)

        // Third launch: nothing kept; syncing says to sign in, and the status shows it.
        let third = try SyncAccount(
          store: store, transport: transport, username: "ann", credentialStore: credentials,
          encryption: .testingAsTheServerSays)
        #expect(await !third.isSignedIn)
        let error = await #expect(throws: APIError.self) { try await third.sync() }
        #expect(error?.code == .signedOut)
        let clock = TestClock()
        let automatic = AutomaticSync(account: third, clock: clock)
        await automatic.start()
        clock.advance(by: .seconds(2))
        for _ in 0..<1000 where await automatic.status.lastError == nil {
          try await Task.sleep(for: .milliseconds(10))
        }
        #expect(await automatic.status.lastError?.needsSignIn == true)
        await automatic.stop()

        // Wrong password: refused, nothing kept. Right one: kept, syncs.
        await #expect(throws: APIError.self) { try await third.signIn(password: "wrong one!") }
        #expect(try credentials.token(for: "ann") == nil)
        try await third.signIn(password: Self.ann.password)
        #expect(try credentials.token(for: "ann") == (await third.currentToken))
        #expect(try await third.sync().inSync)
      }
    }
  }
}
