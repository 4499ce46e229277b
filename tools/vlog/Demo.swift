import ArgumentParser
import Foundation
import Logging
import VLog
import VLogServer
import VLogSync

/// `vlog demo`: a sync server on loopback, two replicas editing the same notes offline, a sync,
/// and the converged notes with the change that won each field.
struct Demo: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    abstract:
      "Start a sync server on loopback; two replicas edit the same notes offline, sync, and converge."
  )

  @Option(name: .long, help: "Keep the stores and the server's data in this directory.")
  var directory: String?

  func run() async throws {
    let root =
      directory
      ?? FileManager.default.temporaryDirectory
      .appendingPathComponent("vlog-demo-\(UUID().uuidString)").path
    defer { if directory == nil { removeQuietly(root) } }
    print(try await Demo.perform(in: root))
  }

  /// Runs the demonstration in `root` and returns its report.
  static func perform(in root: String) async throws -> String {
    var logger = Logger(label: "vlog.demo") { StreamLogHandler.standardError(label: $0) }
    logger.logLevel = .warning
    let server = try SyncServer.open(dataDirectory: root + "/server", logger: logger)
    defer { server.close() }
    return try await server.serving { port in
      try await run(in: root, server: "http://127.0.0.1:\(port)")
    }
  }

  private static func run(in root: String, server: String) async throws -> String {
    let phone = try NoteStore.open(at: root + "/phone")
    let laptop = try NoteStore.open(at: root + "/laptop")
    defer {
      phone.close()
      laptop.close()
    }
    let credentials = Credentials(username: "demo", password: "a demo of quiet ledgers")
    func account(_ store: NoteStore) throws -> SyncAccount {
      try SyncAccount(
        store: store, transport: HTTPTransport(baseURL: server), credentials: credentials,
        stateFile: SyncAccount.stateFile(for: store))
    }
    let phoneAccount = try account(phone)
    let laptopAccount = try account(laptop)
    var report: [String] = []
    func say(_ line: String = "") { report.append(line) }

    say("A sync server listens on \(server); a phone and a laptop each have a VLog store.")
    try await phoneAccount.createAccount()
    say("The phone creates the account 'demo'.")
    let trip = try await phone.write {
      $0.createNote(text: "Paris trip: book the train", tags: ["Travel"])
    }
    let groceries = try await phone.write {
      $0.createNote(text: "Groceries: bread", tags: ["home"])
    }
    let first = try await phoneAccount.sync()
    let pulled = try await laptopAccount.sync()
    say(
      "The phone makes two notes and syncs (\(first.pushed) events pushed); the laptop syncs "
        + "(\(pulled.applied) events pulled).")
    say()
    say("Both go offline and edit the same notes:")
    try await phone.write { edits in
      edits.setText("Paris trip: book the train and the Louvre", of: trip)
      edits.setTags(["Travel", "paris"], of: trip)
    }
    say("  phone:  edits the trip's text, tags it 'paris'")
    try await laptop.write { edits in
      edits.setArchived(true, of: trip)
      edits.setTags(["Travel", "Paris", "Summer"], of: trip)
      edits.setText("Paris trip: book the train, pack light", of: trip)
      edits.setText("Groceries: bread, milk", of: groceries)
    }
    say(
      "  laptop: archives the trip, tags it 'Paris' and 'Summer', edits the trip's text too, "
        + "edits the groceries")
    try await phone.write { $0.deleteNote(groceries) }
    say("  phone:  deletes the groceries note")
    say()
    let laptopSync = try await laptopAccount.sync()
    let phoneSync = try await phoneAccount.sync()
    var laptopAgain = try await laptopAccount.sync()
    say(
      "They come back online and sync through the server: the laptop pushes "
        + "\(laptopSync.pushed) events, the phone pushes \(phoneSync.pushed) and pulls "
        + "\(phoneSync.applied), the laptop pulls \(laptopAgain.applied).")
    say()

    for (name, store) in [("phone", phone), ("laptop", laptop)] {
      say("On the \(name):")
      if let note = try store.note(trip) {
        say("  \(note.id): \"\(note.text)\"")
        say(
          "    archived: \(note.isArchived); tags: \(note.tags.map(\.name).joined(separator: ", "))"
        )
        for conflict in note.conflicts {
          say("    kept as a conflict, written without seeing it: \"\(conflict.text)\"")
        }
      }
      say(
        "  groceries: \(try store.note(groceries) == nil ? "deleted (deletes are final)" : "present")"
      )
    }
    say()
    // The phone's user merges the two texts, which resolves the conflict everywhere.
    let conflicts = try phone.note(trip)?.conflicts.map(\.stamp) ?? []
    try await phone.write {
      $0.setText(
        "Paris trip: book the train and the Louvre, pack light", of: trip, resolving: conflicts)
    }
    _ = try await phoneAccount.sync()
    laptopAgain = try await laptopAccount.sync()
    let merged = try laptop.note(trip)
    say(
      "The phone merges the two texts and syncs; the laptop now shows \"\(merged?.text ?? "")\" "
        + "with \(merged?.conflicts.count ?? 0) conflicts.")
    say()
    say("Which change won each field of the trip (newest stamp per field):")
    let replicaNames = [phone.replicaID: "phone", laptop.replicaID: "laptop"]
    for entry in try phone.history(of: trip) where entry.outcome == .won {
      let stamp = entry.logged.event.stamp
      let field = [entry.field, entry.tag].compactMap { $0 }.joined(separator: " ")
      say(
        "  \(field.padding(toLength: max(9, field.count), withPad: " ", startingAt: 0)) "
          + "\(replicaNames[stamp.replica] ?? "?") at \(stamp.time)")
    }
    let phoneDigests = (try phone.eventSetDigest(), try phone.stateDigest())
    let laptopDigests = (try laptop.eventSetDigest(), try laptop.stateDigest())
    say()
    say(
      "Event sets: phone \(phoneDigests.0), laptop \(laptopDigests.0), "
        + "server \(laptopAgain.serverEventSetDigest)")
    say(
      "States:     phone \(phoneDigests.1.description.prefix(32))…, laptop \(laptopDigests.1.description.prefix(32))…"
    )
    let converged =
      phoneDigests == laptopDigests && laptopAgain.serverEventSetDigest == phoneDigests.0
    say(
      converged
        ? "Converged: both replicas and the server hold the same events; both replicas the same state."
        : "NOT CONVERGED")
    guard converged else { throw CLIError("the replicas did not converge") }
    return report.joined(separator: "\n")
  }
}

/// Removes a directory the demo made, reporting (not throwing) a failure.
func removeQuietly(_ path: String) {
  do {
    try FileManager.default.removeItem(atPath: path)
  } catch {
    FileHandle.standardError.write(Data("warning: could not remove \(path): \(error)\n".utf8))
  }
}
