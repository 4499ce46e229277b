import Foundation
import LMDB
import ServerTestSupport
import Synchronization
import Testing
import VLogServerTesting
import VLogSync
import VLogTesting

@testable import VLog
@testable import VLogServer

/// Counts the requests that reach the server.
final class CountingTransport: Transport {
  let base: any Transport
  var server: String { base.server }
  private let count = Mutex(0)
  init(_ base: any Transport) { self.base = base }
  var requests: Int { count.withLock { $0 } }
  func send(_ request: TransportRequest) async throws -> TransportResponse {
    count.withLock { $0 += 1 }
    return try await base.send(request)
  }
}

@Suite("Account lifecycle")
struct AccountLifecycleTests {
  static let ann = Credentials(username: "ann", password: "correct horse battery")
  static let bob = Credentials(username: "bob", password: "battery staple orchid")
  static let canary = "canary-account-7f3a"

  @Test(
    "a deleted account leaves nothing on the server, raw bytes after compaction included; others are untouched",
    arguments: Backend.allCases)
  func deleteAccount(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      let serverDirectory = root + "/server"
      let server = try await openServer(backend: backend, directory: serverDirectory)
      let transport = InProcessTransport(server: server)
      let canary = Data(Self.canary.utf8)
      let ann = try openDevice(
        0, root: root, transport: transport, credentials: Self.ann, seed: 1, clock: ManualClock())
      let bob = try openDevice(
        1, root: root, transport: transport, credentials: Self.bob, seed: 2, clock: ManualClock())
      defer {
        ann.store.close()
        bob.store.close()
      }
      try await ann.account.createAccount()
      try await bob.account.createAccount()
      try await ann.store.write { changes in
        let id = changes.createNote(text: "text \(Self.canary)", tags: ["tag-\(Self.canary)"])
        changes.addAttachment(Array("bytes \(Self.canary)".utf8), mimeType: "text/plain", to: id)
      }
      try await bob.store.write { $0.createNote(text: "bob's note") }
      #expect(try await ann.account.sync().inSync)
      #expect(try await bob.account.sync().inSync)
      let bobBefore = try Digests(bob.store)
      #expect(try await storedBytes(of: server).range(of: canary) != nil)
      let annToken = try #require(await ann.account.currentToken)

      // A wrong password deletes nothing.
      let refused = await #expect(throws: APIError.self) {
        try await ann.account.deleteAccount(password: "not the password")
      }
      #expect(refused?.status == 403 && refused?.body?.code == .invalidCredentials)
      #expect(try await ann.account.sync().inSync)

