import ArgumentParser
import Foundation
import VLog
import VLogSync
import VLogTesting

/// A network that fails in every way: devices (processes of their own) write and sync one
/// account through a ``FaultProxy`` that drops, delays, duplicates, truncates and resets
/// requests and answers, live channels open; devices and the server are killed with SIGKILL at
/// random and restarted; one device stays offline with its clock a year behind, reading an
/// older protocol version, and comes back at the end. Then the network heals, and:
///
/// - the first sync of each device after it empties its outbox (the bound: one sync);
/// - the next sync of each finds every device's events, and the server's, equal (digests);
/// - no sync after the heal repairs or fetches anything by comparing digests: every change
///   reached the server through its device's outbox, and every device through its pages;
/// - every change a device said it wrote is on every device (its text among the note's
///   versions, or the note deleted);
/// - `vlog verify` finds no fault in any store, nor in the server's data.
struct NetworkRun: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "network",
    abstract:
      "Devices and a server through a network that fails in every way; check nothing is lost.")

  enum BackendChoice: String, ExpressibleByArgument {
    case lmdb, postgres, both
  }

  @Option(help: "Rounds per backend.") var rounds = 3
  @Option(help: "lmdb, postgres (needs --database) or both.") var backend = BackendChoice.lmdb
  @Option(help: "A PostgreSQL database (URL).") var database: String?
  @Option(help: "The seed of the faults and kills.") var seed: UInt64 = 1
  @Option(help: "Online devices.") var devices = 3
  @Option(help: "Actions per device per round.") var steps = 6
  @Option(help: "Faults per hundred exchanges while the network is bad.") var faultRate = 35
  @Option(help: "A bug to plant in the devices: acknowledge-before-response.") var plant: String?
  @Flag(help: "Succeed only if some round fails: for checking a planted bug is caught.")
  var expectFailure = false
  @Flag(help: "Say what each round does.") var narrate = false

  func run() async throws {
    let tools = try Tools()
    let backends: [String] =
      switch backend {
      case .lmdb: ["lmdb"]
      case .postgres: ["postgres"]
      case .both: ["lmdb", "postgres"]
      }
    if backends.contains("postgres"), database == nil {
      throw ValidationError("PostgreSQL rounds need --database URL")
    }
    var generator = SeededGenerator(seed: seed)
    var failures: [String] = []
    var losses = 0
    let start = ContinuousClock.now
    for backend in backends {
      var tally = NetworkTally()
      var ran = 0
      for round in 1...rounds {
        ran += 1
        let root = FileManager.default.temporaryDirectory
          .appendingPathComponent("vlog-network-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        // A temporary directory: one that cannot be removed is litter, not a finding.
        defer { try? FileManager.default.removeItem(atPath: root) }
        var round = NetworkRound(
          tools: tools, root: root, round: round, seed: generator.next(),
          database: backend == "postgres" ? database : nil, devices: devices, steps: steps,
          faultRate: faultRate, plant: plant, narrate: narrate)
        do {
          try await round.run()
        } catch {
          failures.append("\(backend) round \(round.round): \(error)")
          print("FAIL \(backend) round \(round.round): \(error)")
          if error is Loss { losses += 1 }
        }
        tally.add(round.tally)
        // A planted bug caught once is caught: the rest of the rounds would only take time.
        if expectFailure, losses > 0 { break }
      }
      print("\(backend): \(ran) rounds; \(tally)")
    }
    let elapsed = ContinuousClock.now - start
    print(
      "\(failures.count) failed rounds in \(elapsed.components.seconds) s"
        + (plant.map { " (planted: \($0))" } ?? "")
        + (failures.isEmpty
          ? ": nothing lost, no outbox left with events after the first sync on the healed "
            + "network, every digest equal, verify clean" : ""))
    if expectFailure {
      // Caught means a change lost or stuck: a round that failed otherwise (a server that
      // did not start) shows nothing about the bug.
      guard losses > 0 else {
        throw ValidationError("the planted bug was not caught in \(rounds) rounds")
      }
      print("the planted bug was caught: \(losses) rounds found changes lost or stuck")
    } else if !failures.isEmpty {
      throw ExitCode.failure
    }
  }
}

/// A change lost, stuck or in the wrong place: what the harness looks for (any other failure,
/// such as a server that does not start, is a ``Failure``).
struct Loss: Error, CustomStringConvertible {
  let description: String
  init(_ description: String) { self.description = description }
}

/// What rounds did: actions, faults and kills, and what the checks found.
struct NetworkTally: CustomStringConvertible {
  var faults: [NetworkFault: Int] = [:]
  var writes = 0
  var syncs = 0
  var failedSyncs = 0
  var liveSessions = 0
  var deviceKills = 0
  var serverKills = 0
  var events = 0

