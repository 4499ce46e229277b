import ArgumentParser
import Foundation
import VLog

/// `vlog demo`: two replicas edit the same notes offline, exchange their events, and converge.
struct Demo: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Show two replicas editing the same notes offline, exchanging events, and converging."
  )

  @Option(name: .long, help: "Keep the two stores in this directory instead of a temporary one.")
  var directory: String?

  func run() async throws {
    let root =
      directory
      ?? FileManager.default.temporaryDirectory
      .appendingPathComponent("vlog-demo-\(UUID().uuidString)").path
    defer { if directory == nil { removeQuietly(root) } }
    print(try Demo.perform(in: root))
  }

  /// Runs the demonstration in `root` and returns its report.
  static func perform(in root: String) throws -> String {
    let phone = try NoteStore.open(at: root + "/phone")
    let laptop = try NoteStore.open(at: root + "/laptop")
    defer {
      phone.close()
      laptop.close()
    }
    var report: [String] = []
    func say(_ line: String = "") { report.append(line) }

    say("Two replicas of one account: a phone and a laptop, each with its own VLog store.")
    let trip = try phone.write {
      $0.createNote(text: "Paris trip: book the train", tags: ["Travel"])
    }
    let groceries = try phone.write { $0.createNote(text: "Groceries: bread", tags: ["home"]) }
    let (sent, _) = try exchange(phone, laptop)
    say("The phone makes two notes and syncs: \(sent) events travel as JSON Lines.")
    say()
    say("Both go offline and edit the same notes:")
    try phone.write { changes in
      changes.setText("Paris trip: book the train and the Louvre", of: trip)
      changes.setTags(["Travel", "paris"], of: trip)
    }
    say("  phone:  edits the trip's text, tags it 'paris'")
    try laptop.write { changes in
      changes.setArchived(true, of: trip)
      changes.setTags(["Travel", "Paris", "Summer"], of: trip)
      changes.setText("Groceries: bread, milk", of: groceries)
    }
    say("  laptop: archives the trip, tags it 'Paris' and 'Summer', edits the groceries")
    try phone.write { $0.deleteNote(groceries) }
    say("  phone:  deletes the groceries note")
    say()
    let (toLaptop, toPhone) = try exchange(phone, laptop)
    say("They sync: \(toLaptop) events to the laptop, \(toPhone) to the phone.")
    say()

    for (name, store) in [("phone", phone), ("laptop", laptop)] {
      say("On the \(name):")
      if let note = try store.note(trip) {
        say("  \(note.id): \"\(note.text)\"")
        say(
          "    archived: \(note.isArchived); tags: \(note.tags.map(\.name).joined(separator: ", "))"
        )
      }
      say(
        "  groceries: \(try store.note(groceries) == nil ? "deleted (deletes are final)" : "present")"
      )
    }
    say()
    say("Which change won each field of the trip (newest stamp per field):")
    let replicaNames = [phone.replicaID: "phone", laptop.replicaID: "laptop"]
    for entry in try phone.history(of: trip) where entry.outcome == .won {
      let stamp = entry.logged.event.stamp
      say(
        "  \((entry.field ?? "").padding(toLength: 9, withPad: " ", startingAt: 0)) "
          + "\(replicaNames[stamp.replica] ?? "?") at \(stamp.time)")
    }
    let phoneDigests = (try phone.eventSetDigest(), try phone.stateDigest())
    let laptopDigests = (try laptop.eventSetDigest(), try laptop.stateDigest())
    say()
    say("Event sets: phone \(phoneDigests.0), laptop \(laptopDigests.0)")
    say(
      "States:     phone \(phoneDigests.1.description.prefix(32))…, laptop \(laptopDigests.1.description.prefix(32))…"
    )
    say(
      phoneDigests == laptopDigests
        ? "Converged: both replicas hold the same events and the same state." : "NOT CONVERGED")
    guard phoneDigests == laptopDigests else { throw CLIError("the replicas did not converge") }
    return report.joined(separator: "\n")
  }

  /// Sends each store's events to the other through their JSON wire form.
  static func exchange(_ a: NoteStore, _ b: NoteStore) throws -> (Int, Int) {
    func wire(_ store: NoteStore) throws -> Data { try Export.jsonLines(of: store).0 }
    let toB = try b.ingest(Import.events(in: wire(a), file: "phone"))
    let toA = try a.ingest(Import.events(in: wire(b), file: "laptop"))
    return (toB.appended, toA.appended)
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
