import ArgumentParser
import Foundation
import VLog
import VLogSync

/// One device of the network harness, as a process of its own (so that it can be killed with
/// SIGKILL): an app that embeds VLog, writing and syncing one store through the faulty
/// network. Each line it prints is a fact the harness checks later.
struct NetworkDevice: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "network-device", abstract: "One device's action in the network harness.")

  enum Action: String, ExpressibleByArgument {
    /// Writes `--count` changes, printing `wrote NOTE TEXT` once each is committed.
    case write
    /// Syncs once, printing `synced …` with the report.
    case sync
    /// Runs `AutomaticSync` with its live channel for `--seconds`, writing now and then.
    case live
  }

  @Option(help: "The store's directory.") var store: String
  @Option(help: "The server's URL (the proxy's).") var server: String
  @Option(help: "The account's user name.") var user: String
  @Option(help: "The account's password.") var password: String
  @Option(help: "write, sync or live.") var action: Action
  @Option(help: "Changes to write.") var count = 3
  @Option(help: "Seconds of automatic sync.") var seconds = 2
  @Option(help: "A seed for what to write.") var seed: UInt64 = 1
  @Option(help: "The protocol version the device reads, as an older app would.")
  var protocolVersion: Int?
  @Option(help: "Days the device's clock is behind.") var daysBehind = 0
  @Option(help: "A bug to plant: acknowledge-before-response.") var plant: String?

  func run() async throws {
    let offset = -Double(daysBehind) * 86_400
    var options = NoteStore.Options()
    options.dependencies = NoteStore.Dependencies(
      now: { Date().addingTimeInterval(offset) },
      makeIdentifier: NoteStore.Dependencies.live.makeIdentifier)
    let store = try NoteStore.open(at: self.store, options: options)
    defer { store.close() }
    switch action {
    case .write:
      var generator = SystemRandomNumberGenerator()
      for index in 0..<count {
        let (note, text) = try await Self.write(on: store, index: index, using: &generator)
        Self.say("wrote \(note) \(text)")
      }
    case .sync:
      let report = try await account(for: store).sync()
      Self.say(
        "synced pushed=\(report.pushed) repaired=\(report.repaired) fetched=\(report.fetched) "
          + "outbox=\(try store.outboxCount()) inSync=\(report.inSync) "
          + "digest=\(try store.eventSetDigest()) server=\(report.serverEventSetDigest)")
    case .live:
      let automatic = AutomaticSync(account: try account(for: store))
      await automatic.start()
      var generator = SystemRandomNumberGenerator()
      let end = ContinuousClock.now.advanced(by: .seconds(seconds))
      var index = 0
      while ContinuousClock.now < end {
        let (note, text) = try await Self.write(on: store, index: index, using: &generator)
        Self.say("wrote \(note) \(text)")
        index += 1
        try await Task.sleep(for: .milliseconds(Int.random(in: 100...600, using: &generator)))
      }
      await automatic.stop()
    }
  }

  /// Writes a line to standard output at once: a line the harness reads is one the device
  /// got to before it was killed.
  static func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
  }

  /// The device's account, through the proxy, keeping its token in the store's credentials
  /// file and signing in with the password when it must.
  func account(for store: NoteStore) throws -> SyncAccount {
    var transport: any Transport = HTTPTransport(baseURL: server, timeout: .seconds(10))
    if let protocolVersion {
      transport = OlderProtocol(base: transport, version: protocolVersion)
    }
    if plant == "acknowledge-before-response" {
      transport = AcknowledgeBeforeResponse(base: transport, store: store)
    }
    return try SyncAccount(
      store: store, transport: transport,
      credentials: Credentials(username: user, password: password),
      credentialStore: FileCredentialStore.file(for: store),
      stateFile: SyncAccount.stateFile(for: store),
      encryption: EncryptionOptions(cost: .testing, isRequired: false))
  }

  /// One user change: a new note, or an edit of the text, the tags or the archive flag of a
  /// note the store has, or its deletion; returns the note and the text it wrote ("-" for a
  /// change of another field), unique to this change.
  static func write(
    on store: NoteStore, index: Int, using generator: inout some RandomNumberGenerator
  ) async throws -> (NoteID, String) {
    let text = "t\(UInt32.random(in: 0...UInt32.max, using: &generator))-\(index)"
    let notes = try store.timeline(limit: 50).map(\.id)
    let roll = Int.random(in: 0..<20, using: &generator)
    guard let note = notes.randomElement(using: &generator), roll >= 6 else {
      let note = try await store.write { $0.createNote(text: text, tags: ["net"]) }
      return (note, text)
    }
    try await store.write { edits in
      switch roll {
      case 6..<16: edits.setText(text, of: note)
      case 16: edits.setTags(["net", "n\(index % 3)"], of: note)
      case 17, 18: edits.setArchived(roll == 17, of: note)
      default: edits.deleteNote(note)
      }
    }
    return (note, (6..<16).contains(roll) ? text : "-")
  }
}

/// A device that reads an older version of the protocol: every request names that version.
struct OlderProtocol: Transport {
  let base: any Transport
  let version: Int
  var server: String { base.server }

  func send(_ request: TransportRequest) async throws -> TransportResponse {
    var request = request
    if request.headers["vlog-protocol"] != nil { request.headers["vlog-protocol"] = "\(version)" }
    return try await base.send(request)
  }

  func open(_ request: TransportRequest) async throws -> TransportStream {
    try await base.open(request)
  }
}

/// The planted bug: a push acknowledges the outbox as it is sent, before its answer is read.
/// A push the network loses leaves its events out of the outbox and off the server.
struct AcknowledgeBeforeResponse: Transport {
  let base: any Transport
  let store: NoteStore
  var server: String { base.server }

  func send(_ request: TransportRequest) async throws -> TransportResponse {
    if request.path == "/v1/sync", let last = try store.outbox().last?.sequence {
      _ = try await store.ingest([], acknowledgingThrough: last)
    }
    return try await base.send(request)
  }

  func open(_ request: TransportRequest) async throws -> TransportStream {
    try await base.open(request)
  }
}
