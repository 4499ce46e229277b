import ArgumentParser
import Foundation
import Logging
import Testing
import VLogServer
import VLogSync
import VLogTesting

@testable import VLog
@testable import VLogCLI

/// A server for the CLI's tests: fast password hashing, quiet logs.
func withTestServer<R: Sendable>(
  _ root: String, _ body: @escaping @Sendable (_ url: String) async throws -> R
) async throws -> R {
  var logger = Logger(label: "VLogCLITests")
  logger.logLevel = .critical
  let server = try SyncServer.open(
    dataDirectory: root + "/server",
    configuration: .init(passwordCost: .testing, durability: .noSync), logger: logger)
  defer { server.close() }
  return try await server.serving { port in try await body("http://127.0.0.1:\(port)") }
}

@Suite("vlog account, sync and status")
struct SyncCommandTests {
  @Test(
    "An end-to-end encrypted account from the command line: created with a recovery key printed once, synced sealed between two stores (the second sync needs no password), its password changed, recovered with the recovery key; a mistyped recovery key is refused"
  )
  func encryptedAccount() async throws {
    try await withTemporaryDirectory { root in
      try await withTestServer(root) { url in
        let created = try await CreateAccount.execute(
          server: url, user: "Eve", password: "correct horse battery", encryption: .testing)
        #expect(created.text.hasPrefix("created end-to-end encrypted account 'eve' on \(url)"))
        let weak = await #expect(throws: (any Error).self) {
          try await CreateAccount.execute(
            server: url, user: "Fay", password: "password1234", encryption: .testing)
        }
        #expect("\(weak.map { "\($0)" } ?? "")".contains("too easy to guess"))
        let line = try #require(
          created.text.split(separator: "\n").first { $0.hasPrefix("recovery key: ") })
        let recoveryKey = String(line.dropFirst("recovery key: ".count))
        #expect(recoveryKey.count == 69)
        #expect(try created.jsonText().contains("\"encrypted\" : true"))

        let phone = try NoteStore.open(at: root + "/phone")
        let laptop = try NoteStore.open(at: root + "/laptop")
        defer {
          phone.close()
          laptop.close()
        }
        let note = try await phone.write { $0.createNote(text: "CanaryCommandLine") }
        let pushed = try await SyncCommand.execute(
          on: phone, server: url, user: "eve", password: "correct horse battery",
          encryption: .testing)
        #expect(pushed.text.contains("in sync"), "\(pushed.text)")
        _ = try await SyncCommand.execute(
          on: laptop, server: url, user: "eve", password: "correct horse battery",
          encryption: .testing)
        #expect(try laptop.note(note)?.text == "CanaryCommandLine")
        // The kept keys say the account is encrypted: no flag, no password.
        try await laptop.write { $0.setArchived(true, of: note) }
        _ = try await SyncCommand.execute(
          on: laptop, server: url, user: "eve", password: nil, cost: .testing)
        _ = try await SyncCommand.execute(
          on: phone, server: url, user: "eve", password: nil, cost: .testing)
        #expect(try phone.note(note)?.isArchived == true)

        // --no-rekey: the keys are sealed to the new password, the recovery key stays.
        _ = try await ChangePassword.execute(
          server: url, user: "eve", current: "correct horse battery", new: "a second password",
          encryption: .testing, rekey: false)
        await #expect(throws: APIError.self) {
          try await SessionsCommand.execute(
            server: url, user: "eve", password: "correct horse battery", encryption: .testing)
        }
        var typo = Array(recoveryKey)
        typo[0] = typo[0] == "A" ? "B" : "A"
        await #expect(throws: CLIError.self) {
          try await RecoverAccount.execute(
            server: url, user: "eve", recoveryKey: String(typo), new: "a third password",
            cost: .testing)
        }
        let recovered = try await RecoverAccount.execute(
          server: url, user: "eve", recoveryKey: recoveryKey, new: "a third password",
          cost: .testing)
        #expect(recovered.text.hasPrefix("recovered 'eve'"))
        let listed = try await SessionsCommand.execute(
          server: url, user: "eve", password: "a third password", encryption: .testing)
        #expect(listed.text == "no sessions of 'eve' on \(url)")
        // A store signed in afresh with the recovered password reads the notes.
        let tablet = try NoteStore.open(at: root + "/tablet")
        defer { tablet.close() }
        _ = try await SyncCommand.execute(
          on: tablet, server: url, user: "eve", password: "a third password", encryption: .testing)
        #expect(try tablet.note(note)?.isArchived == true)
        // Without --encrypted, a new store asks the server, and refuses a key derivation
        // below the standard cost (this test's account is stretched at a test's cost).
        let phone2 = try NoteStore.open(at: root + "/phone2")
        defer { phone2.close() }
        let weaker = await #expect(throws: (any Error).self) {
          try await SyncCommand.execute(
            on: phone2, server: url, user: "eve", password: "a third password")
        }
        #expect("\(weaker.map { "\($0)" } ?? "")".contains("weaker than this device accepts"))

        // A password change re-keys by default, and prints a new recovery key, which recovers
        // the account; the one before does not. The laptop, which kept only its keys, is told
        // to sign in; signed in with the password, it reads the notes again.
        let rekeyed = try await ChangePassword.execute(
          server: url, user: "eve", current: "a third password", new: "a fourth password",
          encryption: .testing)
        let newLine = try #require(
          rekeyed.text.split(separator: "\n").first { $0.hasPrefix("new recovery key: ") })
        let newRecoveryKey = String(newLine.dropFirst("new recovery key: ".count))
        #expect(newRecoveryKey.count == 69 && newRecoveryKey != recoveryKey)
        #expect(try rekeyed.jsonText().contains(newRecoveryKey))
        let stale = await #expect(throws: (any Error).self) {
          try await SyncCommand.execute(
            on: laptop, server: url, user: "eve", password: nil, cost: .testing)
        }
        #expect(
          "\(stale.map { "\($0)" } ?? "")".contains("sign in"), "\(String(describing: stale))")
        _ = try await SyncCommand.execute(
          on: laptop, server: url, user: "eve", password: "a fourth password",
          encryption: .testing)
        #expect(try laptop.note(note)?.isArchived == true)
        await #expect(throws: (any Error).self) {
          try await RecoverAccount.execute(
            server: url, user: "eve", recoveryKey: recoveryKey, new: "a fifth password",
            cost: .testing)
        }
        _ = try await RecoverAccount.execute(
          server: url, user: "eve", recoveryKey: newRecoveryKey, new: "a fifth password",
          cost: .testing)
      }
    }
  }

  @Test("two stores sync through a live server; status says they are in sync")
  func syncAndStatus() async throws {
    try await withTemporaryDirectory { root in
      try await withTestServer(root) { url in
        let created = try await CreateAccount.execute(
          server: url, user: "Ann", password: "correct horse battery", cost: .testing)
        #expect(created.text == "created account 'ann' on \(url)")
        let phone = try NoteStore.open(at: root + "/phone")
        let laptop = try NoteStore.open(at: root + "/laptop")
        defer {
          phone.close()
          laptop.close()
        }
        let before = try Status().execute(on: phone).text
        #expect(before.contains("account: none"))
        try await phone.write { $0.createNote(text: "from the phone") }
        try await laptop.write { $0.createNote(text: "from the laptop") }
        let first = try await SyncCommand.execute(
          on: phone, server: url, user: "ann", password: "correct horse battery", cost: .testing)
        #expect(first.text.contains("pushed 2 events"))
        let second = try await SyncCommand.execute(
          on: laptop, server: url, user: "ann", password: "correct horse battery", cost: .testing)
        #expect(second.text.contains("pushed 2 events, pulled 2 (2 new)"))
        #expect(second.text.contains("in sync"))
        _ = try await SyncCommand.execute(
          on: phone, server: url, user: "ann", password: "correct horse battery", cost: .testing)
        #expect(try phone.eventSetDigest() == laptop.eventSetDigest())
        let status = try Status().execute(on: phone)
        #expect(status.text.contains("account: ann on \(url)"))
        #expect(status.text.contains("outbox: 0 events"))
        #expect(status.text.contains("— in sync"))
        let json = try status.jsonText()
        #expect(json.contains("\"inSync\" : true"))
        #expect(json.contains("\"cursor\" : 4"))

        await #expect(throws: APIError.self) {
          try await SyncCommand.execute(
            on: phone, server: url, user: "ann", password: "wrong password", cost: .testing)
        }

        // The token kept in the store's credentials file (mode 0600, no password in it)
        // syncs without the password.
        let file = phone.path + "/credentials.json"
        let attributes = try FileManager.default.attributesOfItem(atPath: file)
        #expect(attributes[.posixPermissions] as? Int == 0o600)
        #expect(
          !(try String(contentsOfFile: file, encoding: .utf8)).contains("correct horse battery"))
        try await phone.write { $0.createNote(text: "no password needed") }
        let kept = try await SyncCommand.execute(
          on: phone, server: url, user: "ann", password: nil, cost: .testing)
        #expect(kept.text.contains("pushed 2 events"))
        // Without a kept token, it says what to do.
        try FileCredentialStore(path: file).setToken(nil, for: "ann")
        let error = await #expect(throws: CLIError.self) {
          try await SyncCommand.execute(
            on: phone, server: url, user: "ann", password: nil, cost: .testing)
        }
        #expect(error?.description.contains("sign in with the password") == true)
      }
    }
  }

  @Test(
    "vlog sync --check names the notes a store and the server do not share and what the next sync does, syncing nothing; after a sync it says they are in sync"
  )
  func checkNamesTheDifference() async throws {
    try await withTemporaryDirectory { root in
      try await withTestServer(root) { url in
        _ = try await CreateAccount.execute(
          server: url, user: "ann", password: "correct horse battery", cost: .testing)
        let phone = try NoteStore.open(at: root + "/phone")
        let laptop = try NoteStore.open(at: root + "/laptop")
        defer {
          phone.close()
          laptop.close()
        }
        for store in [phone, laptop] {
          _ = try await SyncCommand.execute(
            on: store, server: url, user: "ann", password: "correct horse battery", cost: .testing)
        }
        let pulled = try await phone.write { $0.createNote(text: "from the phone") }
        _ = try await SyncCommand.execute(
          on: phone, server: url, user: "ann", password: nil, cost: .testing)
        let pending = try await laptop.write { $0.createNote(text: "not pushed yet") }
        let account = try SyncCommand.account(
          for: laptop, server: url, user: "ann", password: nil)
        let before = laptop.path + "/data.mdb"
        let size = try FileManager.default.attributesOfItem(atPath: before)[.size] as? Int
        let (output, inSync) = try await SyncCommand.check(
          on: laptop, account: account, signIn: false)
        #expect(!inSync)
        #expect(output.text.contains("not in sync with \(url): 4 events differ, about 2 notes"))
        #expect(
          output.text.contains(pulled.description) && output.text.contains(pending.description))
        #expect(output.text.contains("pushes it (outbox)") && output.text.contains("fetches it"))
        #expect(output.text.contains("the next sync repairs every difference"))
        let json = try output.jsonText()
        #expect(json.contains("\"nextSyncRepairs\" : true") && json.contains("\"missingOnDevice\""))
        #expect(try laptop.outboxCount() == 2 && (try laptop.note(pulled)) == nil)
        #expect(try FileManager.default.attributesOfItem(atPath: before)[.size] as? Int == size)

        _ = try await SyncCommand.execute(
          on: laptop, server: url, user: "ann", password: nil, cost: .testing)
        let after = try await SyncCommand.check(on: laptop, account: account, signIn: false)
        #expect(after.inSync && after.output.text.hasPrefix("in sync with \(url)"))
        #expect(throws: (any Error).self) { try SyncCommand.parse(["--check", "--watch"]) }
      }
    }
  }

  @Test("vlog account sessions, password and delete: each says what it did and leaves no session")
  func accountLifecycle() async throws {
    try await withTemporaryDirectory { root in
      try await withTestServer(root) { url in
        _ = try await CreateAccount.execute(
          server: url, user: "ann", password: "correct horse battery", cost: .testing)
        let phone = try NoteStore.open(at: root + "/phone")
        defer { phone.close() }
        try await phone.write { $0.createNote(text: "on the phone") }
        _ = try await SyncCommand.execute(
          on: phone, server: url, user: "ann", password: "correct horse battery", cost: .testing)

        // The phone's session is listed; the command's own is not, and ends with it.
        let listed = try await SessionsCommand.execute(
          server: url, user: "ann", password: "correct horse battery", cost: .testing)
        let sessions = listed.text.split(separator: "\n")
        #expect(sessions.count == 1 && listed.text.contains("expires"))
        let id = String(try #require(sessions.first?.prefix(16)))
        let revoked = try await SessionsCommand.execute(
          server: url, user: "ann", password: "correct horse battery", revoke: id, cost: .testing)
        #expect(revoked.text == "signed out session \(id)")
        let none = try await SessionsCommand.execute(
          server: url, user: "ann", password: "correct horse battery", cost: .testing)
        #expect(none.text == "no sessions of 'ann' on \(url)")

        await #expect(throws: APIError.self) {
          try await ChangePassword.execute(
            server: url, user: "ann", current: "wrong password", new: "a new mauve ladder",
            cost: .testing)
        }
        let changed = try await ChangePassword.execute(
          server: url, user: "ann", current: "correct horse battery", new: "a new mauve ladder",
          cost: .testing)
        #expect(changed.text.contains("changed the password of 'ann'"))
        await #expect(throws: APIError.self) {
          try await SessionsCommand.execute(
            server: url, user: "ann", password: "correct horse battery", cost: .testing)
        }

        let deleted = try await DeleteAccount.execute(
          server: url, user: "ann", password: "a new mauve ladder", cost: .testing)
        #expect(deleted.text == "deleted account 'ann' and everything of it on \(url)")
        // A name no account has: the server's answer names the standard cost, which a device
        // at the tests' cost refuses before it signs in.
        await #expect(throws: (any Error).self) {
          try await SessionsCommand.execute(
            server: url, user: "ann", password: "a new mauve ladder", cost: .testing)
        }
        // The name is free again.
        _ = try await CreateAccount.execute(
          server: url, user: "ann", password: "correct horse battery", cost: .testing)
      }
    }
  }

  @Test(
    "a store synced as ann refuses bob before sending anything; a failed sign-in writes nothing; vlog erase starts over"
  )
  func storeBelongsToItsAccount() async throws {
    try await withTemporaryDirectory { root in
      try await withTestServer(root) { url in
        _ = try await CreateAccount.execute(
          server: url, user: "ann", password: "correct horse battery", cost: .testing)
        _ = try await CreateAccount.execute(
          server: url, user: "bob", password: "battery staple orchid", cost: .testing)

        // A failed first sign-in leaves no trace: no state, no token file, no account.
        let fresh = try NoteStore.open(at: root + "/fresh")
        try await fresh.write { $0.createNote(text: "never synced") }
        await #expect(throws: APIError.self) {
          try await SyncCommand.execute(
            on: fresh, server: url, user: "ann", password: "wrong password", cost: .testing)
        }
        #expect(!FileManager.default.fileExists(atPath: fresh.path + "/sync-state.json"))
        #expect(!FileManager.default.fileExists(atPath: fresh.path + "/credentials.json"))
        #expect(try fresh.account() == nil)
        #expect(try Status().execute(on: fresh).text.contains("account: none"))
        fresh.close()

        let phone = try NoteStore.open(at: root + "/phone")
        try await phone.write { $0.createNote(text: "ann's secret note") }
        _ = try await SyncCommand.execute(
          on: phone, server: url, user: "ann", password: "correct horse battery", cost: .testing)
        #expect(try phone.account() == AccountBinding(server: url, username: "ann"))
        let stateBefore = try Data(
          contentsOf: URL(fileURLWithPath: phone.path + "/sync-state.json"))

        // Bob, or ann on another server, is refused, with what to do; nothing is written.
        for (server, user, password) in [
          (url, "bob", "battery staple orchid"), (url + "/", "BOB", "battery staple orchid"),
          ("http://127.0.0.1:1", "ann", "correct horse battery"),
        ] {
          let refused = await #expect(throws: CLIError.self) {
            try await SyncCommand.execute(
              on: phone, server: server, user: user, password: password, cost: .testing)
          }
          let message = refused?.description ?? ""
          #expect(message.contains("belongs to 'ann' on \(url)"), "\(message)")
          #expect(message.contains("vlog erase --store"), "\(message)")
        }
        #expect(
          try Data(contentsOf: URL(fileURLWithPath: phone.path + "/sync-state.json")) == stateBefore
        )
        // Bob's account holds nothing of ann's.
        let bobsStore = try NoteStore.open(at: root + "/bob")
        let bobs = try await SyncCommand.execute(
          on: bobsStore, server: url, user: "bob", password: "battery staple orchid", cost: .testing
        )
        #expect(bobs.text.contains("pulled 0 (0 new)"))
        bobsStore.close()
        // The same account and server, spelled differently, is the same.
        let again = try await SyncCommand.execute(
          on: phone, server: url + "/", user: "Ann", password: "correct horse battery",
          cost: .testing)
        #expect(again.text.contains("in sync"))
        let path = phone.path
        phone.close()

        // Erasing needs --yes, and says what is lost; then the directory syncs as bob.
        let erase = try Erase.parse(["--store", path])
        let unconfirmed = #expect(throws: CLIError.self) { try erase.run() }
        #expect(unconfirmed?.description.contains("1 notes") == true)
        #expect(unconfirmed?.description.contains("--yes") == true)
        let kept = try NoteStore.open(at: path)
        #expect(try kept.noteCount() == 1)
        kept.close()
        try Erase.parse(["--store", path, "--yes"]).run()
        #expect(!FileManager.default.fileExists(atPath: path + "/sync-state.json"))
        let restarted = try NoteStore.open(at: path)
        defer { restarted.close() }
        #expect(try restarted.noteCount() == 0 && restarted.account() == nil)
        let asBob = try await SyncCommand.execute(
          on: restarted, server: url, user: "bob", password: "battery staple orchid", cost: .testing
        )
        #expect(asBob.text.contains("pushed 0 events, pulled 0"))
      }
    }
  }

  @Test("vlog account delete without --yes refuses and says why")
  func deleteNeedsConfirmation() {
    let arguments = ["account", "delete", "--server", "http://127.0.0.1:1", "--user", "Ann"]
    let error = #expect(throws: (any Error).self) { try VLogCommand.parseAsRoot(arguments) }
    let message = error.map { VLogCommand.message(for: $0) } ?? ""
    #expect(message.contains("every note of 'ann'") && message.contains("--yes"))
    #expect(throws: Never.self) { try VLogCommand.parseAsRoot(arguments + ["--yes"]) }
  }

  @Test(
    "a store whose clock is a day ahead: the sync restamps its changes by the server's clock and says so, status shows the skew, and a later change says how it is stamped"
  )
  func clockAhead() async throws {
    try await withTemporaryDirectory { root in
      try await withTestServer(root) { url in
        _ = try await CreateAccount.execute(
          server: url, user: "ann", password: "correct horse battery", cost: .testing)
        let clock = ManualClock(start: Date().addingTimeInterval(86400))
        let store = try NoteStore.open(
          at: root + "/ahead", options: .init(dependencies: .testing(clock: clock, seed: 1)))
        defer { store.close() }
        try await store.write { $0.createNote(text: "tomorrow") }
        let synced = try await SyncCommand.execute(
          on: store, server: url, user: "ann", password: "correct horse battery", cost: .testing)
        #expect(synced.text.contains("restamped: the server refused 2 outbox events"))
        #expect(synced.text.contains("— in sync"))
        let after = try Status().execute(on: store).text
        #expect(after.contains("clock: this device is 24 h ahead of the server — WARNING"))
        #expect(after.contains("restamped: the server refused 2 outbox events stamped up to "))
        #expect(!after.contains("last error"))
        #expect(after.contains(" in sync"))
        // A later change is stamped by the server's clock, and says so.
        let added = try run(AddNote.self, ["after the sync"], on: store).text
        #expect(
          added.contains("clock: this device's clock is 24 h ahead of the server's"), "\(added)")
        let resynced = try await SyncCommand.execute(
          on: store, server: url, user: "ann", password: "correct horse battery", cost: .testing)
        #expect(!resynced.text.contains("restamped") && resynced.text.contains("— in sync"))
        // In JSON, when they were restamped is a date as every date the tool writes: ISO 8601.
        let json = try Status().execute(on: store).jsonText()
        let object = try #require(
          try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
        let restamped = try #require(
          (object["sync"] as? [String: Any])?["restamped"] as? [String: Any]
            ?? object["restamped"] as? [String: Any], "\(json)")
        let date = try #require(restamped["date"] as? String, "\(restamped)")
        #expect(ISO8601.parse(date) != nil, "\(date)")
      }
    }
  }
}

