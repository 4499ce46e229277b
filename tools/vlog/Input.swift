import ArgumentParser
import Foundation
import VLog

/// The bytes of `file`, or of standard input for `-`, with an error that says why a file cannot
/// be read: `what` names what it should hold.
func readInput(_ file: String, holding what: String) throws -> Data {
  var isDirectory: ObjCBool = false
  if file != "-", FileManager.default.fileExists(atPath: file, isDirectory: &isDirectory),
    isDirectory.boolValue
  {
    throw CLIError("cannot read '\(file)': it is a directory, not \(what)")
  }
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
