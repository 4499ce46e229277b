// Sync through the HTTP server on loopback: the initial sync of 100,000 events to a new replica,
// the push of as many (each to a new server), and one edit's round trip, each next to its
// reference measured in the same run (an empty HTTP round trip to the same server; ingesting
// the same events with no network; the same sync of an account that is not end-to-end
// encrypted).

import Benchmark
import BenchmarkSupport
import Foundation
import Logging
import VLog
import VLogServer
import VLogSync

/// Events in the account for the initial sync: `VLOG_SYNC_EVENTS`, 100,000 by default.
let syncEvents =
  ProcessInfo.processInfo.environment["VLOG_SYNC_EVENTS"].flatMap(Int.init) ?? 100_000

let credentials = Credentials(username: "bench", password: "benchmark password for quiet ledgers")

/// The servers' logger: critical messages only.
let quietLogger = {
  var logger = Logger(label: "bench")
  logger.logLevel = .critical
  return logger
}()

/// A durable server with one account holding `syncEvents` events, served on loopback for the
/// whole process, and the events themselves.
final class Fixture: Sendable {
  let url: String
  let events: [Event]
  let server: SyncServer

  private init(url: String, events: [Event], server: SyncServer) {
    self.url = url
    self.events = events
    self.server = server
  }

  static func make() async throws -> Fixture {
    let server = try SyncServer.open(
      dataDirectory: temporaryPath("sync-server"),
      configuration: .init(passwordCost: PasswordCost(logRounds: 10)), logger: quietLogger)
    let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
    Task.detached {
      try await server.run(host: "127.0.0.1", port: 0) { continuation.yield($0) }
    }
    guard let port = await ports.first(where: { _ in true }) else {
      fatalError("the server did not start")
    }
    let url = "http://127.0.0.1:\(port)"
    let source = try await makeSource()
    let events = try source.events().map(\.event)
    let account = try SyncAccount(
      store: source, transport: HTTPTransport(baseURL: url), credentials: credentials)
    try await account.createAccount()
    try await account.sync()
    source.close()
    // The same workload in an end-to-end encrypted account.
    let sealedSource = try await makeSource()
    let encrypted = try SyncAccount(
      store: sealedSource, transport: HTTPTransport(baseURL: url),
      credentials: encryptedCredentials, encryption: .standard)
    try await encrypted.createAccount()
    try await encrypted.sync()
    sealedSource.close()
    return Fixture(url: url, events: events, server: server)
  }
}

let encryptedCredentials = Credentials(
  username: "bench-e2e", password: "benchmark password for sealed notes")

/// A replica with `syncEvents` events of its own, in its outbox: notes with a few hundred
/// bytes of text each, then text edits.
func makeSource() async throws -> NoteStore {
  let source = try NoteStore.open(
    at: temporaryPath("sync-source"), options: .init(durability: .noSync, mapSize: 1 << 30))
  var made = 0
  var notes: [NoteID] = []
  while made < syncEvents {
    let batch = min(10_000, syncEvents - made)
    notes += try await source.write { changes in
      (0..<batch).compactMap { index -> NoteID? in
        if notes.count < 10_000 && index % 2 == 0 {
          return changes.createNote(text: "note \(made + index)")
        }
        let target = notes.isEmpty ? nil : notes[(made + index) % notes.count]
        if let target { changes.setText(String(repeating: "text ", count: 40), of: target) }
        return nil
      }
    }
    made = Int(try source.lastSequence())
  }
  return source
}

/// Builds each fixture once per process.
actor Fixtures {
  static let shared = Fixtures()
  private var fixture: Fixture?
  private var device: RoundTripDevice?

  func server() async throws -> Fixture {
    if let fixture { return fixture }
    let made = try await Fixture.make()
    fixture = made
    return made
  }

  func roundTripDevice() async throws -> RoundTripDevice {
    if let device { return device }
    let made = try await RoundTripDevice.make(url: try await server().url)
    device = made
    return made
  }
}

