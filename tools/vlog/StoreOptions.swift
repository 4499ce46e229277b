public import ArgumentParser
import Foundation
import LMDB
import VLog

/// The options every store command takes.
struct StoreOptions: ParsableArguments {
  @Option(
    name: .long, help: "The store's directory (default: $VLOG_STORE).",
    completion: .directory)
  var store: String?

  @Flag(name: .long, help: "Print JSON instead of text.")
  var json = false

  /// The store's path, from `--store` or `VLOG_STORE`.
  func path() throws -> String {
    if let store, !store.isEmpty { return store }
    if let store = ProcessInfo.processInfo.environment["VLOG_STORE"], !store.isEmpty {
      return store
    }
    throw ValidationError("no store given: pass --store PATH or set VLOG_STORE")
  }

  /// Opens the store. Commands that only read refuse a path that holds no store, rather than
  /// creating one there.
  func open(creating: Bool = false) throws -> NoteStore {
    let path = try path()
    let files = FileManager.default
    if !files.fileExists(atPath: path + "/data.mdb") {
      if !creating {
        throw CLIError("no store at '\(path)'; create one with 'vlog note add' or check the path")
      }
      // A new store goes into a new or empty directory, never beside someone's files.
      // (A lock file is what a store removed by hand leaves; it is LMDB's to reuse.)
      let entries = (try? files.contentsOfDirectory(atPath: path))?.filter {
        !["lock.mdb", "open.lock"].contains($0)
      }
      if let entries, !entries.isEmpty {
        throw CLIError(
          "'\(path)' holds files but no store (\(entries.sorted().prefix(3).joined(separator: ", "))"
            + "\(entries.count > 3 ? ", …" : "")); a new store goes into a new or empty "
            + "directory: give another --store")
      }
    }
    try refuseDamagedStructure(path, kind: "store")
    var options = NoteStore.Options()
    // A store this user cannot write (read-only media, a backup's permissions) opens for
    // reading: every command that only reads works; one that writes says why it cannot.
    if files.fileExists(atPath: path + "/data.mdb"),
      access(path, W_OK) != 0 || access(path + "/data.mdb", W_OK) != 0
    {
      options.isReadOnly = true
    }
    return try NoteStore.open(at: path, options: options)
  }

  /// Prints an output as text or JSON.
  func emit(_ output: CommandOutput) throws {
    if json {
      print(try output.jsonText())
    } else if !output.text.isEmpty {
      print(output.text)
    }
  }
}

/// What a command prints: text for people, and a JSON value with stable field names.
struct CommandOutput {
  var text: String
  var json: any Encodable

  func jsonText() throws -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    // Every date as the rest of the tool writes it: ISO 8601, UTC, milliseconds.
    encoder.dateEncodingStrategy = .custom { date, encoder in
      var container = encoder.singleValueContainer()
      try container.encode(ISO8601.format(milliseconds: date.milliseconds))
    }
    return String(decoding: try encoder.encode(json), as: UTF8.self)
  }
}

/// Note ids are parsed once, where the arguments are: a UUID, in either case, with or without
/// hyphens.
extension NoteID: ExpressibleByArgument {
  init?(argument: String) { self.init(argument) }
}

/// Parses an ISO 8601 date argument.
func parseDate(_ text: String, option: String) throws -> Date {
  guard let milliseconds = ISO8601.parse(text) else {
    throw ValidationError("\(option): " + ISO8601.problem(with: text, noun: "date"))
  }
  return Date(milliseconds: milliseconds)
}

/// Formats a date for output.
func format(_ date: Date) -> String {
  ISO8601.format(milliseconds: date.milliseconds)
}

/// Lays out rows in aligned columns.
func table(_ header: [String], _ rows: [[String]]) -> String {
  let all = [header] + rows
  let widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
  return all.map { row in
    row.enumerated().map { column, cell in
      column == row.count - 1
        ? cell : cell.padding(toLength: widths[column], withPad: " ", startingAt: 0)
    }.joined(separator: "  ")
  }.joined(separator: "\n")
}

/// Whether standard output is a terminal (progress bars only then).
var standardOutputIsTerminal: Bool { isatty(STDOUT_FILENO) == 1 }

/// A progress bar on standard output, drawn only when it is a terminal and JSON was not asked
/// for, so that scripts see nothing but results.
struct ProgressBar {
  let isVisible: Bool
  let label: String

  init(_ label: String, options: StoreOptions) {
    self.label = label
    isVisible = standardOutputIsTerminal && !options.json
  }

  func update(_ done: Int, of total: Int) {
    guard isVisible, total > 0 else { return }
    let fraction = min(1, Double(done) / Double(total))
    let filled = Int(fraction * 30)
    let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: 30 - filled)
    let line = "\r\(label) [\(bar)] \(Int(fraction * 100))% \(done)/\(total)"
    FileHandle.standardOutput.write(Data(line.utf8))
  }

  func finish() {
    if isVisible { FileHandle.standardOutput.write(Data("\n".utf8)) }
  }
}

/// Checks the page structure of the LMDB file in `directory` (``PageStructure``) before
/// liblmdb, which trusts it, reads it: a damaged one is an error that lists what is wrong and
/// says what to do, not a crash. Nothing to check when there is no file yet.
///
/// - Parameter kind: What the directory holds, for the message: `store` or `server data`.
func refuseDamagedStructure(_ directory: String, kind: String) throws {
  guard FileManager.default.fileExists(atPath: directory + "/data.mdb") else { return }
  let structure = try PageStructure.check(directory: directory)
  guard !structure.isWhole else { return }
  let listed = structure.faults.prefix(5).map { "  " + $0 }.joined(separator: "\n")
  let more = structure.faults.count > 5 ? "\n  … \(structure.faults.count - 5) more" : ""
  throw CLIError(
    "the \(kind)'s page structure is damaged (\(structure.faults.count) fault(s)); opening it "
      + "could crash, so nothing was read:\n\(listed)\(more)\n"
      + "Restore '\(directory)' from a backup"
      + (kind == "store"
        ? ", or recover what it holds into a new store with 'vlog salvage \(directory) NEW' "
          + "and sync that one: the server gives back the rest"
        : ""))
}
