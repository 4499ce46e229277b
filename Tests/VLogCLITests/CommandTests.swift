import ArgumentParser
import Foundation
import LMDB
import Testing
import VLogServer
import VLogTesting

@testable import VLog
@testable import VLogCLI

/// Parses a command line the way `vlog` does and runs it on `store`, in-process.
func run<C: StoreCommand>(
  _ type: C.Type, _ arguments: [String], on store: NoteStore
) throws -> CommandOutput {
  let command = try type.parse(arguments + ["--store", store.path])
  return try command.execute(on: store)
}

@Suite("vlog commands, in-process")
struct CommandTests {
  @Test("note add, tag, archive and the listings agree")
  func notesAndTags() async throws {
    try await withTemporaryStore { store in
      let added = try run(
        AddNote.self, ["Buy bread", "--tag", "Errands", "--tag", "home"], on: store)
      let id = try #require(NoteID(added.text.replacingOccurrences(of: "created ", with: "")))
      _ = try run(TagNote.self, [id.description, "Paris"], on: store)
      _ = try run(
        AddNote.self, ["Louvre", "--tag", "paris", "--sort-date", "2020-01-01T00:00:00Z"], on: store
      )

      let notes = try run(Notes.self, [], on: store)
      #expect(notes.text.contains("Buy bread"))
      #expect(notes.text.contains("Errands,home,paris"))  // the later naming wins the case
      let tags = try run(Tags.self, ["--json"], on: store)
      let tagRows =
        try JSONSerialization.jsonObject(with: Data(tags.jsonText().utf8)) as? [[String: Any]]
      #expect(tagRows?.map { $0["name"] as? String } == ["Errands", "home", "paris"])
      #expect(tagRows?.last?["notes"] as? Int == 2)

      _ = try run(Archive.self, [id.description], on: store)
      #expect(try run(Notes.self, ["--archived"], on: store).text.contains(id.description))
      #expect(!(try run(Notes.self, [], on: store).text.contains(id.description)))
      _ = try run(UntagNote.self, [id.description, "PARIS"], on: store)
      #expect(try store.note(id)?.tags.map(\.name) == ["Errands", "home"])
      #expect(try run(Notes.self, ["--search", "louvre"], on: store).text.contains("Louvre"))
    }
  }

