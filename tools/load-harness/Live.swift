import ArgumentParser
import AsyncHTTPClient
import Foundation
import VLog
import VLogSync

#if canImport(Glibc)
  import Glibc
#endif

/// The live channel's measurements: how soon an edit reaches another device's screen, how soon
/// it reaches a hundred, what open channels cost a server that does nothing, and what they cost
/// one under load.
extension Load {
  /// Device A edits a note and pushes; device B, on another instance when there are several,
  /// holds the live channel through `AutomaticSync` and watches the note with a live query.
  /// The time from A's push to B's query yielding the new text, `edits` times.
  func editToScreen(urls: [String], http: HTTPClient, run: String) async throws {
    try await withDevices(count: 2, urls: urls, http: http, name: "screen\(run)") { devices in
      let (writer, reader) = (devices[0], devices[1])
      let note = try await writer.store.write { $0.createNote(text: "edit 0") }
      _ = try await writer.account.sync()
      let screen = Screen(stores: [reader.store], note: note)
      defer { screen.stop() }
      guard await screen.arrival(of: "edit 0", on: 0) != nil else {
        throw ValidationError("the reader never showed the note")
      }
      var latencies: [Double] = []
      for index in 1...roundTrips {
        let text = "edit \(index)"
        try await writer.store.write { $0.setText(text, of: note) }
        let started = ContinuousClock.now
        _ = try await writer.account.sync()
        guard let shown = await screen.arrival(of: text, on: 0) else {
          throw ValidationError("the reader never showed \(text)")
        }
        latencies.append(Self.milliseconds(shown - started))
      }
      latencies.sort()
      print(
        "\(backend): edit to screen (A pushes one edit; B's live query yields it), "
          + "\(roundTrips) edits: p50 \(format(Self.percentile(latencies, 0.5))) ms, "
          + "p99 \(format(Self.percentile(latencies, 0.99))) ms")
    }
  }

  /// One device pushes an edit to an account whose `fanOut` other devices each hold a live
  /// channel and watch the note: the time until the last of them shows it, over `rounds`
  /// edits.
  func fanOut(urls: [String], http: HTTPClient, run: String, rounds: Int = 20) async throws {
    try await withDevices(count: fanOut + 1, urls: urls, http: http, name: "fan\(run)") {
      devices in
      let writer = devices[0]
      let readers = Array(devices.dropFirst())
      let note = try await writer.store.write { $0.createNote(text: "edit 0") }
      _ = try await writer.account.sync()
      let screen = Screen(stores: readers.map(\.store), note: note)
      defer { screen.stop() }
      for index in readers.indices {
        guard await screen.arrival(of: "edit 0", on: index) != nil else {
          throw ValidationError("reader \(index) never showed the note")
        }
      }
      var lasts: [Double] = []
      for round in 1...rounds {
        let text = "edit \(round)"
        try await writer.store.write { $0.setText(text, of: note) }
        let started = ContinuousClock.now
        _ = try await writer.account.sync()
        var last = started
        for index in readers.indices {
          guard let shown = await screen.arrival(of: text, on: index) else {
            throw ValidationError("reader \(index) never showed \(text)")
          }
          last = max(last, shown)
        }
        lasts.append(Self.milliseconds(last - started))
      }
      lasts.sort()
      print(
        "\(backend): fan-out, one edit to \(readers.count) devices holding live channels, "
          + "\(rounds) edits: the last device shows it after p50 "
          + "\(format(Self.percentile(lasts, 0.5))) ms, max \(format(lasts.last ?? 0)) ms")
    }
  }

