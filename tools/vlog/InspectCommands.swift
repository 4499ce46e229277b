import ArgumentParser
import Foundation
import Logging
import VLog
import VLogServer

/// `vlog history NOTE`: every change to a note and which one won each field.
struct History: StoreCommand {
  static let configuration = CommandConfiguration(
    abstract: "Show every change to a note and which change won each field.")
  @OptionGroup var options: StoreOptions
  @Argument(help: "The note's id (a UUID).") var id: NoteID

  func execute(on store: NoteStore) throws -> CommandOutput {
    let note = id
    let history = try store.history(of: note)
    guard !history.isEmpty else { throw CLIError("the log has no events about note \(note)") }
    let rows = history.map { entry in
      EventRow(
        entry.logged,
        field: entry.field.map { field in entry.tag.map { "\(field) \($0)" } ?? field },
        outcome: entry.outcome.rawValue)
    }
    var text = table(
      ["SEQ", "TIME", "REPLICA", "OUTCOME", "CHANGE"],
      rows.map { row -> [String] in
        let outcome = row.field.map { "\(row.outcome ?? "") \($0)" } ?? row.outcome ?? ""
        let time = "\(row.time)#\(row.counter)"
        return [String(row.sequence), time, String(row.replica.prefix(8)), outcome, row.change]
      })
    let winners = rows.filter { $0.outcome == "won" }
    if !winners.isEmpty {
      text += "\n\nwinning changes:\n"
      text += winners.map {
        "  \($0.field ?? "")  from replica \($0.replica) at \($0.time)#\($0.counter)"
      }
      .joined(separator: "\n")
    }
    return CommandOutput(text: text, json: rows)
  }
}

/// `vlog verify`: checksums, index, blobs, and projections against a fresh replay.
struct Verify: StoreCommand {
  static let configuration = CommandConfiguration(
    abstract:
      "Check every event's checksum, the index, the blobs, and the projections against a fresh replay; exit 1 on any fault.",
    discussion:
      "With --data DIR or --database URL, checks a sync server's data instead: every account's event log."
  )
  @OptionGroup var options: StoreOptions
  @Option(
    name: .long, help: "A sync server's data directory to verify instead of a store.",
    completion: .directory)
  var data: String?

  @Option(
    name: .long, help: "A sync server's PostgreSQL database (URL) to verify instead of a store.")
  var database: String?

  struct Output: Encodable {
    let ok: Bool
    let events: Int
    let faults: [Fault]
  }

  struct Fault: Encodable {
    let kind: String
    let message: String
  }

  func execute(on store: NoteStore) throws -> CommandOutput {
    let progress = ProgressBar("verify", options: options)
    let faults = try store.verify { progress.update($0, of: $1) }
    progress.finish()
    let events = try store.eventCount()
    return Self.report(
      faults, events: events,
      healthy: "ok: \(events) events; checksums, index, blobs and projections verified")
  }

  /// The output for `faults` found in `events` events; `healthy` is the text when there are none.
  /// With `advice`, the last line says that instead of counting the faults.
  static func report(
    _ faults: [VerificationFault], events: Int, healthy: String, advice: String? = nil
  ) -> CommandOutput {
    let output = Output(
      ok: faults.isEmpty, events: events,
      faults: faults.map { Fault(kind: $0.kind.rawValue, message: $0.message) })
    let text =
      faults.isEmpty
      ? healthy
      : (faults.map { "fault: \($0)" }
        + [advice ?? "\(faults.count) fault(s) in \(events) events"])
        .joined(separator: "\n")
    return CommandOutput(text: text, json: output)
  }

  /// The report of a store whose page structure is damaged, which is not opened; nil for a
  /// whole one.
  func structureReport() throws -> CommandOutput? {
    let path = try options.path()
    let faults = try NoteStore.structureFaults(at: path)
    guard !faults.isEmpty else { return nil }
    return Self.report(
      faults.map { VerificationFault(kind: .structure, message: $0) }, events: 0,
      healthy: "",
      advice:
        "the store's page structure is damaged; it was not opened. Restore '\(path)' from a "
        + "backup, or recover what it holds into a new store with 'vlog salvage \(path) NEW' "
        + "and sync that one: the server gives back the rest")
  }

  /// Verifies a server's data directory.
  func verifyServer(at directory: String?, database: String?) async throws -> CommandOutput {
    var logger = Logger(label: "vlog")
    logger.logLevel = .error
    let server: SyncServer
    if let database {
      server = try await SyncServer.open(database: database, maximumConnections: 2, logger: logger)
    } else {
      let directory = directory ?? ""
      guard FileManager.default.fileExists(atPath: directory + "/data.mdb") else {
        throw CLIError(
          "no server data at '\(directory)'; check the path given to 'vlog serve --data'")
      }
      try refuseDamagedStructure(directory, kind: "server data")
      server = try SyncServer.open(dataDirectory: directory, logger: logger)
    }
    defer { server.close() }
    let result = try await server.verify()
    return Self.report(
      result.faults, events: result.events,
      healthy:
        "ok: \(result.events) events in \(result.accounts) accounts; checksums and indexes verified"
    )
  }

  func run() async throws {
    let output: CommandOutput
    if data != nil || database != nil {
      output = try await verifyServer(at: data, database: database)
    } else if let damaged = try structureReport() {
      output = damaged
    } else {
      let store = try options.open()
      defer { store.close() }
      output = try execute(on: store)
    }
    try options.emit(output)
    if let result = output.json as? Output, !result.ok { throw ExitCode(1) }
  }
}