  mutating func add(_ other: NetworkTally) {
    faults.merge(other.faults, uniquingKeysWith: +)
    writes += other.writes
    syncs += other.syncs
    failedSyncs += other.failedSyncs
    liveSessions += other.liveSessions
    deviceKills += other.deviceKills
    serverKills += other.serverKills
    events += other.events
  }

  var description: String {
    let exchanges = faults.values.reduce(0, +)
    let broken = NetworkFault.allCases.filter { $0 != .none && faults[$0, default: 0] > 0 }
      .map { "\(faults[$0]!) \($0.rawValue)" }.joined(separator: ", ")
    return "\(writes) changes written, \(syncs) syncs (\(failedSyncs) failed), "
      + "\(liveSessions) live sessions; \(exchanges) exchanges through the proxy, "
      + "\(exchanges - faults[.none, default: 0]) broken (\(broken)); \(deviceKills) devices "
      + "and \(serverKills) servers killed; \(events) events on the devices at the rounds' ends"
  }
}

/// One round: a server, the proxy, the devices, the chaos, the heal, the checks.
struct NetworkRound {
  let tools: Tools
  let root: String
  let round: Int
  let seed: UInt64
  let database: String?
  let devices: Int
  let steps: Int
  let faultRate: Int
  let plant: String?
  let narrate: Bool
  var tally = NetworkTally()

  var user: String { "net\(round)x\(seed % 100_000)" }
  let password = "correct horse battery"

  func say(_ line: String) { if narrate { print("  " + line) } }

  /// `vlog serve` on the round's data, on a free port; its child and port.
  func startServer() async throws -> (Child, Int) {
    var arguments = ["serve", "--port", "0", "--password-cost", "10"]
    arguments += ["--sign-ups-per-address", "1000000", "--log-level", "critical"]
    if let database {
      arguments += ["--database", database, "--database-connections", "4"]
    } else {
      arguments += ["--data", root + "/server"]
    }
    let child = try Child(tools.vlog, arguments)
    for _ in 0..<3000 {
      if let url = child.lines.first(where: { $0.contains("serving on ") })?
        .split(separator: " ").last, let port = url.split(separator: ":").last.flatMap({ Int($0) })
      {
        return (child, port)
      }
      try await Task.sleep(for: .milliseconds(10))
    }
    _ = child.kill()
    throw Failure("the server did not start")
  }

  /// A device process's arguments for `action`.
  func device(_ index: Int, _ action: String, proxy: FaultProxy, extra: [String] = [])
    -> [String]
  {
    var arguments = [
      "network-device", "--store", "\(root)/device-\(index)", "--server",
      "http://127.0.0.1:\(proxy.port)", "--user", user, "--password", password, "--action",
      action,
    ]
    if index == devices {
      // The device that stays offline: a year behind, reading protocol version 1.
      arguments += ["--protocol-version", "1", "--days-behind", "365"]
    }
    if let plant { arguments += ["--plant", plant] }
    return arguments + extra
  }

  mutating func run() async throws {
    var (server, port) = try await startServer()
    defer { _ = server.kill() }
    let proxy = try FaultProxy(seed: seed)
    defer { proxy.stop() }
    proxy.serverPort = port
    let caller = APICaller(transport: HTTPTransport(baseURL: "http://127.0.0.1:\(port)"))
    _ = try await caller.createClearAccount(username: user, password: password, cost: .testing)
    // Every device, the offline one too, signs in and syncs once on a good network.
    for index in 0...devices {
      let child = try Child(tools.harness, device(index, "sync", proxy: proxy))
      child.wait()
      guard child.process.terminationStatus == 0 else {
        throw Failure("device \(index) could not sync at the start: \(child.lines)")
      }
    }

    // The bad network: devices act and are killed, the server is killed and restarted.
    proxy.faultRate = faultRate
    var written: [Int: [String]] = [:]
    var generator = SeededGenerator(seed: seed)
    let chaos = ServerChaos()
    let this = self
    let serverTask = Task { [server] in
      var generator = SeededGenerator(seed: this.seed &+ 1)
      var server: Child? = server
      var kills = 0
      while !chaos.isOver {
        try? await Task.sleep(for: .milliseconds(Int.random(in: 800...3000, using: &generator)))
        if chaos.isOver { break }
        _ = server?.kill()
        server = nil
        proxy.cutAll()
        kills += 1
        try? await Task.sleep(for: .milliseconds(Int.random(in: 50...600, using: &generator)))
        // A restart that fails leaves the server down for this turn (a longer outage); the
        // heal starts it, and a server that cannot start then fails the round.
        guard let (restarted, port) = try? await this.startServer() else { continue }
        server = restarted
        proxy.serverPort = port
      }
      return (server, kills)
    }
    let plans = (0...devices).map { index in
      (index, (0..<steps).map { _ in Self.plan(offline: index == devices, using: &generator) })
    }
    let results = await withTaskGroup(of: DeviceOutcome.self) { group in
      for (index, plan) in plans {
        group.addTask { await this.act(index, plan, proxy: proxy) }
      }
      return await group.reduce(into: [DeviceOutcome]()) { $0.append($1) }
    }
    chaos.end()
    let (running, kills) = await serverTask.value
    tally.serverKills = kills
    if let running {
      server = running
    } else {
      (server, port) = try await startServer()
      proxy.serverPort = port
    }
    if let finding = results.flatMap(\.findings).first { throw Loss(finding) }
    if let error = results.flatMap(\.errors).first { throw Failure(error) }
    for outcome in results {
      written[outcome.index, default: []] += outcome.written
      tally.writes += outcome.written.count
      tally.syncs += outcome.syncs
      tally.failedSyncs += outcome.failedSyncs
      tally.liveSessions += outcome.liveSessions
      tally.deviceKills += outcome.kills
    }
    tally.faults = proxy.counts
    say("chaos over: \(tally)")

    // The network heals.
    proxy.faultRate = 0
    tally.events = try await heal(proxy: proxy, written: written)
    _ = server.kill()
    let verify = try Child(
      tools.vlog,
      ["verify"] + (database.map { ["--database", $0] } ?? ["--data", root + "/server"]))
    verify.wait()
    guard verify.process.terminationStatus == 0 else {
      throw Loss("vlog verify of the server: \(verify.lines.suffix(5))")
    }
  }