  /// `count` devices of one new account, each a store of its own with an `AutomaticSync`
  /// holding the live channel, spread over the instances; `body` runs once every channel is
  /// open.
  func withDevices(
    count: Int, urls: [String], http: HTTPClient, name: String,
    _ body: ([(store: NoteStore, account: SyncAccount)]) async throws -> Void
  ) async throws {
    let root = FileManager.default.temporaryDirectory
      .appendingPathComponent("vlog-live-\(UUID().uuidString)").path
    // Clean-up of the temporary directory: one left behind is only clutter.
    defer { try? FileManager.default.removeItem(atPath: root) }
    let credentials = Credentials(username: name, password: "correct horse battery")
    let transports = urls.map { HTTPTransport(baseURL: $0, client: http) }
    _ = try await APICaller(transport: transports[0]).createClearAccount(
      username: credentials.username, password: credentials.password, cost: .testing)
    var devices: [(store: NoteStore, account: SyncAccount)] = []
    var automatics: [AutomaticSync<ContinuousClock>] = []
    defer { for device in devices { device.store.close() } }
    for index in 0..<count {
      // Durable stores, as an app's: the reader's commit of what it pulls is in the figure.
      let store = try NoteStore.open(at: "\(root)/device-\(index)")
      let account = try SyncAccount(
        store: store, transport: transports[(index + 1) % transports.count],
        credentials: credentials,
        encryption: EncryptionOptions(cost: .testing, isRequired: false))
      try await account.signIn()
      devices.append((store, account))
      // The writer syncs by hand, so that its push is what the clock starts at.
      if index > 0 {
        let automatic = AutomaticSync(account: account)
        await automatic.start()
        automatics.append(automatic)
      }
    }
    for automatic in automatics {
      while await automatic.status.liveChannel != .open {
        try await Task.sleep(for: .milliseconds(10))
      }
    }
    do {
      try await body(devices)
    } catch {
      for automatic in automatics { await automatic.stop() }
      throw error
    }
    for automatic in automatics { await automatic.stop() }
  }

