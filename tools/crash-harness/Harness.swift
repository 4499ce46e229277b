import ArgumentParser
import Foundation
import VLog
import VLogServer
import VLogServerTesting
import VLogSync
import VLogTesting

#if canImport(Glibc)
  import Glibc
#endif

/// Kills VLog's writers with SIGKILL at random points and checks what survives: nothing
/// acknowledged is lost, no batch is partly there, and `verify` finds no fault.
///
/// Four writers, each a real process: a loop of local writes (three notes per transaction),
/// `vlog import` of one file (one transaction), `vlog serve` under concurrent pushes, and a
/// device pulling pages whose projections wait for the pull's last page.
@main
struct CrashHarness: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "vlog-crash",
    abstract:
      "Kill VLog's writers with SIGKILL at random points; check nothing acknowledged is lost.",
    subcommands: [
      Run.self, Writer.self, PlantedServer.self, Puller.self, Flips.self, NetworkRun.self,
      NetworkDevice.self,
    ],
    defaultSubcommand: Run.self)
}

/// What the harness can plant, to show that it catches the bug.
enum Plant: String, ExpressibleByArgument, CaseIterable {
  /// The writer says a batch is written before writing it (the writes scenario); the server
  /// answers pushes before the commit they share is durable (the server scenario).
  case acknowledgeBeforeCommit = "acknowledge-before-commit"
  /// A store opened after a crash does not replay the log's events its projections lag by:
  /// as if a pull's projections were taken to be written once its pages were durable (the
  /// pull scenario).
  case noReplayOnOpen = "no-replay-on-open"
}

struct Run: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "run", abstract: "Run crash rounds (the default).")

  enum Scenario: String, ExpressibleByArgument, CaseIterable {
    case writes, `import`, server, pull
    case scaleOut = "scale-out"
    case all
  }

  @Option(help: "Rounds per scenario.") var rounds = 20
  @Option(
    help: "writes, import, server, pull, scale-out or all (scale-out only with --database).")
  var scenario = Scenario.all
  @Option(help: "A PostgreSQL database (URL) for the scale-out scenario.") var database: String?
  @Flag(help: "Say what each round does.") var narrate = false
  @Option(help: "The seed of the kill times.") var seed: UInt64 = 1
  @Option(
    help:
      "A bug to plant: acknowledge-before-commit (writes, server) or no-replay-on-open (pull).")
  var plant: Plant?
  @Flag(help: "Succeed only if some round fails: for checking a planted bug is caught.")
  var expectFailure = false

  func run() async throws {
    var generator = SeededGenerator(seed: seed)
    let tools = try Tools()
    var failures: [String] = []
    var scenarios = scenario == .all ? [Scenario.writes, .import, .server, .pull] : [scenario]
    if scenario == .all, database != nil { scenarios.append(.scaleOut) }
    if scenarios.contains(.scaleOut), database == nil {
      throw ValidationError("the scale-out scenario needs --database URL")
    }
    let start = ContinuousClock.now
    for scenario in scenarios {
      var summary = Summary()
      for round in 1...rounds {
        let root = FileManager.default.temporaryDirectory
          .appendingPathComponent("vlog-crash-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        do {
          switch scenario {
          case .writes:
            try await crashWrites(
              root: root, tools: tools, plant: plant, using: &generator, summary: &summary)
          case .import:
            try await crashImport(root: root, tools: tools, using: &generator, summary: &summary)
          case .server:
            try await crashServer(
              root: root, tools: tools, plant: plant, using: &generator, summary: &summary)
          case .pull:
            try await crashPull(
              root: root, tools: tools, plant: plant, using: &generator, summary: &summary)
          case .scaleOut:
            try await crashScaleOut(
              root: root, round: round, tools: tools, database: database ?? "",
              narrate: narrate, using: &generator, summary: &summary)
          case .all: break
          }
        } catch {
          failures.append("\(scenario) round \(round): \(error)")
          print("FAIL \(scenario) round \(round): \(error)")
        }
      }
      print("\(scenario): \(rounds) rounds, \(summary)")
    }
    let elapsed = ContinuousClock.now - start
    print(
      "\(failures.count) failed rounds in \(elapsed.components.seconds) s"
        + (plant.map { " (planted: \($0.rawValue))" } ?? ""))
    if expectFailure {
      guard !failures.isEmpty else {
        throw ValidationError("the planted bug was not caught in \(rounds) rounds")
      }
      print("the planted bug was caught")
    } else if !failures.isEmpty {
      throw ExitCode.failure
    }
  }
}

/// What the rounds of a scenario saw.
struct Summary: CustomStringConvertible {
  var killed = 0
  var finished = 0
  var acknowledged = 0
  var survivedUnacknowledged = 0

  var description: String {
    "\(killed) killed mid-work, \(finished) finished first; \(acknowledged) acknowledged "
      + "batches all found, \(survivedUnacknowledged) unacknowledged ones found whole"
  }
}

/// A check that failed.
struct Failure: Error, CustomStringConvertible {
  let description: String
  init(_ description: String) { self.description = description }
}

/// Where the binaries are: `vlog` and this harness, side by side in the build directory.
struct Tools {
  let vlog: URL
  let harness: URL

  init() throws {
    harness = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    vlog = harness.deletingLastPathComponent().appendingPathComponent("vlog")
    guard FileManager.default.isExecutableFile(atPath: vlog.path) else {
      throw Failure("no vlog binary next to \(harness.path): build the package first")
    }
  }
}

/// A child process whose standard output is collected line by line, by a thread of its own
/// that reads until the pipe ends: in order, and all of it once the child has ended.
final class Child: @unchecked Sendable {
  let process = Process()
  private let output = Pipe()
  private let lock = NSLock()
  private var buffer = Data()
  private let drained = DispatchSemaphore(value: 0)

  init(_ executable: URL, _ arguments: [String]) throws {
    process.executableURL = executable
    process.arguments = arguments
    process.standardOutput = output
    process.standardError = FileHandle.nullDevice
    try process.run()
    let handle = output.fileHandleForReading
    Thread.detachNewThread { [self] in
      while true {
        let data = handle.availableData
        if data.isEmpty { break }
        lock.lock()
        buffer.append(data)
        lock.unlock()
      }
      drained.signal()
    }
  }

  /// The complete lines written so far.
  var lines: [String] {
    lock.lock()
    defer { lock.unlock() }
    return String(decoding: buffer, as: UTF8.self).split(separator: "\n").map(String.init)
  }

  /// Waits for the process to end by itself, and for the rest of its output.
  func wait() {
    process.waitUntilExit()
    drained.wait()
    drained.signal()
  }

  /// Kills the process with SIGKILL and waits for it and the rest of its output; returns
  /// whether it was still running.
  func kill() -> Bool {
    let running = process.isRunning
    if running { _ = Glibc.kill(process.processIdentifier, SIGKILL) }
    wait()
    return running
  }
}

/// Sleeps for a random time in `range` milliseconds.
func sleepRandomly(
  _ range: ClosedRange<Int>, using generator: inout SeededGenerator
) async throws {
  try await Task.sleep(for: .milliseconds(Int.random(in: range, using: &generator)))
}