  @Test(
    "a text edited on two stores offline: note show and conflicts list it, set --resolve-all resolves it"
  )
  func textConflicts() throws {
    try withTemporaryDirectory { root in
      let clock = ManualClock()
      func open(_ name: String, seed: UInt64) throws -> NoteStore {
        try NoteStore.open(
          at: "\(root)/\(name)",
          options: NoteStore.Options(
            durability: .noSync, dependencies: .testing(clock: clock, seed: seed)))
      }
      let phone = try open("phone", seed: 1)
      let laptop = try open("laptop", seed: 2)
      defer {
        phone.close()
        laptop.close()
      }
      func exchange() throws {
        let fromPhone = try phone.events().map(\.event)
        try phone.ingest(try laptop.events().map(\.event))
        try laptop.ingest(fromPhone)
      }
      let added = try run(AddNote.self, ["Shopping: bread"], on: phone)
      let id = try #require(NoteID(added.text.replacingOccurrences(of: "created ", with: "")))
      try exchange()
      clock.advance(by: 1)
      _ = try run(SetText.self, [id.description, "Shopping: bread, milk"], on: phone)
      clock.advance(by: 1)
      _ = try run(SetText.self, [id.description, "Shopping: bread, eggs"], on: laptop)
      #expect(try run(Conflicts.self, [], on: phone).text == "no conflicts")
      try exchange()
      let conflict = try #require(try phone.note(id)?.conflicts.first)
      for store in [phone, laptop] {
        let shown = try run(ShowNote.self, [id.description], on: store).text
        #expect(shown.contains("Shopping: bread, eggs"))
        #expect(shown.contains("1 conflicting text"))
        #expect(shown.contains("conflict \(conflict.stamp.hex)"))
        #expect(shown.contains("Shopping: bread, milk"))
        let listed = try run(Conflicts.self, ["--json"], on: store)
        let rows =
          try JSONSerialization.jsonObject(with: Data(listed.jsonText().utf8)) as? [[String: Any]]
        #expect(rows?.count == 1)
        let conflicts = rows?.first?["conflicts"] as? [[String: Any]]
        #expect(conflicts?.first?["id"] as? String == conflict.stamp.hex)
        #expect(conflicts?.first?["text"] as? String == "Shopping: bread, milk")
        // The list marks the note.
        #expect(try run(Notes.self, [], on: store).text.contains("[1 conflict] Shopping: bread"))
      }
      // A conflict id the note does not have is refused and changes nothing.
      let events = try laptop.events().count
      #expect(throws: CLIError.self) {
        try run(
          SetText.self, [id.description, "x", "--resolve", String(repeating: "0", count: 48)],
          on: laptop)
      }
      #expect(throws: (any Error).self) {
        try run(SetText.self, [id.description, "x", "--resolve", "nope"], on: laptop)
      }
      #expect(try laptop.events().count == events)
      clock.advance(by: 1)
      _ = try run(
        SetText.self, [id.description, "Shopping: bread, eggs, milk", "--resolve-all"], on: laptop)
      try exchange()
      for store in [phone, laptop] {
        #expect(try run(Conflicts.self, [], on: store).text == "no conflicts")
        #expect(try store.note(id)?.text == "Shopping: bread, eggs, milk")
        #expect(try !run(Notes.self, [], on: store).text.contains("conflict"))
      }
      let history = try run(History.self, [id.description], on: phone).text
      #expect(history.contains("won text"))
    }
  }

  @Test("log lists every event with its kind, and filters by note and range")
  func log() async throws {
    try await withTemporaryStore { store in
      let first = try store.write { $0.createNote(text: "one") }
      try store.write { $0.createNote(text: "two") }
      let all = try run(Log.self, ["--json"], on: store)
      let rows =
        try JSONSerialization.jsonObject(with: Data(all.jsonText().utf8)) as? [[String: Any]]
      #expect(rows?.count == 4)
      #expect(
        rows?.map { $0["kind"] as? String } == ["noteCreated", "textSet", "noteCreated", "textSet"])
      let forNote = try run(Log.self, ["--note", first.description], on: store)
      #expect(forNote.text.split(separator: "\n").count == 3)  // header and two events
      let range = try run(Log.self, ["--from", "2", "--to", "3"], on: store)
      #expect(range.text.split(separator: "\n").count == 3)
    }
  }

  @Test("rebuild leaves the state digest unchanged and stats report it")
  func rebuildAndStats() async throws {
    try await withTemporaryStore { store in
      try store.write { changes in
        for index in 0..<20 { changes.createNote(text: "note \(index)", tags: ["t\(index % 3)"]) }
      }
      let before = try store.stateDigest()
      let rebuilt = try run(Rebuild.self, ["--json"], on: store)
      #expect(rebuilt.text.contains("unchanged"))
      #expect(try store.stateDigest() == before)
      let stats = try run(Stats.self, [], on: store)
      #expect(stats.text.contains("notes           20"))
      #expect(stats.text.contains(before.description))
    }
  }

  @Test("note versions lists every text with its state; note restore brings one back and undoes")
  func versionsAndRestore() async throws {
    try await withTemporaryStore { store in
      let added = try run(AddNote.self, ["first draft"], on: store)
      let id = try #require(NoteID(added.text.replacingOccurrences(of: "created ", with: "")))
      _ = try run(SetText.self, [id.description, "second draft"], on: store)
      let listed = try run(NoteVersions.self, [id.description, "--json"], on: store)
      let rows =
        try JSONSerialization.jsonObject(with: Data(listed.jsonText().utf8)) as? [[String: Any]]
      #expect(rows?.map { $0["state"] as? String } == ["replaced", "shown"])
      #expect(rows?.map { $0["text"] as? String } == ["first draft", "second draft"])
      let first = try #require(rows?.first?["version"] as? String)
      #expect(try run(NoteVersions.self, [id.description], on: store).text.contains(first))
      _ = try run(RestoreVersion.self, [id.description, first], on: store)
      #expect(try store.note(id)?.text == "first draft")
      #expect(try store.versions(of: id).map(\.state) == [.replaced, .replaced, .shown])
      #expect(throws: (any Error).self) {
        try RestoreVersion.parse([id.description, "not-a-version", "--store", store.path])
      }
      let missing = String(repeating: "0", count: 48)
      let error = #expect(throws: VLogError.self) {
        try run(RestoreVersion.self, [id.description, missing], on: store)
      }
      #expect(error?.code == .versionNotFound)
      #expect(try store.note(id)?.text == "first draft", "a refused restore changes nothing")
    }
  }

  @Test("notes marks the notes with changes the server has not stored; status lists them")
  func pendingNotes() async throws {
    try await withTemporaryStore { store in
      let added = try run(AddNote.self, ["unsent"], on: store)
      let id = try #require(NoteID(added.text.replacingOccurrences(of: "created ", with: "")))
      #expect(try run(Notes.self, [], on: store).text.contains("* \(id)"))
      let rows =
        try JSONSerialization.jsonObject(
          with: Data(try run(Notes.self, ["--json"], on: store).jsonText().utf8))
        as? [[String: Any]]
      #expect(rows?.first?["pending"] as? Bool == true)
      #expect(try run(Status.self, [], on: store).text.contains("pending: 1 note"))
      #expect(try run(Status.self, [], on: store).text.contains("  \(id)"))
      try store.acknowledge(through: try #require(try store.outbox().last).sequence)
      #expect(!(try run(Notes.self, [], on: store).text.contains("* \(id)")))
      #expect(!(try run(Status.self, [], on: store).text.contains("pending:")))
    }
  }

  @Test("malformed arguments are usage errors, named in the message")
  func usageErrors() {
    #expect(throws: (any Error).self) {
      try SetText.parse(["not-an-id", "text", "--store", "/tmp/x"])
    }
    #expect(throws: (any Error).self) { try AddNote.parse(["x", "--sort-date", "yesterday"]) }
    #expect(throws: (any Error).self) { try Notes.parse(["--archived", "--tag", "x"]) }
    do {
      _ = try AddNote.parse(["x", "--sort-date", "yesterday"])
    } catch {
      #expect(VLogCommand.exitCode(for: error) == .validationFailure)
      #expect(
        VLogCommand.fullMessage(for: error).contains("--sort-date: 'yesterday' is not a date"))
    }
  }
}