@Suite("vlog serve, the built binary")
struct ServeBinaryTests {
  @Test("a second serve of a directory another server serves: refused in one line, exit status 1")
  func directoryInUse() async throws {
    try await withTemporaryDirectory { root in
      let server = try SyncServer.open(dataDirectory: root + "/data")
      defer { server.close() }
      try await server.serving { _ in
        let (status, _, errors) = try await BinaryTests().vlog([
          "serve", "--data", root + "/data", "--port", "0", "--log-level", "error",
        ])
        #expect(status == 1)
        #expect(
          errors == "vlog: error: another server is serving '\(root)/data'; stop it, or serve "
            + "another directory\n")
      }
      // Once it stopped, the directory can be served again.
      try await server.serving { _ in }
    }
  }

  @Test("serve on a port in use: one line that says so, exit status 1")
  func portInUse() async throws {
    try await withTemporaryDirectory { root in
      let server = try SyncServer.open(dataDirectory: root + "/first")
      defer { server.close() }
      try await server.serving { port in
        let (status, output, errors) = try await BinaryTests().vlog([
          "serve", "--data", root + "/second", "--port", String(port), "--log-level", "error",
        ])
        #expect(status == 1)
        #expect(output.isEmpty)
        #expect(
          errors == "vlog: error: cannot listen on 127.0.0.1:\(port): another process is using "
            + "the address; stop it, or choose another port\n")
      }
    }
  }

  @Test(
    "sync --watch holds the live channel, prints another device's push as it arrives, and ends at SIGINT"
  )
  func watch() async throws {
    try await withTemporaryDirectory { root in
      let binary = try #require(BinaryTests.binary())
      let server = try ChildProcess(
        binary.path,
        [
          "serve", "--data", root + "/server", "--port", "0", "--log-level", "warning",
          "--password-cost", "10",
        ])
      defer {
        server.send(SIGINT)
        server.wait()
      }
      let banner = await offPool { server.readLine() }
      let url = try #require(banner.split(separator: " ").last).trimmingCharacters(
        in: .whitespacesAndNewlines)
      let vlog = BinaryTests()
      let password = ["VLOG_PASSWORD": "correct horse battery"]
      #expect(
        try await vlog.vlog(
          ["account", "create", "--server", url, "--user", "ann"], environment: password
        ).0 == 0)
      let watcher = try ChildProcess(
        binary.path,
        ["sync", "--store", root + "/watcher", "--server", url, "--user", "ann", "--watch"],
        environment: password)
      /// The watcher's lines up to the first that contains `text` (all of them if none does).
      func lines(until text: String) async -> [String] {
        var lines: [String] = []
        while lines.count < 50 {
          let line = await offPool { watcher.readLine() }
          guard !line.isEmpty else { break }
          lines.append(line)
          if line.contains(text) { break }
        }
        return lines
      }
      let opening = await lines(until: "live channel open")
      #expect(opening.first?.contains("synced with \(url) as ann") == true, "\(opening)")
      #expect(opening.last?.contains("live channel open") == true, "\(opening)")

      let laptop = root + "/laptop"
      #expect(try await vlog.vlog(["note", "add", "from the laptop", "--store", laptop]).0 == 0)
      #expect(
        try await vlog.vlog(
          ["sync", "--store", laptop, "--server", url, "--user", "ann"], environment: password
        ).0 == 0)
      let pulled = await lines(until: "from the laptop")
      #expect(pulled.contains { $0.contains("pulled") && $0.contains(": 1 new") }, "\(pulled)")
      #expect(pulled.last?.contains("from the laptop") == true, "\(pulled)")

      watcher.send(SIGINT)
      let (status, _, errors) = await offPool { watcher.finish() }
      #expect(status == 0, "\(errors)")
    }
  }

  @Test("serve, account create, sync and status between processes; no password argument")
  func serveAndSync() async throws {
    try await withTemporaryDirectory { root in
      let binary = try #require(BinaryTests.binary())
      let server = try ChildProcess(
        binary.path,
        [
          "serve", "--data", root + "/server", "--port", "0", "--log-level", "warning",
          "--password-cost", "10",
        ])
      defer {
        server.send(SIGINT)
        server.wait()
      }
      let banner = server.readLine()
      let url = try #require(banner.split(separator: " ").last).trimmingCharacters(
        in: .whitespacesAndNewlines)
      #expect(url.hasPrefix("http://127.0.0.1:"))

      let vlog = BinaryTests()
      let password = ["VLOG_PASSWORD": "correct horse battery"]
      let (created, createdText, _) = try await vlog.vlog(
        ["account", "create", "--server", url, "--user", "ann"], environment: password)
      #expect(created == 0)
      #expect(createdText == "created account 'ann' on \(url)\n")

      let store = root + "/store"
      #expect(try await vlog.vlog(["note", "add", "hello", "--store", store]).0 == 0)
      let (synced, syncText, syncErrors) = try await vlog.vlog(
        ["sync", "--store", store, "--server", url, "--user", "ann"], environment: password)
      #expect(synced == 0, "\(syncErrors)")
      #expect(syncText.contains("in sync"))
      // The server and user are remembered.
      #expect(try await vlog.vlog(["sync", "--store", store], environment: password).0 == 0)
      let (_, status, _) = try await vlog.vlog(["status", "--store", store])
      #expect(status.contains("account: ann on \(url)"))
      #expect(status.contains("— in sync"))

      // Events brought in by import never were in the outbox: the sync finds and pushes them.
      let other = root + "/other"
      #expect(try await vlog.vlog(["note", "add", "imported one", "--store", other]).0 == 0)
      #expect(try await vlog.vlog(["note", "add", "imported two", "--store", other]).0 == 0)
      #expect(
        try await vlog.vlog(["export", "--store", other, "-o", root + "/other.jsonl"]).0 == 0)
      #expect(try await vlog.vlog(["import", root + "/other.jsonl", "--store", store]).0 == 0)
      let (repaired, repairText, repairErrors) = try await vlog.vlog(
        ["sync", "--store", store], environment: password)
      #expect(repaired == 0, "\(repairErrors)")
      #expect(repairText.contains("pushed 4 events the server lacked"), "\(repairText)")
      #expect(repairText.contains("— in sync"), "\(repairText)")

      let (wrong, _, wrongError) = try await vlog.vlog(
        ["sync", "--store", store], environment: ["VLOG_PASSWORD": "wrong password"])
      #expect(wrong == 1)
      #expect(wrongError == "vlog: error: the user name or the password is wrong (HTTP 401)\n")
      // A first sync that fails leaves nothing on disk: no store, no directory.
      let fresh = root + "/fresh"
      let (failed, _, _) = try await vlog.vlog(
        ["sync", "--store", fresh, "--server", url, "--user", "ann"],
        environment: ["VLOG_PASSWORD": "wrong password"])
      #expect(failed == 1)
      #expect(!FileManager.default.fileExists(atPath: fresh))
      // Nor does a store go beside files that are not a store's.
      let papers = root + "/papers"
      try FileManager.default.createDirectory(atPath: papers, withIntermediateDirectories: true)
      try Data("thesis".utf8).write(to: URL(fileURLWithPath: papers + "/thesis.txt"))
      let (beside, _, besideError) = try await vlog.vlog(["note", "add", "x", "--store", papers])
      #expect(beside == 1)
      #expect(besideError.contains("holds files but no store (thesis.txt)"), "\(besideError)")
      #expect(try FileManager.default.contentsOfDirectory(atPath: papers) == ["thesis.txt"])
      let (usage, _, _) = try await vlog.vlog(["sync", "--store", store, "--password", "x"])
      #expect(usage == 2)
      let (badURL, _, badURLError) = try await vlog.vlog(
        ["sync", "--store", store, "--server", "ftp://x"], environment: password)
      #expect(badURL == 2)
      #expect(badURLError.contains("--server: 'ftp://x' is not an http:// or https:// URL"))
    }
  }
}
