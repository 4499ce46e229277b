import ArgumentParser
import Foundation
import LMDB
import VLog
import VLogServer
import VLogSync

/// The `vlog` command: inspect, replay and verify VLog stores, and run and use the sync server.
///
/// Exit codes: 0 success; 1 a user error (missing store, unknown note) or a failed
/// verification; 2 bad usage (unknown option, malformed argument).
@main
struct VLogCommand: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "vlog",
    abstract: "Inspect, replay and verify VLog stores, and run and use the VLog sync server.",
    discussion: """
      Every command takes --store PATH (or the VLOG_STORE environment variable) and prints text, \
      or JSON with --json. Exit status: 0 success, 1 user error or failed verification, 2 bad usage.
      """,
    version: VLogVersion.current,
    subcommands: [
      Demo.self, NoteCommand.self, Notes.self, Tags.self, Conflicts.self, Log.self, History.self,
      Stats.self,
      Rebuild.self, Compact.self, Verify.self, Salvage.self, Export.self, Import.self, Serve.self,
      AccountCommand.self,
      SyncCommand.self, Status.self, Erase.self,
    ]
  )

  /// Parses and runs the command, and turns every error into one line and an exit status.
  static func main() async {
    do {
      try refuseInvalidUTF8(in: CommandLine.unsafeArgv, count: Int(CommandLine.argc))
      var arguments = Array(CommandLine.arguments.dropFirst())
      // The argument parser's time grows with the square of the repeats of an option: ten
      // thousand --tag options would take minutes before the tag limit refused them.
      guard arguments.count <= maximumArguments else {
        throw ValidationError(
          "\(arguments.count) arguments; vlog takes at most \(maximumArguments) (a note has at "
            + "most \(Limits.tagsPerNote) tags)")
      }
      if arguments.first == "serve" {
        arguments += Serve.environmentArguments(
          ProcessInfo.processInfo.environment, given: arguments)
      }
      var command = try parseAsRoot(arguments)
      if var asyncCommand = command as? any AsyncParsableCommand {
        try await asyncCommand.run()
      } else {
        try command.run()
      }
    } catch {
      exit(reporting: error)
    }
  }

  /// The most arguments a command line may have: a note's tags, each with `--tag`, and room
  /// for every other option.
  static let maximumArguments = 2 * Limits.tagsPerNote + 64

  /// Refuses an argument whose bytes are not UTF-8: Swift would store it with U+FFFD in place
  /// of each bad byte, a name or a text the user did not type, without a word.
  ///
  /// - Throws: `ValidationError` naming the argument by position and showing it with its bad
  ///   bytes escaped.
  static func refuseInvalidUTF8(
    in arguments: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>, count: Int
  ) throws {
    for index in 1..<max(1, count) {
      guard let argument = arguments[index], String(validatingCString: argument) == nil else {
        continue
      }
      let bytes = UnsafeRawPointer(argument).assumingMemoryBound(to: UInt8.self)
      let shown = UnsafeBufferPointer(start: bytes, count: strlen(argument)).map { byte in
        byte < 0x80 ? String(UnicodeScalar(byte)) : "\\x" + String(byte, radix: 16)
      }.joined()
      throw ValidationError(
        "argument \(index) ('\(shown)') is not valid UTF-8: give names and texts in UTF-8")
    }
  }

  /// Prints `error` the way a user should see it and exits with its status.
  static func exit(reporting error: any Error) -> Never {
    switch error {
    case let error as VLogError:
      fail(error.message)
    case let error as CLIError:
      fail(error.message)
    case let error as LMDBError:
      fail(error.description)
    case let error as APIError:
      fail(error.description)
    case let error as StorageError:
      fail(error.message)
    default:
      let code = exitCode(for: error)
      if code == .success {
        print(fullMessage(for: error))
        Foundation.exit(0)
      }
      FileHandle.standardError.write(Data((fullMessage(for: error) + "\n").utf8))
      Foundation.exit(code == .validationFailure ? 2 : code.rawValue)
    }
  }

  private static func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("vlog: error: \(message)\n".utf8))
    Foundation.exit(1)
  }
}

/// The version `vlog --version` prints.
enum VLogVersion {
  static let current = "0.1.0"
}

/// A user error: one line, exit status 1.
struct CLIError: Error, CustomStringConvertible {
  let message: String
  init(_ message: String) { self.message = message }
  var description: String { message }
}