@Suite("vlog, the built binary")
struct BinaryTests {
  /// The built `vlog`, next to the test bundle.
  static func binary() -> URL? {
    let directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    return [directory, directory.deletingLastPathComponent()].map {
      $0.appendingPathComponent("vlog")
    }.first { FileManager.default.isExecutableFile(atPath: $0.path) }
  }

  /// Runs the built `vlog` with `arguments`; returns its exit status, output and errors.
  func vlog(_ arguments: [String], environment: [String: String] = [:]) async throws -> (
    Int32, String, String
  ) {
    let binary = try #require(Self.binary())
    return try await ChildProcess.runOffPool(binary.path, arguments, environment: environment)
  }

  @Test(
    "A store this user cannot write (another user's, or on read-only media): every read works, search too, and a write says why and changes nothing"
  )
  func readOnlyStore() async throws {
    try await withTemporaryDirectory { root in
      let files = FileManager.default
      let store = root + "/store"
      let opened = try NoteStore.open(at: store)
      try await opened.write { changes in
        for index in 0..<20 { changes.createNote(text: "note \(index)") }
        changes.createNote(text: "hello searchable world")
      }
      opened.close()
      let binary = root + "/vlog"
      try files.copyItem(atPath: try #require(Self.binary()).path, toPath: binary)
      // Another user's store: as root every file is writable, so it is read as nobody.
      try files.setAttributes([.posixPermissions: 0o755], ofItemAtPath: root)
      for file in ["", "/data.mdb", "/lock.mdb", "/open.lock"] {
        try files.setAttributes(
          [.posixPermissions: file.isEmpty ? 0o555 : 0o444], ofItemAtPath: store + file)
      }
      defer { try? files.setAttributes([.posixPermissions: 0o755], ofItemAtPath: store) }
      let before = try Data(contentsOf: URL(fileURLWithPath: store + "/data.mdb"))
      func vlog(_ arguments: [String]) async throws -> (Int32, String, String) {
        getuid() == 0
          ? try await ChildProcess.runOffPool(
            "/usr/sbin/runuser", ["-u", "nobody", "--", binary] + arguments)
          : try await ChildProcess.runOffPool(binary, arguments)
      }
      let (found, output, errors) = try await vlog(["notes", "--search", "hello", "--store", store])
      #expect(found == 0, "\(errors)")
      #expect(output.contains("hello searchable world") && !output.contains("note 1"), "\(output)")
      let (listed, list, _) = try await vlog(["notes", "--store", store])
      #expect(listed == 0 && list.contains("note 19"))
      let (added, _, refusal) = try await vlog(["note", "add", "more", "--store", store])
      #expect(added == 1)
      #expect(
        refusal.contains("the store at '\(store)' is not writable by this user"), "\(refusal)")
      #expect(try Data(contentsOf: URL(fileURLWithPath: store + "/data.mdb")) == before)
    }
  }