  /// One action of a device's plan.
  enum Step {
    case write(count: Int)
    case sync
    case live(seconds: Int)
  }

  /// A device's next action, and after how many milliseconds it is killed (nil: it finishes).
  /// The offline device only writes.
  static func plan(offline: Bool, using generator: inout SeededGenerator) -> (Step, Int?) {
    let roll = Int.random(in: 0..<10, using: &generator)
    let step: Step =
      offline || roll < 4
      ? .write(count: Int.random(in: 1...4, using: &generator))
      : roll < 8 ? .sync : .live(seconds: Int.random(in: 1...3, using: &generator))
    let kill =
      Int.random(in: 0..<4, using: &generator) == 0
      ? Int.random(in: 20...1500, using: &generator) : nil
    return (step, kill)
  }
}

/// What a device's actions came to.
struct DeviceOutcome: Sendable {
  let index: Int
  /// What its actions found wrong.
  var findings: [String] = []
  /// What stopped its actions that is the harness's trouble, not the engine's.
  var errors: [String] = []
  var written: [String] = []
  var syncs = 0
  var failedSyncs = 0
  var liveSessions = 0
  var kills = 0
}

/// Whether the chaos is over, for the task that kills the server.
final class ServerChaos: @unchecked Sendable {
  private let lock = NSLock()
  private var over = false
  var isOver: Bool {
    lock.lock()
    defer { lock.unlock() }
    return over
  }
  func end() {
    lock.lock()
    over = true
    lock.unlock()
  }
}

extension NetworkRound {
  /// Runs a device's plan, one process per action, killing those the plan says to.
  func act(_ index: Int, _ plan: [(Step, Int?)], proxy: FaultProxy) async -> DeviceOutcome {
    var outcome = DeviceOutcome(index: index)
    for (step, kill) in plan {
      let arguments: [String]
      switch step {
      case .write(let count):
        arguments = device(index, "write", proxy: proxy, extra: ["--count", "\(count)"])
      case .sync:
        arguments = device(index, "sync", proxy: proxy)
        outcome.syncs += 1
      case .live(let seconds):
        arguments = device(index, "live", proxy: proxy, extra: ["--seconds", "\(seconds)"])
        outcome.liveSessions += 1
      }
      let child: Child
      do {
        child = try Child(tools.harness, arguments)
      } catch {
        outcome.errors.append("device \(index) could not start: \(error)")
        continue
      }
      if let kill {
        try? await Task.sleep(for: .milliseconds(kill))
        if child.kill() { outcome.kills += 1 }
      } else if await !finishes(child, within: 120) {
        // A device must give up on a dead network by itself.
        outcome.findings.append("device \(index) hung for 120 s in \(step)")
      }
      outcome.written += child.lines.filter { $0.hasPrefix("wrote ") }
      guard case .sync = step else { continue }
      guard kill == nil, child.process.terminationStatus == 0,
        let line = child.lines.last(where: { $0.hasPrefix("synced ") })
      else {
        outcome.failedSyncs += 1
        continue
      }
      // A sync that ran to its end: what the server lacked went from the outbox (its device
      // wrote nothing meanwhile), never by repair. (It may fetch by repair what others pushed
      // while it ran.)
      if let repaired = SyncLine(line).count("repaired"), repaired != 0 {
        outcome.findings.append(
          "device \(index), a sync amid the faults: \(repaired) events the server lacked were "
            + "not in the outbox (pushed by repair): lost by the outbox")
      }
    }
    return outcome
  }