  /// `channels` live channels held open by `holders` other processes (this program with
  /// `--hold`), on the first server: its memory per channel, and its CPU while nothing
  /// happens for one keep-alive period (pings included); then one channel past the cap is
  /// refused and a sync call is still answered.
  func idleChannels(urls: [String], servers: [Int32], http: HTTPClient, run: String)
    async throws
  {
    let caller = APICaller(transport: HTTPTransport(baseURL: urls[0], client: http))
    // Each account holds at most 128 channels by default: enough accounts for all.
    let perAccount = 100
    var tokens: [String] = []
    for account in 0..<(liveChannels + perAccount - 1) / perAccount {
      let credentials = Credentials(
        username: "idle\(run)x\(account)", password: "correct horse battery")
      _ = try await caller.createClearAccount(
        username: credentials.username, password: credentials.password, cost: .testing)
      tokens.append(
        try await caller.signIn(
          username: credentials.username, password: credentials.password, floor: .testing
        ).session.token)
    }
    // The channels of the measurements before have ended (their devices stopped): how long
    // that took is how long a stopped device's channel holds a place.
    let waited = ContinuousClock.now
    while try await openChannels(urls[0], http: http) > 0 {
      guard ContinuousClock.now - waited < .seconds(60) else {
        throw ValidationError("the stopped devices' channels stayed open for a minute")
      }
      try await Task.sleep(for: .milliseconds(50))
    }
    let drained = Self.milliseconds(ContinuousClock.now - waited)
    try await Task.sleep(for: .seconds(1))
    let before = Memory(pids: [servers[0]])
    let tokenFile = FileManager.default.temporaryDirectory
      .appendingPathComponent("vlog-idle-\(run).txt").path
    // Clean-up, as above.
    defer { try? FileManager.default.removeItem(atPath: tokenFile) }
    // One line per channel: the token it opens with.
    let lines = (0..<liveChannels).map { tokens[$0 / perAccount] }
    let program = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    var holders: [Process] = []
    defer {
      for holder in holders {
        holder.terminate()
        holder.waitUntilExit()
      }
    }
    let share = (liveChannels + holderProcesses - 1) / holderProcesses
    for index in 0..<holderProcesses {
      let mine = Array(lines.dropFirst(index * share).prefix(share))
      guard !mine.isEmpty else { continue }
      let file = tokenFile + ".\(index)"
      try mine.joined(separator: "\n").write(toFile: file, atomically: true, encoding: .utf8)
      let holder = Process()
      holder.executableURL = program
      holder.arguments = ["--hold", file, "--hold-url", urls[0]]
      let output = Pipe()
      holder.standardOutput = output
      try holder.run()
      holders.append(holder)
      // "holding N" once every channel is open.
      let said = firstLine(of: output)
      // The holder has read its file; a file left behind is only clutter in the temporary
      // directory.
      try? FileManager.default.removeItem(atPath: file)
      guard said.hasPrefix("holding") else {
        throw ValidationError("a holder process failed: \(said)")
      }
    }
    // Idle means after what the opening set going: the database pool schedules a keep-alive
    // and an idle timer each time it takes a connection back, and each stays armed until it
    // would fire, cancelled or not (a sleeping task's timer on Linux), so the two queries of
    // each opening leave timers that fire for a minute after.
    try await Task.sleep(for: .seconds(max(2, settle)))
    let after = Memory(pids: [servers[0]])
    let period = 25.0
    let cpuBefore = cpuSeconds(of: servers[0])
    try await Task.sleep(for: .seconds(period))
    let cpu = (cpuSeconds(of: servers[0]) - cpuBefore) / period
    let perChannel = Double(after.anonymous - before.anonymous) * 1024 / Double(liveChannels)
    // One more is refused (the server runs with --max-live-channels at the count), and a
    // request is still served.
    let refused = await caller.openLive(token: tokens[0])
    let served = await caller.sync(SyncPush(cursor: 0, events: []), token: tokens[0])
    print(
      "\(backend): \(liveChannels) idle live channels from \(holders.count) processes: "
        + "server memory \(String(format: "%.1f", perChannel / 1024)) KiB per channel "
        + "(\(before) before, \(after) after); CPU \(String(format: "%.2f", cpu * 100)) % of "
        + "one core over \(Int(period)) s (one keep-alive period, pings included, from "
        + "\(max(2, settle)) s after the channels opened); one more "
        + "channel: \(refused.status.map(String.init) ?? "no answer"); a sync call meanwhile: "
        + "\(served.status.map(String.init) ?? "no answer"); earlier channels ended "
        + "\(String(format: "%.0f", drained)) ms after their devices stopped")
    guard refused.status == 503, served.status == 200 else { throw ExitCode.failure }
  }

  /// The live channels open on the server at `url`, from its metrics.
  func openChannels(_ url: String, http: HTTPClient) async throws -> Int {
    let metrics = try await HTTPTransport(baseURL: url, client: http).send(
      TransportRequest(method: "GET", path: "/metrics"))
    let line = String(decoding: metrics.body, as: UTF8.self).split(separator: "\n").first {
      $0.hasPrefix("vlog_live_channels ")
    }
    return line.flatMap { Double($0.split(separator: " ").last ?? "") }.map { Int($0) } ?? 0
  }

  /// The process's user and system CPU time, in seconds, from /proc.
  func cpuSeconds(of pid: Int32) -> Double {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
      let end = stat.lastIndex(of: ")")
    else { return 0 }
    // After the command's closing parenthesis: state is field 3; utime and stime are 14, 15.
    let fields = stat[stat.index(after: end)...].split(separator: " ")
    guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else {
      return 0
    }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
  }

