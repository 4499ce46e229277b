import Foundation
import LMDB
import ServerTestSupport
import Testing
import VLogServerTesting
import VLogSync
import VLogTesting

@testable import VLog
@testable import VLogServer

/// The documentation articles' code, compiled and run. The blocks between the `// Article:`
/// markers are the articles' Swift code blocks, verbatim; `articlesMatchTheirTests` checks that
/// every Swift block of each article is here, so an article cannot drift from what compiles.
///
/// One at a time: the encryption articles stretch passwords at the standard cost, as an app
/// does, and each stretch holds a thread of the test run's cooperative pool for seconds in a
/// debug build. Two at once would hold both threads of a two-core machine, and stall every
/// server of the run meanwhile.
@Suite("Documentation articles", .serialized)
struct ArticleTests {
  /// The package's root directory.
  static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent()

  static let articles = [
    "Sources/VLog/VLog.docc/EmbedVLogInANotesApp.md",
    "Sources/VLogServer/VLogServer.docc/RunTheSyncServer.md",
    "Sources/LMDB/LMDB.docc/StoreBytesWithLMDB.md",
    "Sources/VLogSync/VLogSync.docc/KeepAStoreInSync.md",
    "Sources/VLogTesting/VLogTesting.docc/TestCodeThatUsesVLog.md",
    "Sources/VLogSync/VLogSync.docc/EndToEndEncryption.md",
  ]

  /// Each line trimmed, blank lines and imports dropped: what must match.
  static func normalised(_ text: some StringProtocol) -> String {
    text.split(separator: "\n", omittingEmptySubsequences: false)
      .map { $0.trimmingCharacters(in: .whitespaces) }
      .filter { !$0.isEmpty && !$0.hasPrefix("import ") }
      .joined(separator: "\n")
  }

  /// The Swift code blocks of a Markdown file.
  static func swiftBlocks(of markdown: String) -> [String] {
    var blocks: [String] = []
    var current: [Substring]?
    for line in markdown.split(separator: "\n", omittingEmptySubsequences: false) {
      if current == nil, line.trimmingCharacters(in: .whitespaces) == "```swift" {
        current = []
      } else if current != nil, line.trimmingCharacters(in: .whitespaces) == "```" {
        blocks.append(current!.joined(separator: "\n"))
        current = nil
      } else if current != nil {
        current!.append(line)
      }
    }
    return blocks
  }