let benchmarks: @Sendable () -> Void = {
  Benchmark.defaultConfiguration = .init(
    metrics: standardMetrics, timeUnits: .milliseconds, maxDuration: .seconds(60),
    maxIterations: 5)

  Benchmark("initial sync of \(syncEvents) events · 1 ingest, no network") { benchmark in
    let fixture = try await Fixtures.shared.server()
    let path = temporaryPath("sync-ingest")
    defer { removeTemporaryItem(atPath: path) }
    let store = try NoteStore.open(at: path, options: .init(mapSize: 1 << 30))
    defer { store.close() }
    let start = ContinuousClock.now
    benchmark.startMeasurement()
    for offset in stride(from: 0, to: fixture.events.count, by: 1000) {
      _ = try await store.ingest(
        Array(fixture.events[offset..<min(offset + 1000, fixture.events.count)]))
    }
    benchmark.stopMeasurement()
    benchmark.measurement(.eventsPerSecond, perSecond(fixture.events.count, since: start))
  }

  for encrypted in [false, true] {
    let name = encrypted ? "3 VLog over HTTP, end-to-end encrypted" : "2 VLog over HTTP"
    Benchmark("initial sync of \(syncEvents) events · \(name)") { benchmark in
      let fixture = try await Fixtures.shared.server()
      let path = temporaryPath("sync-replica")
      defer { removeTemporaryItem(atPath: path) }
      let store = try NoteStore.open(at: path, options: .init(mapSize: 1 << 30))
      defer { store.close() }
      let account = try SyncAccount(
        store: store, transport: HTTPTransport(baseURL: fixture.url),
        credentials: encrypted ? encryptedCredentials : credentials, pageSize: 5000,
        encryption: encrypted ? .standard : nil)
      // Signing in stretches an encrypted account's password and opens its keys: once per
      // device, not measured.
      try await account.signIn()
      let start = ContinuousClock.now
      benchmark.startMeasurement()
      let report = try await account.sync()
      benchmark.stopMeasurement()
      precondition(report.applied == fixture.events.count && report.inSync, "\(report)")
      benchmark.measurement(.eventsPerSecond, perSecond(fixture.events.count, since: start))
    }
  }

  for encrypted in [false, true] {
    Benchmark(
      "push of \(syncEvents) events · \(encrypted ? "2 end-to-end encrypted" : "1 clear")"
    ) { benchmark in
      // Each push goes to a new server, so that no run pushes into a log grown by the runs
      // before it.
      let source = try await makeSource()
      let directory = temporaryPath("push-server")
      let server = try SyncServer.open(
        dataDirectory: directory,
        configuration: .init(passwordCost: PasswordCost(logRounds: 10)), logger: quietLogger)
      defer {
        server.close()
        source.close()
        removeTemporaryItem(atPath: directory)
        removeTemporaryItem(atPath: source.path)
      }
      let measured = Measured(benchmark)
      try await server.serving { port in
        let benchmark = measured.benchmark
        let account = try SyncAccount(
          store: source, transport: HTTPTransport(baseURL: "http://127.0.0.1:\(port)"),
          credentials: Credentials(
            username: "push", password: "benchmark password for sealed notes"),
          encryption: encrypted ? .standard : nil)
        try await account.createAccount()
        try await account.signIn()
        let count = Int(try source.lastSequence())
        let start = ContinuousClock.now
        benchmark.startMeasurement()
        let report = try await account.sync()
        benchmark.stopMeasurement()
        precondition(report.pushed == count && report.inSync, "\(report)")
        benchmark.measurement(.eventsPerSecond, perSecond(count, since: start))
      }
    }
  }

  // A clear account's sign-in on loopback, the server hashing at its standard cost (N = 2¹⁷):
  // before, the password itself, which the server hashed; now, the parameters asked, the
  // password stretched on the device (N = 2¹⁸) and the secret hashed by the server. Each run
  // makes its account on a new server (the sign-in of the earlier form moves nothing).
  for form in ["1 before: the password itself", "2 now: a secret stretched on the device"] {
    Benchmark(
      "clear account's sign-in · \(form)",
      configuration: .init(
        metrics: [.wallClock, .cpuTotal], timeUnits: .milliseconds, warmupIterations: 1,
        maxIterations: 5)
    ) { benchmark in
      let directory = temporaryPath("sign-in-server")
      let server = try SyncServer.open(
        dataDirectory: directory, configuration: .init(passwordCost: .standard),
        logger: quietLogger)
      defer {
        server.close()
        removeTemporaryItem(atPath: directory)
      }
      let measured = Measured(benchmark)
      let before = form.hasPrefix("1")
      try await server.serving { port in
        let benchmark = measured.benchmark
        let caller = APICaller(transport: HTTPTransport(baseURL: "http://127.0.0.1:\(port)"))
        let credentials = Credentials(
          username: "sign-in", password: "benchmark password for sign-ins")
        if before {
          _ = try await caller.createAccount(credentials).get()
        } else {
          try await caller.createClearAccount(
            username: credentials.username, password: credentials.password)
        }
        benchmark.startMeasurement()
        if before {
          blackHole(try await caller.signIn(credentials).get())
        } else {
          blackHole(
            try await caller.signIn(
              username: credentials.username, password: credentials.password))
        }
        benchmark.stopMeasurement()
      }
    }
  }

  Benchmark(
    "one edit's round trip · 1 empty HTTP round trip",
    configuration: .init(timeUnits: .microseconds, maxDuration: .seconds(10), maxIterations: 300)
  ) { benchmark in
    let transport = HTTPTransport(baseURL: try await Fixtures.shared.server().url)
    let request = TransportRequest(method: "GET", path: "/v1/blobs/nothex")
    benchmark.startMeasurement()
    _ = try await transport.send(request)
    benchmark.stopMeasurement()
  }

  Benchmark(
    "one edit's round trip · 2 VLog (edit pushed, durable on both sides)",
    configuration: .init(timeUnits: .microseconds, maxDuration: .seconds(10), maxIterations: 300)
  ) { benchmark in
    let device = try await Fixtures.shared.roundTripDevice()
    try await device.store.write {
      $0.setText("edit \(UInt64.random(in: 0...UInt64.max))", of: device.note)
    }
    benchmark.startMeasurement()
    let report = try await device.account.sync()
    benchmark.stopMeasurement()
    precondition(report.pushed == 1 && report.calls == 1, "\(report)")
  }
}

/// A durable replica of a second account with one note, in sync, for the round-trip benchmark.
final class RoundTripDevice: Sendable {
  let store: NoteStore
  let account: SyncAccount
  let note: NoteID

  private init(store: NoteStore, account: SyncAccount, note: NoteID) {
    self.store = store
    self.account = account
    self.note = note
  }

  static func make(url: String) async throws -> RoundTripDevice {
    let store = try NoteStore.open(at: temporaryPath("sync-device"))
    let account = try SyncAccount(
      store: store, transport: HTTPTransport(baseURL: url),
      credentials: Credentials(
        username: "roundtrip", password: "benchmark password for quiet ledgers"))
    let note = try await store.write { $0.createNote(text: "round trip") }
    try await account.createAccount()
    try await account.sync()
    return RoundTripDevice(store: store, account: account, note: note)
  }
}

/// A benchmark measured in the body of `SyncServer.serving`, which the package's `Benchmark`,
/// not `Sendable`, cannot enter by itself: the body runs once, while its caller waits.
struct Measured: @unchecked Sendable {
  let benchmark: Benchmark

  init(_ benchmark: Benchmark) { self.benchmark = benchmark }
}