  /// The CPU seconds of every process of this machine named `postgres` (a database on this
  /// machine: its backends, WAL writer, checkpointer and the rest), and of the children they
  /// waited for.
  func databaseCPUSeconds() -> Double {
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
    var total = 0.0
    for entry in entries {
      guard let pid = Int32(entry),
        let name = try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8),
        name.trimmingCharacters(in: .whitespacesAndNewlines) == "postgres"
      else { continue }
      total += cpuSeconds(of: pid)
    }
    return total
  }

  /// What a holder process does (`--hold FILE --hold-url URL`): opens one live channel per line
  /// of FILE (a token), says "holding N" once all are open, and keeps reading them until it is
  /// terminated.
  func hold(file: String, url: String) async throws {
    let tokens = try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n")
    var configuration = HTTPClient.Configuration()
    configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = tokens.count + 16
    let http = HTTPClient(
      eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    let caller = APICaller(transport: HTTPTransport(baseURL: url, client: http))
    var streams: [TransportStream] = []
    do {
      for token in tokens {
        streams.append(try await caller.openLive(token: String(token)).get())
      }
    } catch {
      try await http.shutdown()
      throw error
    }
    print("holding \(streams.count)")
    fflush(nil)
    await withTaskGroup(of: Void.self) { group in
      for stream in streams {
        group.addTask {
          do { for try await _ in stream.chunks {} } catch {}  // ended: nothing to report
        }
      }
    }
    try await http.shutdown()
  }

  /// Holds a live channel for each load client, reading it, while the load runs: what `load
  /// --live` adds.
  func holdChannels(callers: [APICaller], tokens: [String]) async throws -> [Task<Void, Never>] {
    var readers: [Task<Void, Never>] = []
    for client in 0..<clients {
      let stream = try await callers[client % callers.count].openLive(
        token: tokens[client % tokens.count]
      ).get()
      readers.append(
        Task {
          do { for try await _ in stream.chunks {} } catch {}  // cancelled at the end
        })
    }
    return readers
  }
}

/// What the readers' screens show: each store's live query of one note's text, and when each
/// text first appeared.
final class Screen: Sendable {
  private let watchers: [Task<Void, Never>]
  private let shown: [ShownTexts]

  init(stores: [NoteStore], note: NoteID) {
    let shown = stores.map { _ in ShownTexts() }
    self.shown = shown
    watchers = zip(stores, shown).map { store, texts in
      Task {
        do {
          for try await text in store.observe({ try $0.note(note)?.text }) {
            if let text { await texts.saw(text, at: .now) }
          }
        } catch {}  // the store closed: the run is over
      }
    }
  }

  /// When store `index` first showed `text`; nil if it did not within 10 seconds.
  func arrival(of text: String, on index: Int) async -> ContinuousClock.Instant? {
    let texts = shown[index]
    return await withTaskGroup(of: ContinuousClock.Instant?.self) { group in
      group.addTask { await texts.arrival(of: text) }
      group.addTask {
        try? await Task.sleep(for: .seconds(10))
        return nil
      }
      let first = await group.next() ?? nil
      group.cancelAll()
      await texts.cancelWaits()
      return first
    }
  }

  func stop() { for watcher in watchers { watcher.cancel() } }
}

/// The texts one screen showed, with the instant each first appeared.
actor ShownTexts {
  private var seen: [String: ContinuousClock.Instant] = [:]
  private var waiting: [String: [CheckedContinuation<ContinuousClock.Instant?, Never>]] = [:]

  func saw(_ text: String, at instant: ContinuousClock.Instant) {
    guard seen[text] == nil else { return }
    seen[text] = instant
    for continuation in waiting.removeValue(forKey: text) ?? [] {
      continuation.resume(returning: instant)
    }
  }

  func arrival(of text: String) async -> ContinuousClock.Instant? {
    if let instant = seen[text] { return instant }
    return await withCheckedContinuation { waiting[text, default: []].append($0) }
  }

  /// Ends every wait that has not been answered (with nil).
  func cancelWaits() {
    for continuation in waiting.values.flatMap({ $0 }) { continuation.resume(returning: nil) }
    waiting.removeAll()
  }
}

private func format(_ milliseconds: Double) -> String {
  String(format: "%.2f", milliseconds)
}