  @Test("every Swift block of the articles is compiled and run by these tests")
  func articlesMatchTheirTests() throws {
    let tests = Self.normalised(
      try String(contentsOf: URL(fileURLWithPath: #filePath), encoding: .utf8))
    for article in Self.articles {
      let text = try String(contentsOf: Self.root.appendingPathComponent(article), encoding: .utf8)
      let blocks = Self.swiftBlocks(of: text)
      #expect(!blocks.isEmpty, "\(article) has no Swift blocks")
      for block in blocks {
        #expect(tests.contains(Self.normalised(block)), "not compiled by a test:\n\(block)")
      }
    }
    // The check can fail: a block that is not here is found missing.
    let absent = "let store = try NoteStore.open(at: " + "elsewhere)"
    #expect(!tests.contains(Self.normalised(absent)))
  }

  @Test("Embed VLog in a notes app: open, write, observe, sync automatically, restore, test")
  func embedInANotesApp() async throws {
    // The store stamps with the real clock: so does the server.
    try await withServer(clock: ManualClock(start: Date())) { server in
      try await withLiveServer(server) { serverURL in
        try await withTemporaryDirectory { root in
          let directory = root + "/notes"
          let password = "correct horse battery"
          // Article: open the store and write.
          let store = try NoteStore.open(at: directory)
          let trip = try await store.write { edits in
            edits.createNote(text: "Trip to Paris", tags: ["Travel"])
          }
          try await store.write { $0.setArchived(true, of: trip) }
          // Article: live query.
          let timeline = Task {
            for try await notes in store.observe({ try $0.timeline(limit: 50) }) {
              print(notes.map(\.truncatedText))  // a view model sets its property here
            }
          }
          // Article: bring back an earlier text.
          try await store.write { $0.setText("Trip to Paris and Lyon", of: trip) }
          let versions = try store.versions(of: trip)  // observe it, as above, for a history view
          if let earlier = versions.last(where: { $0.state == .replaced }) {
            try await store.write { $0.restoreVersion(earlier.stamp, of: trip) }
          }
          // End of the article's block: the first text is shown again.
          #expect(try store.note(trip)?.text == "Trip to Paris")
          #expect(try store.versions(of: trip).map(\.state) == [.replaced, .replaced, .shown])
          // Article: sync automatically.
          let account = try SyncAccount(
            store: store,
            transport: HTTPTransport(baseURL: serverURL),
            credentials: Credentials(username: "ann", password: password),
            credentialStore: FileCredentialStore.file(for: store),
            stateFile: SyncAccount.stateFile(for: store))
          try await account.createAccount()  // once; on another device, skip this: sync signs in
          let sync = AutomaticSync(account: account)
          await sync.start()
          let indicator = Task {
            for await status in await sync.statusUpdates() {
              print(status.activity, status.pendingChanges, status.lastError?.message ?? "")
            }
          }
          await sync.trigger(.foreground)  // also .networkAvailable, .manual
          // End of the article's block: the sync happened by itself.
          var synced = false
          for _ in 0..<1000 where !synced {
            try await Task.sleep(for: .milliseconds(10))
            let status = await sync.status
            synced = status.isInSync && status.activity == .idle
          }
          #expect(synced)
          await sync.stop()
          timeline.cancel()
          indicator.cancel()
          // Article: the next launch.
          let restored = try SyncAccount(
            store: store, transport: HTTPTransport(baseURL: serverURL), username: "ann",
            credentialStore: FileCredentialStore.file(for: store),
            stateFile: SyncAccount.stateFile(for: store))
          if await !restored.isSignedIn {
            try await restored.signIn(password: password)  // ask the user
          }
          // End of the article's block: restored without the password, and in sync.
          #expect(try await restored.sync().inSync)
          let other = try NoteStore.open(at: root + "/other")
          defer { other.close() }
          let laptop = try SyncAccount(
            store: other, transport: HTTPTransport(baseURL: serverURL),
            credentials: Credentials(username: "ann", password: password))
          _ = try await laptop.sync()
          #expect(try other.note(trip)?.text == "Trip to Paris")
          #expect(try other.note(trip)?.isArchived == true)
          store.close()
        }
      }
    }
    // Article: test it.
    let clock = ManualClock()
    let options = NoteStore.Options(
      durability: .noSync, dependencies: .testing(clock: clock, seed: 1))
    try await withTemporaryDirectory { directory in
      let store = try NoteStore.open(at: directory, options: options)
      defer { store.close() }
      let id = try await store.write { $0.createNote(text: "first") }
      clock.advance(by: 60)
      try await store.write { $0.setText("edited", of: id) }
      #expect(try store.note(id)?.text == "edited")
      #expect(try store.note(id)?.creationDate == clock.now.addingTimeInterval(-60))
    }
  }

  @Test("Embed VLog in a notes app: a damaged store is set aside before it is opened")
  func embedDamagedStore() throws {
    try withTemporaryDirectory { root in
      let storePath = root + "/notes"
      let first = try NoteStore.open(at: storePath)
      try first.write { edits in
        for index in 0..<300 { edits.createNote(text: "note \(index)") }
      }
      first.close()
      // A branch key set high, as flipped bits would: LMDB would then look for entries on the
      // wrong pages.
      let file = URL(fileURLWithPath: storePath + "/data.mdb")
      var bytes = try [UInt8](Data(contentsOf: file))
      let log = try #require(bytes.withUnsafeBytes { PageStructure(file: $0) }.trees["log"])
      let branch = try #require(log.root) * 4096
      #expect(log.depth >= 2)
      let pointer = branch + 16 + 2
      let node = branch + (Int(bytes[pointer]) | Int(bytes[pointer + 1]) << 8)
      let keySize = Int(bytes[node + 6]) | Int(bytes[node + 7]) << 8
      for offset in node + 8..<node + 8 + keySize { bytes[offset] = 0xFF }
      try Data(bytes).write(to: file)
      // Article: when the disk damages the store.
      let faults = try NoteStore.structureFaults(at: storePath)
      if !faults.isEmpty {
        // Keep the damaged directory aside for support, and salvage it: every event whose record
        // is intact, with this device's replica id and account.
        let damaged = storePath + ".damaged"
        try FileManager.default.moveItem(atPath: storePath, toPath: damaged)
        let report = try NoteStore.salvage(from: damaged, to: storePath)
        print("recovered the notes store: \(report)")
      }
      let store = try NoteStore.open(at: storePath)
      defer { store.close() }
      #expect(!faults.isEmpty)
      // A branch key holds no record: every note comes back, and all of them wait to be
      // pushed (the server skips those it has).
      #expect(try store.statistics().notes == 300)
      #expect(try store.outboxCount() == 600)
      #expect(try store.verify().isEmpty)
      #expect(FileManager.default.fileExists(atPath: storePath + ".damaged/data.mdb"))
    }
  }

  @Test("Run the sync server: on LMDB and on PostgreSQL, verified")
  func runTheSyncServer() async throws {
    try await withTemporaryDirectory { root in
      let dataDirectory = root + "/server"
      let databaseURL = try await TestCluster.shared.newDatabase()
      // Article: embedded.
      let local = try SyncServer.open(dataDirectory: dataDirectory)
      defer { local.close() }
      let shared = try await SyncServer.open(database: databaseURL, maximumConnections: 16)
      defer { shared.close() }
      let verification = try await shared.verify()
      print(verification.accounts, verification.events, verification.faults.isEmpty)
      // End of the article's block.
      #expect(verification.faults.isEmpty && verification.accounts == 0)
      #expect(try await local.verify().faults.isEmpty)
      #expect(local.location == dataDirectory)
    }
  }

  @Test("Store bytes with LMDB: open, write in order, read a range")
  func storeBytesWithLMDB() throws {
    try withTemporaryDirectory { directory in
      // Article: open.
      let environment = try Environment.open(
        at: directory, configuration: Environment.Configuration(durability: .durable))
      defer { environment.close() }
      let people = try environment.openDatabase(named: "people", flags: .create)
      // Article: write.
      func key(_ number: UInt64) -> [UInt8] {
        withUnsafeBytes(of: number.bigEndian) { Array($0) }
      }
      try environment.write { transaction in
        for (number, name) in [(2, "Bob"), (1, "Ann"), (3, "Cy")] {
          try transaction.put(Array(name.utf8), forKey: key(UInt64(number)), in: people)
        }
      }
      // Article: read.
      let names = try environment.read { transaction in
        var names: [String] = []
        try transaction.forEach(in: people, range: .from(key(2))) { _, value in
          names.append(String(decoding: value, as: UTF8.self))
        }
        return names
      }
      // ["Bob", "Cy"]: from key 2 on, in key order
      #expect(names == ["Bob", "Cy"])
    }
  }

  @Test("Keep a store in sync: a report, errors, automatic sync, sessions")
  func keepAStoreInSync() async throws {
    try await withServer(clock: ManualClock(start: Date())) { server in
      try await withLiveServer(server) { serverURL in
        try await withTemporaryDirectory { root in
          let store = try NoteStore.open(at: root + "/store")
          defer { store.close() }
          let password = "correct horse battery"
          let newPassword = "a new mauve ladder"
          try await store.write { $0.createNote(text: "to sync") }
          // Article: sync by hand.
          let account = try SyncAccount(
            store: store, transport: HTTPTransport(baseURL: serverURL),
            credentials: Credentials(username: "ann", password: password),
            stateFile: SyncAccount.stateFile(for: store))
          try await account.createAccount()
          let report = try await account.sync()
          print(report.pushed, report.applied, report.inSync)
          #expect(report.inSync && report.pushed > 0)
          // Article: what can go wrong.
          do {
            try await account.sync()
          } catch let error as APIError where error.isTransient {
            print("later:", error.message, error.retryAfter ?? .zero)  // no network, 429, 5xx
          } catch let error as APIError where error.code == .signedOut || error.status == 401 {
            print("sign in again:", error.message)
          } catch let error as APIError where error.body?.code == .clockSkew {
            let skew = await account.state.clockSkewMilliseconds ?? 0
            print("this device's clock is off by \(skew) ms")
          }
          // Article: a store belongs to one account.
          let other = try SyncAccount(
            store: store, transport: HTTPTransport(baseURL: serverURL),
            credentials: Credentials(username: "bob", password: password))
          let ann = account
          do {
            let account = other
            do {
              try await account.sync()
            } catch let error as VLogError where error.code == .otherAccount {
              print(error.message)  // "this store belongs to 'ann' on … and cannot sync as 'bob' …"
            }
          }
          #expect(try store.account() == ann.binding)
          // Article: which notes differ.
          let pending = try await store.write { $0.createNote(text: "not pushed yet") }
          let check = try await account.checkSync()
          for difference in check.differences {
            // .missingOnServer or .missingOnDevice; .pushFromOutbox, .push, .fetch, .pushLater, .never
            print(difference.note?.description ?? "a tag", difference.side, difference.repair)
          }
          print(check.inSync, check.notes.count, check.nextSyncRepairs)
          #expect(check.notes == [pending] && check.nextSyncRepairs)
          #expect(check.differences.allSatisfy { $0.repair == .pushFromOutbox })
          // Article: automatic.
          let automatic = AutomaticSync(account: account)
          await automatic.start()
          await automatic.trigger(.networkAvailable)
          let status = await automatic.status
          print(status.activity, status.pendingChanges, status.lastError?.needsSignIn ?? false)
          print(status.liveChannel)  // .open once the live channel is held
          await automatic.stop()
          // Article: sessions.
          for session in try await account.sessions() where !session.current {
            try await account.revokeSession(id: session.id)
          }
          try await account.changePassword(from: password, to: newPassword)
          // End of the article's blocks.
          #expect(try await account.sessions().count == 1)
          let caller = APICaller(transport: HTTPTransport(baseURL: serverURL))
          #expect(
            await caller.signIn(Credentials(username: "ann", password: password)).status == 401)
        }
      }
    }
  }

  @Test("End-to-end encryption: an encrypted account's keys, made on one device, open on another")
  func endToEndEncryption() async throws {
    try await withServer(clock: ManualClock(start: Date())) { server in
      try await withLiveServer(server) { serverURL in
        let caller = APICaller(transport: HTTPTransport(baseURL: serverURL))
        let password = "correct horse battery"
        let secureRandomBytes = SystemRandom.bytes
        var shown: [String] = []
        func show(_ key: RecoveryKey) { shown.append(key.description) }
        // Article: keys.
        let account = try NewEncryptedAccount(
          username: "ann", password: password, random: secureRandomBytes)
        show(account.recoveryKey)  // once: losing it and the password loses the notes
        _ = try await caller.createAccount(account.credentials, keys: account.serverKeys).get()

        // On another device: how the account's password is stretched, then its keys.
        let parameters = try await caller.signInParameters(of: "ann", floor: .standard)
        let passwordKeys = try PasswordKeys(
          username: "ann", password: password, derivation: parameters.keyDerivation)
        let token = try await caller.signIn(
          Credentials(username: "ann", password: passwordKeys.signInSecret)
        ).get().token
        let sealed = try await caller.accountKeys(token: token).get()
        let keys = try AccountKeys(opening: sealed, with: passwordKeys, username: "ann")
        // End of the article's code.
        #expect(keys == account.keys)
        #expect(shown.count == 1 && shown.first?.count == 69)
        #expect(await caller.signIn(Credentials(username: "ann", password: password)).status == 401)
      }
    }
  }

  @Test("End-to-end encryption: a SyncAccount creates an encrypted account and syncs it sealed")
  func endToEndEncryptionInAnApp() async throws {
    try await withServer(clock: ManualClock(start: Date())) { server in
      try await withLiveServer(server) { serverURL in
        try await withTemporaryStore { store in
          let password = "correct horse battery"
          var shown: [String] = []
          func show(_ key: RecoveryKey) { shown.append(key.description) }
          _ = try await store.write { $0.createNote(text: "CanaryArticle") }
          // Article: an encrypted account in an app.
          let account = try SyncAccount(
            store: store, transport: HTTPTransport(baseURL: serverURL),
            credentials: Credentials(username: "ann", password: password),
            credentialStore: FileCredentialStore.file(for: store), encryption: .standard)
          try await account.createAccount()
          show(await account.recoveryKey!)  // once: losing it and the password loses the notes
          try await account.signIn()
          try await account.sync()  // sealed on the way out, opened on the way in
          // End of the article's code.
          #expect(shown.count == 1)
          let number = try #require(try await server.store.account(named: "ann")).number
          let stored = try await server.store.sync(
            account: number, pushing: [], after: 0, limit: 100, maximumBytes: .max,
            retention: (nil, 0))
          #expect(!stored.events.isEmpty && stored.events.allSatisfy { $0.sealedValues != nil })
        }
      }
    }
  }

  @Test("Test code that uses VLog: deterministic stores, convergence, a test clock")
  func testCodeThatUsesVLog() async throws {
    // Article: deterministic.
    let clock = ManualClock()
    let options = NoteStore.Options(
      durability: .noSync, dependencies: .testing(clock: clock, seed: 7))
    try await withTemporaryStore(options: options) { store in
      let id = try await store.write { $0.createNote(text: "Buy bread") }
      clock.advance(by: 60)
      try await store.write { $0.setArchived(true, of: id) }
      #expect(try store.archivedNotes().map(\.id) == [id])
    }
    // Article: convergence.
    try await withTemporaryDirectory { directory in
      let phone = try NoteStore.open(at: directory + "/phone")
      let laptop = try NoteStore.open(at: directory + "/laptop")
      defer {
        phone.close()
        laptop.close()
      }
      let id = try await phone.write { $0.createNote(text: "draft") }
      try await laptop.ingest(try phone.events().map(\.event))
      try await laptop.write { $0.setText("edited on the laptop", of: id) }
      try await phone.write { $0.setArchived(true, of: id) }
      try await phone.ingest(try laptop.events().map(\.event))
      try await laptop.ingest(try phone.events().map(\.event))
      #expect(try phone.stateDigest() == laptop.stateDigest())
    }
    try await withServer { server in
      try await withTemporaryDirectory { root in
        let device = try openDevice(
          0, root: root, transport: InProcessTransport(server: server),
          credentials: Credentials(username: "ann", password: "correct horse battery"), seed: 1,
          clock: ManualClock())
        defer { device.store.close() }
        let account = device.account
        try await account.createAccount()
        // Article: time without waiting.
        let testClock = TestClock()
        let automatic = AutomaticSync(account: account, clock: testClock)
        await automatic.start()
        testClock.advance(by: .seconds(2))  // the start's sync runs now, not in two seconds
        // End of the article's block.
        var synced = false
        for _ in 0..<1000 where !synced {
          try await Task.sleep(for: .milliseconds(10))
          synced = await automatic.progress == (1, .idle)
        }
        #expect(synced)
        await automatic.stop()
      }
    }
  }
}
