import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import ServerTestSupport
import Synchronization
import Testing
import VLogSync
import VLogTesting

@testable import VLog
@testable import VLogServer

extension SyncServer.Configuration {
  /// Fast password hashing, no fsync, room for the concurrent sign-ins of many simulated
  /// devices, a minute for a call to the database (whose locks a loaded test machine may hold
  /// for seconds) and half of it for a connection (a new one takes seconds when the whole
  /// suite runs on two cores): the server for tests. The throttle's, the readiness check's and
  /// the faults' own tests set their limits.
  static var testing: Self {
    var configuration = Self(
      passwordCost: .testing, durability: .noSync, concurrentPasswordChecks: 64,
      databaseTimeout: .seconds(60))
    // Tests make many accounts from one address; the limit's own test sets it.
    configuration.signUpsPerAddressPerHour = .max
    configuration.databaseConnectionWait = .seconds(30)
    return configuration
  }
}

/// A seeded source of "random" bytes, so a simulation replays identically.
final class SeededBytes: Sendable {
  private let identifiers: SeededIdentifiers
  init(seed: UInt64) { identifiers = SeededIdentifiers(seed: seed) }
  func next(_ count: Int) -> [UInt8] {
    var bytes: [UInt8] = []
    while bytes.count < count { bytes += identifiers.next().bytes }
    return Array(bytes.prefix(count))
  }
}

/// The servers' logger: silent, or everything with `VLOG_TEST_LOG=1` in the environment.
let quietLogger: Logger = {
  var logger = Logger(label: "VLogServerTests")
  logger.logLevel = ProcessInfo.processInfo.environment["VLOG_TEST_LOG"] != nil ? .debug : .critical
  return logger
}()

/// Opens a server on `backend` — a temporary data directory, or a new database in the test
/// cluster — with a manual clock and seeded randomness.
func withServer<R>(
  backend: Backend = .lmdb, configuration: SyncServer.Configuration = .testing,
  clock: ManualClock = ManualClock(), seed: UInt64 = 1, logger: Logger = quietLogger,
  _ body: (SyncServer) async throws -> R
) async throws -> R {
  let bytes = SeededBytes(seed: seed)
  let dependencies = SyncServer.Dependencies(
    now: { clock.now }, randomBytes: { bytes.next($0) })
  switch backend {
  case .lmdb:
    return try await withTemporaryDirectory { root in
      let server = try SyncServer.open(
        dataDirectory: root + "/server", configuration: configuration,
        dependencies: dependencies, logger: logger)
      defer { server.close() }
      return try await body(server)
    }
  case .postgres:
    let url = try await TestCluster.shared.newDatabase()
    let server = try await SyncServer.open(
      database: url, maximumConnections: 8, configuration: configuration,
      dependencies: dependencies, logger: logger)
    defer { server.close() }
    return try await body(server)
  }
}

/// Opens a server with the test configuration on `backend`: LMDB in `directory` (which the
/// caller keeps, to compact or inspect it after closing), or a new database in the test cluster.
/// The caller closes it.
func openServer(backend: Backend, directory: String) async throws -> SyncServer {
  switch backend {
  case .lmdb:
    try SyncServer.open(dataDirectory: directory, configuration: .testing, logger: quietLogger)
  case .postgres:
    try await SyncServer.open(
      database: try await TestCluster.shared.newDatabase(), configuration: .testing,
      logger: quietLogger)
  }
}

/// Runs `server` on a real loopback socket (port 0) for the duration of `body`, which gets the
/// base URL.
func withLiveServer<R: Sendable>(
  _ server: SyncServer, _ body: @escaping @Sendable (String) async throws -> R
) async throws -> R {
  try await server.application(host: "127.0.0.1", port: 0).test(.live) { client in
    try await body("http://127.0.0.1:\(client.port!)")
  }
}

extension APICaller {
  /// The keys `password` gives for the encrypted account `username`, stretched as the server
  /// says (`POST /v1/sessions/parameters`), at no less than the tests' cost.
  func passwordKeys(username: String, password: String) async throws -> PasswordKeys {
    let parameters = try await signInParameters(of: username, floor: .testing)
    return try PasswordKeys(
      username: username, password: password, derivation: parameters.keyDerivation)
  }
}

extension APICaller {
  /// Signs in as a device of this version does — with the secret drawn from the password as
  /// the server says, at no less than the tests' cost — and answers the token.
  func token(signingInAs credentials: Credentials) async throws -> String {
    try await signIn(
      username: credentials.username, password: credentials.password, floor: .testing
    ).session.token
  }
}

/// One device: a store with its own clock, and its account on the server.
struct Device: Sendable {
  let store: NoteStore
  let clock: ManualClock
  let account: SyncAccount
}

/// Opens `count` devices of one account in `root`; the account must exist already or be created
/// by the caller.
func openDevices(
  _ count: Int, root: String, transport: @escaping @Sendable (Int) -> any Transport,
  credentials: Credentials, seed: UInt64, mergePolicy: any MergePolicy = StandardMerge(),
  pageSize: Int = 1000, encoding: (Int) -> SyncEncoding = { _ in .binary }
) throws -> [Device] {
  try (0..<count).map { index in
    try openDevice(
      index, root: root, transport: transport(index), credentials: credentials, seed: seed,
      clock: ManualClock(), mergePolicy: mergePolicy, pageSize: pageSize, encoding: encoding(index))
  }
}