  @Test(
    "A note's text from a file or standard input, past what an argument holds; a file that is not UTF-8 is refused and writes nothing"
  )
  func textFromFile() async throws {
    try await withTemporaryDirectory { root in
      let binary = try #require(Self.binary())
      let store = root + "/store"
      let line = "A line of a long paper, written over months.\n"
      let paper = String(repeating: line, count: 600_000 / line.utf8.count)
      try paper.write(toFile: root + "/paper.txt", atomically: true, encoding: .utf8)
      let (added, output, errors) = try await vlog([
        "note", "add", "--file", root + "/paper.txt", "--store", store, "--json",
      ])
      #expect(added == 0, "\(errors)")
      let id = try #require(
        (try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any])?["id"]
          as? String)
      let revised = paper + "The last line, typed today.\n"
      try revised.write(toFile: root + "/revised.txt", atomically: true, encoding: .utf8)
      let (set, _, setErrors) = try await ChildProcess.runOffPool(
        "/bin/sh",
        [
          "-c", "\"$0\" note set \"$1\" --file - --store \"$2\" < \"$3\"", binary.path, id, store,
          root + "/revised.txt",
        ])
      #expect(set == 0, "\(setErrors)")
      try Data([0x63, 0x61, 0x66, 0xE9]).write(to: URL(fileURLWithPath: root + "/latin1.txt"))
      let (refused, _, refusal) = try await vlog([
        "note", "set", id, "--file", root + "/latin1.txt", "--store", store,
      ])
      #expect(refused == 1 && refusal.contains("is not UTF-8 text"), "\(refusal)")
      let (both, _, bothErrors) = try await vlog([
        "note", "add", "x", "--file", "-", "--store", store,
      ])
      #expect(both == 2 && bothErrors.contains("not both"), "\(bothErrors)")
      let opened = try NoteStore.open(at: store)
      defer { opened.close() }
      #expect(try opened.note(try #require(NoteID(id)))?.text == revised)
      #expect(try opened.noteCount() == 1)
    }
  }

  @Test(
    "An argument whose bytes are not UTF-8 is refused, by position and with its bytes shown, and so are ten thousand tags, at once; nothing is written"
  )
  func invalidUTF8() async throws {
    try await withTemporaryDirectory { root in
      let binary = try #require(Self.binary())
      let store = root + "/store"
      // Through a shell: Swift's strings cannot carry the byte 0xE9 alone.
      let (status, _, errors) = try await ChildProcess.runOffPool(
        "/bin/sh",
        [
          "-c", "\"$0\" note add x --tag \"$(printf 'caf\\351')\" --store \"$1\"", binary.path,
          store,
        ])
      #expect(status == 2, "\(errors)")
      #expect(errors.contains("argument 5 ('caf\\xe9') is not valid UTF-8"), "\(errors)")
      #expect(!FileManager.default.fileExists(atPath: store))
      // Ten thousand tags are refused at once, not after minutes of parsing.
      let tags = (0..<10_000).flatMap { ["--tag", "t\($0)"] }
      let (many, _, manyErrors) = try await vlog(["note", "add", "x", "--store", store] + tags)
      #expect(many == 2)
      #expect(manyErrors.contains("20005 arguments; vlog takes at most 264"), "\(manyErrors)")
      #expect(!FileManager.default.fileExists(atPath: store))
    }
  }

  @Test(
    "papercuts: deleted notes named as deleted, JSON booleans, negative limits, directories, subcommands, refused connections"
  )
  func papercuts() async throws {
    try await withTemporaryDirectory { root in
      let store = root + "/store"
      let (_, added, _) = try await vlog(["note", "add", "x", "--store", store, "--json"])
      let id = try #require(
        (try JSONSerialization.jsonObject(with: Data(added.utf8)) as? [String: Any])?["id"]
          as? String)
      let (_, removed, _) = try await vlog(["note", "rm", id, "--store", store, "--json"])
      #expect(removed.contains("\"deleted\" : true"))
      for verb in ["tag", "untag", "set"] {
        let (status, _, error) = try await vlog(["note", verb, id, "t", "--store", store])
        #expect(status == 1)
        #expect(error == "vlog: error: note \(id) was deleted; deletes are final\n", "\(verb)")
      }
      let (limitStatus, _, limit) = try await vlog(["notes", "--limit", "-1", "--store", store])
      #expect(limitStatus == 2)
      #expect(limit.contains("--limit must be positive"))
      let (directoryStatus, _, directory) = try await vlog(["import", root, "--store", store])
      #expect(directoryStatus == 1)
      #expect(
        directory
          == "vlog: error: cannot read '\(root)': it is a directory, not a JSON Lines file\n")
      let (noteStatus, _, note) = try await vlog(["note"])
      #expect(noteStatus == 2)
      #expect(note.contains("give a subcommand"))
      let (refusedStatus, _, refused) = try await vlog(
        ["sync", "--server", "http://127.0.0.1:1", "--user", "ann", "--store", store],
        environment: ["VLOG_PASSWORD": "correct horse battery"])
      #expect(refusedStatus == 1)
      #expect(refused.hasSuffix("cannot reach http://127.0.0.1:1: connection refused\n"))
    }
  }

  @Test("verify --data checks a server's data directory")
  func verifyServerData() async throws {
    try await withTemporaryDirectory { root in
      let directory = root + "/server"
      var configuration = SyncServer.Configuration()
      configuration.passwordCost = .testing
      try SyncServer.open(dataDirectory: directory, configuration: configuration).close()
      let (status, output, _) = try await vlog(["verify", "--data", directory])
      #expect(status == 0)
      #expect(output == "ok: 0 events in 0 accounts; checksums and indexes verified\n")
      let (missingStatus, _, missing) = try await vlog(["verify", "--data", root + "/nothing"])
      #expect(missingStatus == 1)
      #expect(missing.contains("no server data at"))
    }
  }

  @Test("end to end: exit statuses 0, 1 and 2, one-line errors, VLOG_STORE")
  func endToEnd() async throws {
    try await withTemporaryDirectory { root in
      let store = root + "/store"
      let (missingStatus, _, missing) = try await vlog(["notes", "--store", store])
      #expect(missingStatus == 1)
      #expect(
        missing
          == "vlog: error: no store at '\(store)'; create one with 'vlog note add' or check the path\n"
      )

      let (addStatus, added, _) = try await vlog(["note", "add", "hello", "--store", store])
      #expect(addStatus == 0)
      #expect(added.hasPrefix("created "))

      let (listStatus, listed, _) = try await vlog(
        ["notes", "--json"], environment: ["VLOG_STORE": store])
      #expect(listStatus == 0)
      #expect(listed.contains("\"text\" : \"hello\""))

      let (unknownStatus, _, unknown) = try await vlog(
        ["note", "rm", "1b4e28ba-2fa1-11d2-883f-0016d3cca427", "--store", store])
      #expect(unknownStatus == 1)
      #expect(unknown.split(separator: "\n").count == 1)
      #expect(unknown.contains("there is no note"))

      let (usageStatus, _, usage) = try await vlog(["notes", "--bogus", "--store", store])
      #expect(usageStatus == 2)
      #expect(usage.contains("Unknown option '--bogus'"))

      let (versionStatus, version, _) = try await vlog(["--version"])
      #expect(versionStatus == 0)
      #expect(version == "0.1.0\n")
    }
  }

  @Test("verify exits 0 on a healthy store and 1, naming the fault, after corruption")
  func verifyExitStatus() async throws {
    try await withTemporaryDirectory { root in
      let path = root + "/store"
      let (_, added, _) = try await vlog(["note", "add", "keep me", "--store", path])
      let id = try #require(
        NoteID(
          added.replacingOccurrences(of: "created ", with: "").trimmingCharacters(
            in: .whitespacesAndNewlines)))
      let (healthyStatus, healthy, _) = try await vlog(["verify", "--store", path])
      #expect(healthyStatus == 0)
      #expect(healthy.hasPrefix("ok: 2 events"))

      let store = try NoteStore.open(at: path)
      try store.environment.write { transaction in
        var record = try #require(try store.schema.noteRecord(id, in: transaction))
        record.archived = true
        try transaction.put(record.encoded(), forKey: id.identifier.bytes, in: store.schema.notes)
      }
      store.close()

      let (status, output, _) = try await vlog(["verify", "--store", path])
      #expect(status == 1)
      #expect(output.contains("fault: projection: notes: note \(id) differs from a fresh replay"))
    }
  }

  @Test("a malformed import line exits 1 naming the line and field, and changes nothing")
  func importExitStatus() async throws {
    try await withTemporaryDirectory { root in
      let path = root + "/store"
      _ = try await vlog(["note", "add", "before", "--store", path])
      let file = root + "/bad.jsonl"
      try
        #"{"time":"2026-01-01T00:00:00.000Z","counter":0,"replica":"1b4e28ba-2fa1-11d2-883f-0016d3cca427","kind":"archivedSet","note":"1b4e28ba-2fa1-11d2-883f-0016d3cca427","archived":"yes"}"#
        .write(toFile: file, atomically: true, encoding: .utf8)
      let (_, before, _) = try await vlog(["stats", "--json", "--store", path])
      let (status, _, error) = try await vlog(["import", file, "--store", path])
      #expect(status == 1)
      #expect(
        error == "vlog: error: \(file):1: archived: expected true or false; nothing was imported\n")
      let (_, after, _) = try await vlog(["stats", "--json", "--store", path])
      #expect(after == before)
    }
  }
}