  /// Waits for the child to end by itself; after `seconds`, kills it and returns false.
  func finishes(_ child: Child, within seconds: Int) async -> Bool {
    for _ in 0..<(seconds * 20) where child.process.isRunning {
      try? await Task.sleep(for: .milliseconds(50))
    }
    if child.process.isRunning {
      _ = child.kill()
      return false
    }
    child.wait()
    return true
  }
}

extension NetworkRound {
  /// A device's `synced …` line.
  struct SyncLine {
    var fields: [String: String] = [:]
    init(_ line: String) {
      for field in line.split(separator: " ").dropFirst() {
        let parts = field.split(separator: "=", maxSplits: 1)
        if parts.count == 2 { fields[String(parts[0])] = String(parts[1]) }
      }
    }
    func count(_ name: String) -> Int? { Int(fields[name] ?? "") }
  }

  /// The network has healed: each device syncs once, which must empty its outbox (the bound),
  /// then once more, to take what the others pushed; neither sync may repair or fetch by
  /// comparing digests. Then every digest must be the server's, every change a device wrote
  /// on every device, and `vlog verify` clean on every store. Returns the events each holds.
  func heal(proxy: FaultProxy, written: [Int: [String]]) async throws -> Int {
    func sync(_ index: Int, _ pass: String) async throws -> SyncLine {
      let child = try Child(tools.harness, device(index, "sync", proxy: proxy))
      guard await finishes(child, within: 120), child.process.terminationStatus == 0,
        let line = child.lines.last(where: { $0.hasPrefix("synced ") })
      else {
        throw Loss("device \(index): the \(pass) sync after the heal failed")
      }
      let synced = SyncLine(line)
      guard let repaired = synced.count("repaired"), let fetched = synced.count("fetched"),
        synced.count("outbox") != nil
      else {
        throw Failure("device \(index) printed '\(line)'")
      }
      if repaired != 0 {
        throw Loss(
          "device \(index), \(pass) sync after the heal: \(repaired) events the server lacked "
            + "were not in the outbox (pushed by repair): lost by the outbox")
      }
      if fetched != 0 {
        throw Loss(
          "device \(index), \(pass) sync after the heal: \(fetched) events the pages skipped "
            + "(fetched by repair)")
      }
      return synced
    }
    for index in 0...devices {
      let first = try await sync(index, "first")
      if let stuck = first.count("outbox"), stuck != 0 {
        throw Loss("device \(index): \(stuck) events stuck in the outbox")
      }
    }
    var digests = Set<String>()
    for index in 0...devices {
      let second = try await sync(index, "second")
      digests.insert(second.fields["digest"] ?? "")
      digests.insert(second.fields["server"] ?? "")
    }
    guard digests.count == 1 else {
      throw Loss("the devices and the server end with \(digests.count) different digests")
    }
    var events = 0
    for index in 0...devices {
      let path = "\(root)/device-\(index)"
      let verify = try Child(tools.vlog, ["verify", "--store", path])
      verify.wait()
      guard verify.process.terminationStatus == 0 else {
        throw Loss("vlog verify of device \(index): \(verify.lines.suffix(5))")
      }
      let store = try NoteStore.open(at: path)
      defer { store.close() }
      events = try store.eventCount()
      try Self.checkWritten(written, on: store, device: index, offline: devices)
    }
    return events
  }

  /// Every change a device said it wrote is on `store`: its note there (or deleted), and its
  /// text among the note's versions. The offline device's texts, a year old, may have been
  /// erased by retention where others replaced them; their notes must be there.
  static func checkWritten(
    _ written: [Int: [String]], on store: NoteStore, device: Int, offline: Int
  ) throws {
    var deleted = Set<NoteID>()
    for logged in try store.events(after: 0) {
      if case .noteDeleted(let note) = logged.event.change { deleted.insert(note) }
    }
    for (writer, lines) in written {
      for line in lines {
        let parts = line.split(separator: " ")
        guard parts.count == 3, let note = NoteID(String(parts[1])) else {
          throw Failure("device \(writer) printed '\(line)'")
        }
        if deleted.contains(note) { continue }
        guard try store.note(note) != nil else {
          throw Loss("device \(writer) wrote note \(note); device \(device) lacks it")
        }
        let text = String(parts[2])
        guard text != "-", writer != offline else { continue }
        guard try store.versions(of: note).contains(where: { $0.text == text }) else {
          throw Loss("device \(writer) wrote '\(text)' to \(note); device \(device) lacks it")
        }
      }
    }
  }
}
