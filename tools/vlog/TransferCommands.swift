import ArgumentParser
import Foundation
import VLog
import VLogSync

/// `vlog export`: the events as JSON Lines, one wire event per line.
struct Export: StoreCommand {
  static let configuration = CommandConfiguration(
    abstract: "Write the events as JSON Lines: one event per line, as the sync wire carries them.")
  @OptionGroup var options: StoreOptions
  @Option(name: .shortAndLong, help: "Write to this file instead of standard output.")
  var output: String?

  func execute(on store: NoteStore) throws -> CommandOutput {
    let total = try store.eventCount()
    let progress = ProgressBar("export", options: options)
    let (lines, count) = try Self.jsonLines(of: store) { written in
      if output != nil { progress.update(written, of: total) }
    }
    if output != nil { progress.finish() }
    if let output {
      do {
        try lines.write(to: URL(fileURLWithPath: output))
      } catch {
        throw CLIError("cannot write '\(output)': \(error.localizedDescription)")
      }
      return CommandOutput(
        text: "exported \(count) events to \(output)",
        json: ["events": AnyEncodable(count), "file": AnyEncodable(output)])
    }
    FileHandle.standardOutput.write(lines)
    return CommandOutput(text: "", json: [String: AnyEncodable]())
  }

  func run() async throws {
    let store = try options.open()
    defer { store.close() }
    let result = try execute(on: store)
    if output != nil { try options.emit(result) }
  }

  /// Every event of a store as JSON Lines, and the number of events; `progress` is called
  /// every 10,000 events.
  static func jsonLines(
    of store: NoteStore, progress: (_ written: Int) -> Void = { _ in }
  ) throws -> (Data, Int) {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    var lines = Data()
    var count = 0
    try store.forEachEvent { logged in
      lines.append(try encoder.encode(WireEvent(logged.event)))
      lines.append(0x0A)
      count += 1
      if count % 10_000 == 0 { progress(count) }
      return true
    }
    return (lines, count)
  }
}

/// `vlog import FILE`: events from JSON Lines, merged as a sync would.
struct Import: StoreCommand {
  static let configuration = CommandConfiguration(
    abstract: "Merge events from a JSON Lines file, idempotently, exactly as sync ingests them.")
  static var createsStore: Bool { true }
  @OptionGroup var options: StoreOptions
  @Argument(help: "The JSON Lines file ('-' for standard input).") var file: String

  struct Output: Encodable {
    let read: Int
    let appended: Int
    let duplicates: Int
    let unknownKinds: Int
  }

  func execute(on store: NoteStore) throws -> CommandOutput {
    // Read from the start again if the transaction starts over (the store's file grew):
    // standard input is kept in a temporary file for that.
    let (path, temporary) =
      try file == "-" ? (InputLines.spoolStandardInput(), true) : (file, false)
    // Best effort: a copy left in the temporary directory is the system's to clear.
    defer { if temporary { try? FileManager.default.removeItem(atPath: path) } }
    let progress = ProgressBar("import", options: options)
    let decoder = JSONDecoder()
    var read = 0
    let result: IngestResult
    do {
      // A batch at a time, all in one transaction: an import of any size takes the memory of
      // one batch, and a bad line anywhere imports nothing.
      result = try store.ingest(streaming: {
        let lines = try InputLines(path, holding: "a JSON Lines file")
        read = 0
        return {
          var batch: [Event] = []
          while batch.count < Self.batchSize, let (number, line) = try lines.next() {
            if number % 10_000 == 0 { progress.update(lines.bytesRead, of: lines.size) }
            if let event = try Self.event(in: line, number: number, file: file, decoder: decoder) {
              batch.append(event)
            }
          }
          read += batch.count
          return batch.isEmpty ? nil : batch
        }
      })
    } catch let error as VLogError {
      progress.finish()
      throw CLIError("\(file): \(error.message); nothing was imported")
    }
    progress.finish()
    let output = Output(
      read: read, appended: result.appended, duplicates: result.duplicates,
      unknownKinds: result.unknownKinds)
    return CommandOutput(
      text:
        "read \(read) events: \(result.appended) new, \(result.duplicates) already here"
        + (result.unknownKinds > 0
          ? ", \(result.unknownKinds) of kinds this version does not know" : ""),
      json: output)
  }

  /// The most events read before they are ingested.
  static let batchSize = 10_000

  /// The event on line `number`, decoded and checked; nil for a blank line. A bad line is an
  /// error naming it and its field.
  static func event(in line: Data, number: Int, file: String, decoder: JSONDecoder) throws
    -> Event?
  {
    let trimmed = line.last == 0x0D ? line.dropLast() : line
    guard !trimmed.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) else { return nil }
    do {
      let event = try decoder.decode(WireEvent.self, from: Data(trimmed)).event()
      try event.validate()
      return event
    } catch let error as DecodingError {
      throw CLIError("\(file):\(number): \(WireError(error)); nothing was imported")
    } catch let error as WireError {
      throw CLIError("\(file):\(number): \(error); nothing was imported")
    } catch let error as VLogError {
      throw CLIError("\(file):\(number): \(error.message); nothing was imported")
    }
  }
}

/// A JSON value of any encodable type, for small ad-hoc outputs.
struct AnyEncodable: Encodable {
  let encodeValue: @Sendable (any Encoder) throws -> Void

  init(_ value: some Encodable & Sendable) { encodeValue = { try value.encode(to: $0) } }

  func encode(to encoder: any Encoder) throws { try encodeValue(encoder) }
}