@Suite("vlog demo")
struct DemoTests {
  @Test("the demo's replicas converge and it names the winner of each field")
  func demo() async throws {
    try await withTemporaryDirectory { root in
      let report = try await Demo.perform(in: root)
      #expect(
        report.hasSuffix(
          "Converged: both replicas and the server hold the same events; both replicas the same state."
        ))
      #expect(report.contains("A sync server listens on http://127.0.0.1:"))
      #expect(report.contains("groceries: deleted (deletes are final)"))
      // The trip's text, edited on both offline: the phone's shown, the laptop's kept, then
      // merged by the phone.
      #expect(
        report.contains(
          "kept as a conflict, written without seeing it: \"Paris trip: book the train and the Louvre\""
        )
          || report.contains(
            "kept as a conflict, written without seeing it: \"Paris trip: book the train, pack light\""
          ))
      #expect(report.contains("with 0 conflicts"))
      #expect(report.contains("  text      phone at "))
      #expect(report.contains("  archived  laptop at "))
      // Each tag on its own, by name.
      #expect(report.contains("  tags Summer "), "\(report)")
    }
  }
}

@Suite("vlog serve configuration")
struct ServeConfigurationTests {
  @Test("Each vlog serve option comes from VLOG_<NAME> unless the command line gives it")
  func environment() throws {
    let environment = [
      "VLOG_DATABASE": "postgres://vlog@/vlog?host=/run/pg", "VLOG_PORT": "9090",
      "VLOG_MAX_CONNECTIONS": "64", "VLOG_LOG_LEVEL": "", "VLOG_UNRELATED": "x",
    ]
    let added = Serve.environmentArguments(environment, given: ["serve", "--port", "8081"])
    #expect(
      added.sorted() == ["--database=postgres://vlog@/vlog?host=/run/pg", "--max-connections=64"])
    let serve = try Serve.parse(["--port", "8081"] + added)
    #expect(serve.port == 8081 && serve.maxConnections == 64 && serve.data == nil)
    #expect(serve.database == "postgres://vlog@/vlog?host=/run/pg")
    // A bad value is refused, naming the option.
    let bad = Serve.environmentArguments(["VLOG_PORT": "eighty"], given: ["serve", "--data", "d"])
    #expect(throws: (any Error).self) { try Serve.parse(["--data", "d"] + bad) }
    // Both storages at once is a usage error.
    let both = Serve.environmentArguments(["VLOG_DATA": "/srv/vlog"], given: [])
    #expect(throws: (any Error).self) {
      try Serve.parse(["--database", "postgres://x@/y"] + both)
    }
  }
}