func openDevice(
  _ index: Int, root: String, transport: any Transport, credentials: Credentials, seed: UInt64,
  clock: ManualClock, mergePolicy: any MergePolicy = StandardMerge(), pageSize: Int = 1000,
  encoding: SyncEncoding = .binary, encryption: EncryptionOptions? = .testingAsTheServerSays
) throws -> Device {
  var options = NoteStore.Options(
    durability: .noSync,
    dependencies: .testing(clock: clock, seed: seed &* 1000 &+ UInt64(index)))
  options.mergePolicy = mergePolicy
  let store = try NoteStore.open(at: "\(root)/device-\(index)", options: options)
  let account = try SyncAccount(
    store: store, transport: transport, credentials: credentials,
    stateFile: SyncAccount.stateFile(for: store), now: { clock.now }, pageSize: pageSize,
    encoding: encoding, encryption: encryption)
  return Device(store: store, clock: clock, account: account)
}

/// Makes `count` random user changes on `store`: every field, deletes, tags, attachments,
/// tag renames, preferring the notes in `shared` so devices edit the same notes.
func makeRandomChanges(
  on store: NoteStore, count: Int, shared: [NoteID], using generator: inout SeededGenerator
) throws -> [NoteID] {
  var created: [NoteID] = []
  let tagNames = ["Paris", "paris", "work", "Home", "ideas"]
  for _ in 0..<count {
    let candidates = try (shared + created).filter { try store.note($0) != nil }
    let roll = Int.random(in: 0..<100, using: &generator)
    if candidates.isEmpty || roll < 15 {
      let text = "note \(generator.next() % 1000)"
      let tag = tagNames.randomElement(using: &generator)!
      let id = try store.write { $0.createNote(text: text, tags: [tag]) }
      created.append(id)
      continue
    }
    let note = candidates.randomElement(using: &generator)!
    let value = generator.next()
    try store.write { changes in
      switch roll {
      case 15..<40: changes.setText("text \(value % 10_000)", of: note)
      case 40..<45:
        // Resolves the conflicts it shows, if any.
        let conflicts = try store.note(note)?.conflicts.map(\.stamp) ?? []
        changes.setText("merged \(value % 10_000)", of: note, resolving: conflicts)
      case 45..<55: changes.setArchived(value % 2 == 0, of: note)
      case 55..<63:
        changes.setSortDate(
          Date(timeIntervalSince1970: 1_700_000_000 + Double(value % 100_000)), of: note)
      case 63..<66:
        changes.setTags(
          Array(tagNames.shuffled(using: &generator).prefix(Int(value % 3))), of: note)
      case 66..<70:
        // One tag more: a change of that tag alone.
        let tags = try store.note(note)?.tags.map(\.name) ?? []
        changes.setTags(tags + [tagNames[Int(value % 5)]], of: note)
      case 70..<72:
        var tags = try store.note(note)?.tags.map(\.name) ?? []
        if !tags.isEmpty { tags.remove(at: Int(value % UInt64(tags.count))) }
        changes.setTags(tags, of: note)
      case 72..<73:
        if let tag = try store.tags().first {
          changes.deleteTag(named: tag.tag.name)
        } else {
          changes.setText("no tag to delete \(value % 100)", of: note)
        }
      case 73..<81:
        changes.addAttachment(
          Array("bytes \(value % 50)".utf8), mimeType: "image/png", width: 4, height: 3, to: note)
      case 81..<85:
        if let first = try store.note(note)?.attachments.first {
          changes.deleteAttachment(first.id)
        } else {
          changes.setText("no attachment \(value % 100)", of: note)
        }
      case 85..<89:
        if let attachments = try store.note(note)?.attachments, attachments.count > 1 {
          changes.setAttachments(attachments.reversed().map(\.id), of: note)
        } else {
          changes.setArchived(true, of: note)
        }
      case 89..<93:
        if try store.tags().contains(where: { $0.tag.id == TagID(name: "paris") }) {
          changes.renameTag(to: value % 2 == 0 ? "PARIS" : "Paris")
        } else {
          changes.setText("no tag \(value % 100)", of: note)
        }
      default: changes.deleteNote(note)
      }
    }
  }
  return created
}

/// The state digest, event-set digest and event count of a store.
struct Digests: Equatable, CustomStringConvertible {
  let state: StateDigest
  let events: EventSetDigest
  let count: UInt64

  init(_ store: NoteStore) throws {
    state = try store.stateDigest()
    events = try store.eventSetDigest()
    count = try store.lastSequence()
  }

  var description: String { "\(count) events, set \(events), state \(state)" }
}

/// What most storage tests push: no byte limit, no retention.
extension ServerStorage {
  /// ``sync(account:pushing:after:limit:maximumBytes:retention:)`` without a byte limit or
  /// retention.
  func sync(account: UInt64, pushing events: [Event], after cursor: UInt64, limit: Int)
    async throws -> SyncOutcome
  {
    try await sync(
      account: account, pushing: events, after: cursor, limit: limit, maximumBytes: .max,
      retention: (nil, 0))
  }
}

/// Creates the accounts `names` directly in `store`, in order (numbered 1, 2, 3… in a new
/// store), each with the password "pw" hashed at the test cost.
func createAccounts(_ names: [String], in store: any ServerStorage) async throws {
  let password = try PasswordHash(
    hashing: "pw", cost: .testing, salt: [UInt8](repeating: 1, count: 16))
  for name in names { try await store.createAccount(named: name, password: password) }
}

extension EncryptionOptions {
  /// An account as the server says, stretching passwords at the tests' cost: what the tests'
  /// devices use, against servers that hash at the tests' cost too.
  static let testingAsTheServerSays = EncryptionOptions(
    cost: .testing, random: systemRandomBytes, isRequired: false)
}
