import ArgumentParser
import Foundation
import VLog

/// The bytes of `file`, or of standard input for `-`, with an error that says why a file cannot
/// be read: `what` names what it should hold.
func readInput(_ file: String, holding what: String) throws -> Data {
  try readInput(file, holding: what, checkingOnly: false)
}

/// ``readInput(_:holding:)``, or only its check that `file` is not a directory.
private func readInput(_ file: String, holding what: String, checkingOnly: Bool) throws -> Data {
  var isDirectory: ObjCBool = false
  if file != "-", FileManager.default.fileExists(atPath: file, isDirectory: &isDirectory),
    isDirectory.boolValue
  {
    throw CLIError("cannot read '\(file)': it is a directory, not \(what)")
  }
  if checkingOnly { return Data() }
  do {
    return file == "-"
      ? FileHandle.standardInput.readDataToEndOfFile()
      : try Data(contentsOf: URL(fileURLWithPath: file))
  } catch {
    let reason =
      FileManager.default.fileExists(atPath: file)
      ? "permission denied or not a regular file" : "no such file"
    throw CLIError("cannot read '\(file)': \(reason)")
  }
}

/// The lines of a file, or of standard input for `-`, read a chunk at a time: what `vlog import`
/// reads, whatever the file's size, in the memory of a chunk and a line.
final class InputLines {
  private let handle: FileHandle
  private var buffer = Data()
  private var start = 0
  private var atEnd = false
  private var number = 0
  /// The bytes read so far, and the file's size (0 for standard input or a pipe).
  private(set) var bytesRead = 0
  let size: Int

  /// The lines of `file`; `what` names what it should hold, for the error when it cannot be
  /// read.
  init(_ file: String, holding what: String) throws {
    if file == "-" {
      handle = FileHandle.standardInput
      size = 0
      return
    }
    _ = try readInput(file, holding: what, checkingOnly: true)
    guard let handle = FileHandle(forReadingAtPath: file) else {
      let reason =
        FileManager.default.fileExists(atPath: file)
        ? "permission denied or not a regular file" : "no such file"
      throw CLIError("cannot read '\(file)': \(reason)")
    }
    self.handle = handle
    // Only the progress bar reads the size: without it, it shows none.
    size = (try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? 0
  }

  // A file only read: closing it loses nothing, whatever close says.
  deinit { try? handle.close() }

  /// Copies standard input to a new temporary file, a chunk at a time; returns its path.
  static func spoolStandardInput() throws -> String {
    let path = FileManager.default.temporaryDirectory
      .appendingPathComponent("vlog-import-\(UUID().uuidString).jsonl").path
    guard FileManager.default.createFile(atPath: path, contents: nil),
      let output = FileHandle(forWritingAtPath: path)
    else { throw CLIError("cannot keep standard input in '\(path)'") }
    do {
      while let chunk = try FileHandle.standardInput.read(upToCount: 1 << 20), !chunk.isEmpty {
        try output.write(contentsOf: chunk)
      }
    } catch {
      // Failing already: that error is the one to report, and the copy is removed.
      try? output.close()
      try? FileManager.default.removeItem(atPath: path)
      throw error
    }
    try output.close()
    return path
  }

  /// The next line, without its newline, and its number (from 1); nil at the end.
  func next() throws -> (Int, Data)? {
    while true {
      if let newline = buffer[start...].firstIndex(of: 0x0A) {
        let line = buffer[start..<newline]
        start = newline + 1
        number += 1
        return (number, line)
      }
      if atEnd {
        guard start < buffer.endIndex else { return nil }
        let line = buffer[start...]
        start = buffer.endIndex
        number += 1
        return (number, line)
      }
      buffer = buffer[start...]
      buffer = Data(buffer)
      start = buffer.startIndex
      let chunk = try handle.read(upToCount: 1 << 20) ?? Data()
      bytesRead += chunk.count
      if chunk.isEmpty { atEnd = true } else { buffer.append(chunk) }
    }
  }
}

/// A note's text as `vlog note add` and `vlog note set` take it: an argument, or the contents of
/// a file or of standard input (an argument holds at most 128 KiB on Linux; a note, 1 MiB).
struct TextInput: ParsableArguments {
  @Argument(help: "The text (or give --file).") var text: String?
  @Option(name: .long, help: "Read the text from this file, UTF-8; - for standard input.")
  var file: String?

  func validate() throws {
    switch (text, file) {
    case (nil, nil): throw ValidationError("give the text, or --file to read it from a file")
    case (.some, .some): throw ValidationError("give the text or --file, not both")
    default: break
    }
  }

  /// The text given.
  func read() throws -> String {
    if let text { return text }
    let file = file ?? "-"
    let data = try readInput(file, holding: "a text")
    guard let text = String(validating: data, as: UTF8.self) else {
      throw CLIError(
        "'\(file == "-" ? "standard input" : file)' is not UTF-8 text: a note's text is UTF-8")
    }
    return text
  }
}