      try await ann.account.deleteAccount(password: Self.ann.password)
      #expect(await ann.account.currentToken == nil)
      let caller = APICaller(transport: transport)
      #expect(await caller.sync(SyncPush(cursor: 0, events: []), token: annToken).status == 401)
      #expect(await caller.signIn(Self.ann).status == 401)
      // Nothing of it in any row (LMDB's free pages are checked after compaction, below); a
      // push or upload authorised before the deletion and arriving after it stores nothing.
      if backend == .postgres {
        #expect(try await storedBytes(of: server).range(of: canary) == nil)
      }
      let late = try ann.store.events().map(\.event)
      await #expect(throws: StorageError.self) {
        _ = try await server.store.sync(account: 1, pushing: late, after: 0, limit: 10)
      }
      let hash = try #require(BlobHash(bytes: [UInt8](repeating: 7, count: 32)))
      await #expect(throws: StorageError.self) {
        _ = try await server.store.storeBlob(Array("late".utf8), hash: hash, account: 1, now: 0)
      }
      #expect(try await server.store.tokens(of: 1).isEmpty)
      #expect(try await server.store.account(number: 1) == nil)
      #expect(try await server.verify().faults.isEmpty)
      #expect(try await server.verify().accounts == 1)

      // Bob is untouched; the name can be taken again, by an account that starts empty.
      let bobAfter = try await bob.account.sync()
      #expect(bobAfter.inSync && bobAfter.applied == 0)
      #expect(try Digests(bob.store) == bobBefore)
      let again = try openDevice(
        2, root: root, transport: transport, credentials: Self.ann, seed: 3, clock: ManualClock())
      defer { again.store.close() }
      try await again.account.createAccount()
      let fresh = try await again.account.sync()
      #expect(fresh.pulled == 0 && fresh.inSync)
      // The old store keeps its notes.
      #expect(try ann.store.noteCount() == 1)

      server.close()
      if backend == .lmdb {
        // Compaction leaves no free page holding the old account's bytes.
        _ = try SyncServer.compact(dataDirectory: serverDirectory)
        let data = try Data(contentsOf: URL(fileURLWithPath: serverDirectory + "/data.mdb"))
        #expect(data.range(of: canary) == nil)
      }
    }
  }

  @Test(
    "a store belongs to the account and server it first signed in to: another is refused before anything is sent",
    arguments: Backend.allCases)
  func storeBoundToAccount(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      try await withTemporaryDirectory { root in
        let transport = InProcessTransport(server: server)
        let ann = try openDevice(
          0, root: root, transport: transport, credentials: Self.ann, seed: 5,
          clock: ManualClock())
        try await ann.account.createAccount()
        _ = try await APICaller(transport: transport).createAccount(Self.bob).get()
        try await ann.store.write { $0.createNote(text: "ann's \(Self.canary)") }

        // A wrong password binds nothing and writes no state.
        let wrong = try SyncAccount(
          store: ann.store, transport: transport,
          credentials: Credentials(username: "ann", password: "wrong password"),
          stateFile: SyncAccount.stateFile(for: ann.store), encryption: .testingAsTheServerSays)
        await #expect(throws: APIError.self) { try await wrong.sync() }
        #expect(try ann.store.account() == nil)
        #expect(!FileManager.default.fileExists(atPath: ann.store.path + "/sync-state.json"))

        #expect(try await ann.account.sync().inSync)
        #expect(try ann.store.account() == AccountBinding(server: "in-process", username: "ann"))

        // Bob, and ann on another server, are refused by sign-in and by sync, with nothing sent.
        let counted = CountingTransport(transport)
        for (credentials, transport) in [
          (Self.bob, counted as any Transport),
          (Self.ann, InProcessTransport(server: server, name: "another server")),
        ] {
          let other = try SyncAccount(
            store: ann.store, transport: transport, credentials: credentials,
            stateFile: SyncAccount.stateFile(for: ann.store), encryption: .testingAsTheServerSays)
          let signIn = await #expect(throws: VLogError.self) { try await other.signIn() }
          #expect(signIn?.code == .otherAccount)
          let sync = await #expect(throws: VLogError.self) { try await other.sync() }
          #expect(sync?.code == .otherAccount)
          #expect(sync?.message.contains("belongs to 'ann' on in-process") == true)
        }
        #expect(counted.requests == 0)
        let bob = try openDevice(
          1, root: root, transport: transport, credentials: Self.bob, seed: 6,
          clock: ManualClock())
        defer { bob.store.close() }
        let bobs = try await bob.account.sync()
        #expect(bobs.pulled == 0 && bobs.inSync)

        // A store that synced before stores recorded their account is bound to the one its
        // state file names.
        _ = try ann.store.environment.write { transaction in
          try transaction.delete(forKey: Keys.Meta.account, in: ann.store.schema.meta)
        }
        #expect(try ann.store.account() == nil)
        let legacy = try SyncAccount(
          store: ann.store, transport: counted, credentials: Self.bob,
          stateFile: SyncAccount.stateFile(for: ann.store), encryption: .testingAsTheServerSays)
        await #expect(throws: VLogError.self) { try await legacy.sync() }
        #expect(counted.requests == 0)
        #expect(try ann.store.account() == AccountBinding(server: "in-process", username: "ann"))

        // The store can start over: erased, it syncs as bob, who still holds nothing of ann's.
        let path = ann.store.path
        ann.store.close()
        try NoteStore.erase(at: path)
        let restarted = try NoteStore.open(at: path)
        defer { restarted.close() }
        let fresh = try SyncAccount(
          store: restarted, transport: transport, credentials: Self.bob,
          encryption: .testingAsTheServerSays)
        let report = try await fresh.sync()
        #expect(report.pushed == 0 && report.pulled == 0)
        #expect(throws: VLogError.self) { try NoteStore.erase(at: path) }
      }
    }
  }

  @Test(
    "changing the password signs out every other session; the old password stops working",
    arguments: Backend.allCases)
  func changePassword(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      try await withTemporaryDirectory { root in
        let transport = InProcessTransport(server: server)
        let devices = try openDevices(
          2, root: root, transport: { _ in transport }, credentials: Self.ann, seed: 4)
        defer { for device in devices { device.store.close() } }
        let (phone, laptop) = (devices[0], devices[1])
        try await phone.account.createAccount()
        _ = try await phone.account.sync()
        _ = try await laptop.account.sync()
        let laptopToken = try #require(await laptop.account.currentToken)

        let wrong = await #expect(throws: APIError.self) {
          try await phone.account.changePassword(from: "not the password", to: "a new mauve ladder")
        }
        #expect(wrong?.status == 403)
        let short = await #expect(throws: APIError.self) {
          try await phone.account.changePassword(from: Self.ann.password, to: "short")
        }
        // Refused on the device, as every account's new passwords are, before anything is sent.
        #expect(short?.code == .weakPassword)

        let phoneToken = try #require(await phone.account.currentToken)
        try await phone.account.changePassword(from: Self.ann.password, to: "a new mauve ladder")
        // The phone's session goes on; it signs in with the new password when it must.
        #expect(await phone.account.currentToken == phoneToken)
        try await phone.store.write { $0.createNote(text: "after the change") }
        #expect(try await phone.account.sync().inSync)
        await phone.account.useToken(nil)
        #expect(try await phone.account.sync().inSync)
        // The laptop's token was revoked, and its old password is refused.
        let caller = APICaller(transport: transport)
        #expect(
          await caller.sync(SyncPush(cursor: 0, events: []), token: laptopToken).status == 401)
        let refused = await #expect(throws: APIError.self) { try await laptop.account.sync() }
        #expect(refused?.body?.code == .invalidCredentials)
        try await laptop.account.signIn(password: "a new mauve ladder")
        #expect(try await laptop.account.sync().inSync)
      }
    }
  }

  @Test(
    "a password stored at less than the server's cost is hashed again at sign-in, keeping the account's sessions; a stronger one is kept",
    arguments: Backend.allCases)
  func rehashAtSignIn(backend: Backend) async throws {
    var configuration = SyncServer.Configuration.testing
    configuration.passwordCost = PasswordCost(logRounds: 5)
    try await withServer(backend: backend, configuration: configuration) { server in
      let weak = try PasswordHash(
        hashing: Self.ann.password, cost: .testing, salt: Array(repeating: 7, count: 16))
      try await server.store.createAccount(named: "ann", password: weak)
      let strong = try PasswordHash(
        hashing: "bea's password", cost: PasswordCost(logRounds: 6),
        salt: Array(repeating: 8, count: 16))
      try await server.store.createAccount(named: "bea", password: strong)
      let caller = APICaller(transport: InProcessTransport(server: server))

      let first = try await caller.signIn(Self.ann).get().token
      let rehashed = try #require(try await server.store.account(named: "ann")).password
      #expect(rehashed.cost == configuration.passwordCost)
      #expect(rehashed.salt != weak.salt)
      // The session that signed in goes on; the password still signs in, at the new cost.
      #expect(await caller.sessions(token: first).status == 200)
      _ = try await caller.signIn(Self.ann).get()
      #expect(try await server.store.account(named: "ann")?.password == rehashed)
      // A wrong password changes nothing.
      _ = await caller.signIn(Credentials(username: "ann", password: "not the password"))
      #expect(try await server.store.account(named: "ann")?.password == rehashed)

      _ = try await caller.signIn(Credentials(username: "bea", password: "bea's password")).get()
      #expect(try await server.store.account(named: "bea")?.password == strong)
    }
  }

  @Test(
    "sessions are listed with the current one marked, and one can be signed out by id",
    arguments: Backend.allCases)
  func sessions(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      try await withTemporaryDirectory { root in
        let transport = InProcessTransport(server: server)
        let devices = try openDevices(
          3, root: root, transport: { _ in transport }, credentials: Self.ann, seed: 5)
        defer { for device in devices { device.store.close() } }
        try await devices[0].account.createAccount()
        for device in devices { try await device.account.signIn() }
        let listed = try await devices[0].account.sessions()
        #expect(listed.count == 3)
        #expect(listed.filter(\.current).count == 1)
        #expect(Set(listed.map(\.id)).count == 3)
        #expect(listed.allSatisfy { $0.id.count == 16 })
        let laptopToken = try #require(await devices[1].account.currentToken)
        let laptopID = try #require(
          try await devices[1].account.sessions().first(where: \.current)?.id)

        try await devices[0].account.revokeSession(id: laptopID)
        let caller = APICaller(transport: transport)
        #expect(
          await caller.sync(SyncPush(cursor: 0, events: []), token: laptopToken).status == 401)
        #expect(try await devices[0].account.sessions().count == 2)
        let missing = await #expect(throws: APIError.self) {
          try await devices[0].account.revokeSession(id: laptopID)
        }
        #expect(missing?.status == 404)
        let malformed = await #expect(throws: APIError.self) {
          try await devices[0].account.revokeSession(id: "not-an-id")
        }
        #expect(malformed?.status == 400 && malformed?.body?.field == "id")
        // Another account cannot see or end these sessions.
        let other = try openDevice(
          3, root: root, transport: transport, credentials: Self.bob, seed: 6,
          clock: ManualClock())
        defer { other.store.close() }
        try await other.account.createAccount()
        try await other.account.signIn()
        #expect(try await other.account.sessions().count == 1)
        let foreign = try #require(listed.first { !$0.current }?.id)
        let notTheirs = await #expect(throws: APIError.self) {
          try await other.account.revokeSession(id: foreign)
        }
        #expect(notTheirs?.status == 404)
        #expect(try await devices[0].account.sessions().count == 2)
      }
    }
  }
}
