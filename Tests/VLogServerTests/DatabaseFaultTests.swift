import Foundation
import LMDB
import PostgresNIO
import ServerTestSupport
import Testing
import VLog
import VLogServer
import VLogServerTesting
import VLogSync
import VLogWire

/// Serves each of `servers` over HTTP on loopback for the duration of `body`, which gets their
/// ports in order.
func servingAll<R: Sendable>(
  _ servers: [SyncServer], _ body: @escaping @Sendable ([Int]) async throws -> R
) async throws -> R {
  guard let first = servers.first else { return try await body([]) }
  let rest = Array(servers.dropFirst())
  return try await first.serving { port in
    try await servingAll(rest) { ports in try await body([port] + ports) }
  }
}

@Suite("Database faults", .serialized)
struct DatabaseFaultTests {
  /// What happens to the database mid-push.
  enum Fault: String, CaseIterable, Sendable, CustomStringConvertible {
    /// `pg_ctl stop -m immediate`.
    case immediate
    /// SIGKILL to the server and its backends.
    case kill
    /// The network drops every packet, both ways, and keeps the connections open.
    case blackhole
    var description: String { rawValue }
  }

  /// How much slower a sanitizer makes everything (ThreadSanitizer: a 1,000-event push on
  /// PostgreSQL takes seconds), for the deadlines below.
  static let slowdown =
    ProcessInfo.processInfo.environment["TSAN_OPTIONS"] != nil
      || ProcessInfo.processInfo.environment["ASAN_OPTIONS"] != nil ? 8 : 1
  /// The servers' `databaseTimeout` in these tests.
  static let deadline: Duration = .seconds(3 * slowdown)
  /// What an answer may take beyond the deadline on a loaded machine.
  static let slack: Duration = .seconds(7 * slowdown)
  /// How long the calls that are not under test are asked again while they answer 503: twice
  /// the longest backoff of the pool's reconnection after an outage (a minute), as the whole
  /// suite on two cores may need.
  static let patience: Duration = .seconds(120 * slowdown)

  /// One account's batch: 1,000 text changes of 200 bytes, stamped by its own device.
  static func batch(_ account: Int) -> [Event] {
    (0..<1000).map { index in
      Event(
        stamp: Stamp(
          time: HybridTime(milliseconds: 1_767_225_600_000 + UInt64(index), counter: 0),
          replica: ReplicaID(Identifier(high: 7, low: UInt64(account + 1)))),
        change: .textSet(
          NoteID(Identifier(high: UInt64(account + 1), low: UInt64(index))),
          text: String(repeating: "x", count: 190) + "\(index)"))
    }
  }

  /// A server on the cluster behind `proxy`, with the tests' deadline.
  static func openServer(behind proxy: LoopbackProxy) async throws -> SyncServer {
    var configuration = SyncServer.Configuration.testing
    configuration.databaseTimeout = deadline
    return try await SyncServer.open(
      database: "postgres://postgres@127.0.0.1:\(proxy.port)/postgres",
      maximumConnections: 4, configuration: configuration, logger: quietLogger)
  }

  /// Signs up on a server with the tests' short database deadline, asking again while it
  /// answers 503: on a loaded machine (the whole suite on two cores) a call may pass the
  /// deadline before any fault, and that is not what is under test. An account that an earlier
  /// try created after all (409) is signed in to.
  static func signUpPatiently(_ caller: APICaller, _ name: String) async throws -> String {
    let credentials = Credentials(username: name, password: "correct horse battery")
    let until = ContinuousClock.now + patience
    var created = await caller.createAccount(credentials)
    while created.status == 503, ContinuousClock.now < until {
      try await Task.sleep(for: .milliseconds(200))
      created = await caller.createAccount(credentials)
    }
    if created.status != 409 { _ = try created.get() }
    var signedIn = await caller.signIn(credentials)
    while signedIn.status == 503, ContinuousClock.now < until {
      try await Task.sleep(for: .milliseconds(200))
      signedIn = await caller.signIn(credentials)
    }
    return try signedIn.get().token
  }

  struct Answer: Sendable {
    let status: Int
    let code: ErrorCode?
    let retryAfter: String?
    let took: Duration
  }

  /// Pushes `events` as `token`'s account; the answer and how long it took.
  static func push(_ events: [Event], token: String, to transport: HTTPTransport) async -> Answer {
    let start = ContinuousClock.now
    let body = (try? JSONEncoder().encode(SyncRequest(cursor: 0, events: events))) ?? Data()
    do {
      let response = try await post(
        transport, "/v1/sync", String(decoding: body, as: UTF8.self), token: token)
      return Answer(
        status: response.status,
        code: response.status == 200 ? nil : try? errorBody(response).code,
        retryAfter: response.headers["retry-after"], took: ContinuousClock.now - start)
    } catch {
      return Answer(status: 0, code: nil, retryAfter: nil, took: ContinuousClock.now - start)
    }
  }

  @Test(
    "Pushes in flight when the database dies or stops answering are answered 503 within the deadline; retried, each event is stored once",
    .timeLimit(.minutes(10)), arguments: Fault.allCases, [1, 3])
  func inFlight(fault: Fault, instances: Int) async throws {
    try await ThrowawayCluster.with { cluster in
      let proxy = try LoopbackProxy(unixSocket: cluster.socket)
      defer { proxy.stop() }
      var servers: [SyncServer] = []
      defer {
        for server in servers { server.close() }
      }
      for _ in 0..<instances { servers.append(try await Self.openServer(behind: proxy)) }
      let accounts = 4
      try await servingAll(servers) { ports in
        let transports = ports.map { HTTPTransport(baseURL: "http://127.0.0.1:\($0)") }
        func transport(_ account: Int) -> HTTPTransport { transports[account % transports.count] }
        var tokens: [String] = []
        for account in 0..<accounts {
          tokens.append(
            try await Self.signUpPatiently(
              APICaller(transport: transport(account)), "user\(account)"))
        }
        let tokensNow = tokens
        // Four pushes at once, and the fault while they run.
        async let pushed = withTaskGroup(of: Answer.self) { group in
          for account in 0..<accounts {
            group.addTask {
              await Self.push(
                Self.batch(account), token: tokensNow[account], to: transport(account))
            }
          }
          return await group.reduce(into: []) { $0.append($1) }
        }
        try await Task.sleep(for: .milliseconds(30))
        switch fault {
        case .blackhole: proxy.blackholed = true
        case .immediate, .kill: try await cluster.halt(killing: fault == .kill)
        }
        // And one more per account, at once, while the database is gone.
        let inFlight = await pushed
        let whileGone = await withTaskGroup(of: Answer.self) { group in
          for account in 0..<accounts {
            group.addTask {
              await Self.push(
                Self.batch(account), token: tokensNow[account], to: transport(account))
            }
          }
          return await group.reduce(into: []) { $0.append($1) }
        }
        let answers = inFlight + whileGone
        // Before, pushes in flight were never answered.
        for answer in answers {
          #expect(answer.status == 200 || answer.status == 503, "\(answer)")
          #expect(answer.took < Self.deadline + Self.slack, "\(answer)")
          if answer.status == 503 {
            #expect(answer.code == .unavailable)
            #expect(answer.retryAfter != nil)
          }
        }
        #expect(answers.suffix(accounts).allSatisfy { $0.status == 503 }, "\(answers)")

        switch fault {
        case .blackhole: proxy.blackholed = false
        case .immediate, .kill: try await cluster.resume()
        }
        // The servers recover on their own: every push again until it is taken, stored once.
        for account in 0..<accounts {
          var answer = await Self.push(
            Self.batch(account), token: tokensNow[account], to: transport(account))
          let until = ContinuousClock.now + Self.patience
          while answer.status != 200, ContinuousClock.now < until {
            try await Task.sleep(for: .milliseconds(200))
            answer = await Self.push(
              Self.batch(account), token: tokensNow[account], to: transport(account))
          }
          #expect(answer.status == 200, "\(answer)")
          let caller = APICaller(transport: transport(account))
          var ids: [Stamp] = []
          var cursor: UInt64 = 0
          while true {
            // A loaded machine may still answer 503 now and then, while the pool's reconnection
            // backs off (up to a minute after an outage): asked again until it answers, as long
            // as the pushes above may take.
            var result = await caller.sync(
              SyncPush(cursor: cursor, events: []), token: tokensNow[account])
            let until = ContinuousClock.now + Self.patience
            while result.status == 503, ContinuousClock.now < until {
              try await Task.sleep(for: .milliseconds(500))
              result = await caller.sync(
                SyncPush(cursor: cursor, events: []), token: tokensNow[account])
            }
            let page = try result.get()
            ids += page.events.map(\.stamp)
            cursor = page.cursor
            if !page.more { break }
          }
          #expect(ids.count == 1000, "account \(account)")
          #expect(Set(ids) == Set(Self.batch(account).map(\.stamp)), "account \(account)")
        }
      }
      // Checked through a server of its own, with the test suite's minute for a call: the
      // short deadline under test is for the requests above, not for reading every log.
      var configuration = SyncServer.Configuration.testing
      configuration.databaseTimeout = .seconds(60)
      let checker = try await SyncServer.open(
        database: "postgres://postgres@127.0.0.1:\(proxy.port)/postgres",
        maximumConnections: 2, configuration: configuration, logger: quietLogger)
      defer { checker.close() }
      #expect(try await checker.verify().faults.isEmpty)
    }
  }
}

extension DatabaseFaultTests {
  @Test(
    "Graceful shutdown with pushes waiting on a database that stopped answering ends within the deadline",
    .timeLimit(.minutes(10)))
  func shutdownWithRequestsOpen() async throws {
    try await ThrowawayCluster.with { cluster in
      let proxy = try LoopbackProxy(unixSocket: cluster.socket)
      defer { proxy.stop() }
      let server = try await Self.openServer(behind: proxy)
      defer { server.close() }
      let answers = AnswerList()
      let stopping = try await server.serving { port in
        let transport = HTTPTransport(baseURL: "http://127.0.0.1:\(port)")
        let token = try await Self.signUpPatiently(APICaller(transport: transport), "ann")
        proxy.blackholed = true
        for part in 0..<4 {
          Task {
            answers.add(
              await Self.push(
                Array(Self.batch(0)[part * 250..<(part + 1) * 250]), token: token, to: transport))
          }
        }
        try await Task.sleep(for: .milliseconds(300))
        // Shutdown starts when this returns, with the four pushes open.
        return ContinuousClock.now
      }
      // Before, shutdown waited for them for good.
      let took = ContinuousClock.now - stopping
      #expect(took < Self.deadline + Self.slack, "\(took)")
      try await Task.sleep(for: .milliseconds(200))
      #expect(answers.all.count == 4)
      #expect(answers.all.allSatisfy { $0.status == 503 }, "\(answers.all)")
    }
  }
}

/// Answers collected from tasks.
final class AnswerList: Sendable {
  // `Locked`, not `Mutex`: ThreadSanitizer models its pthread mutex.
  private let answers = Locked<[DatabaseFaultTests.Answer]>([])
  func add(_ answer: DatabaseFaultTests.Answer) { answers.withLock { $0.append(answer) } }
  var all: [DatabaseFaultTests.Answer] { answers.withLock { $0 } }
}

@Suite("Compaction on PostgreSQL")
struct PostgresCompactionTests {
  /// Whether the files of database `name` hold `canary`, after a checkpoint has written what
  /// PostgreSQL keeps in memory.
  static func filesHold(_ canary: String, database name: String) async throws -> Bool {
    try await !filesHolding(canary, database: name).isEmpty
  }

  /// The files of database `name` that hold `canary`, each with the relation it belongs to,
  /// after a checkpoint has written what PostgreSQL keeps in memory.
  static func filesHolding(_ canary: String, database name: String) async throws -> [String] {
    try await TestCluster.shared.execute("CHECKPOINT")
    let directory = try #require(try await TestCluster.shared.strings("SHOW data_directory").first)
    let oid = try #require(
      try await TestCluster.shared.strings(
        "SELECT oid::text FROM pg_database WHERE datname = '\(name)'"
      ).first)
    let base = directory + "/base/" + oid
    let needle = Data(canary.utf8)
    var files: [String] = []
    for file in try FileManager.default.contentsOfDirectory(atPath: base) {
      if let data = FileManager.default.contents(atPath: base + "/" + file),
        data.range(of: needle) != nil
      {
        files.append(file)
      }
    }
    guard !files.isEmpty else { return [] }
    let found = files
    return try await TestCluster.shared.withConnection(database: name) { connection in
      var named: [String] = []
      for file in found {
        var relation = "no relation"
        if let number = UInt32(file.prefix { $0.isNumber }) {
          for try await value in try await connection.query(
            "SELECT coalesce(pg_filenode_relation(0, \(Int64(number))::oid)::text, 'none')",
            logger: quietLogger
          ).decode(String.self) {
            relation = value
          }
        }
        named.append("\(file) (\(relation))")
      }
      return named
    }
  }

  /// A server on a new database, and account ann there, whose log holds a canary's text.
  struct Subject {
    let url: String
    let name: String
    let server: SyncServer
    let caller: APICaller
    let token: String
    let canary: String
    let event: Event

    static func make() async throws -> Subject {
      let url = try await TestCluster.shared.newDatabase()
      let name = try #require(URLComponents(string: url)?.path.dropFirst().description)
      let server = try await SyncServer.open(
        database: url, configuration: .testing, logger: quietLogger)
      let caller = APICaller(transport: InProcessTransport(server: server))
      let token = try await signUp(caller, "ann")
      let canary = "canary-\(UUID().uuidString)"
      let event = Event(
        stamp: Stamp(
          time: HybridTime(milliseconds: 1_767_225_600_000, counter: 0),
          replica: ReplicaID(Identifier(high: 9, low: 9))),
        change: .textSet(NoteID(Identifier(high: 9, low: 1)), text: canary))
      _ = try await caller.sync(SyncPush(cursor: 0, events: [event]), token: token).get()
      return Subject(
        url: url, name: name, server: server, caller: caller, token: token, canary: canary,
        event: event)
    }
  }

  @Test(
    "After an account's deletion, its bytes stay in the table files until vlog compact --database rewrites them"
  )
  func compactErasesDeletedAccount() async throws {
    let subject = try await Subject.make()
    defer { subject.server.close() }
    let (url, name, caller, token, canary, event) = (
      subject.url, subject.name, subject.caller, subject.token, subject.canary, subject.event
    )
    _ = try await caller.deleteAccount(password: "correct horse battery", token: token).get()
    // What the issue found: the deleted rows' bytes are still in the files.
    #expect(try await Self.filesHold(canary, database: name))
    let (location, before, after) = try await SyncServer.compact(database: url, logger: quietLogger)
    #expect(!location.contains("password"))
    #expect(before > 0 && after > 0)
    let left = try await Self.filesHolding(canary, database: name)
    #expect(left.isEmpty, "the canary is still in \(left)")
    // The database still serves.
    let again = try await signUp(caller, "bob")
    _ = try await caller.sync(SyncPush(cursor: 0, events: [event]), token: again).get()
  }

  /// A transaction open since before a deletion that `VACUUM FULL` would let keep the
  /// deleted rows.
  enum OlderTransaction: String, CaseIterable, CustomTestStringConvertible, Sendable {
    /// A snapshot of the same database, holding no lock on VLog's tables (one that did would
    /// make `VACUUM FULL` wait for it anyway): a report on other tables, an autovacuum worker
    /// listing the tables.
    case snapshotHere
    /// A transaction of another database of the cluster that has written (holds a
    /// transaction id): every snapshot taken while it runs, the rewrite's own included,
    /// counts it as running.
    case writerElsewhere

    var testDescription: String {
      switch self {
      case .snapshotHere: "a snapshot of the same database"
      case .writerElsewhere: "a writing transaction of another database"
      }
    }
  }

  @Test(
    "Compaction waits for a transaction that could still read the deleted rows, then erases them; out of patience, it rewrites nothing and names the session",
    arguments: OlderTransaction.allCases)
  func compactWaitsForOlderTransactions(_ older: OlderTransaction) async throws {
    let subject = try await Subject.make()
    defer { subject.server.close() }
    let (url, name, caller, token, canary) = (
      subject.url, subject.name, subject.caller, subject.token, subject.canary
    )
    let database: String
    switch older {
    case .snapshotHere: database = name
    case .writerElsewhere:
      let other = try await TestCluster.shared.newDatabase()
      database = try #require(URLComponents(string: other)?.path.dropFirst().description)
    }
    try await TestCluster.shared.withConnection(database: database) { reader in
      switch older {
      case .snapshotHere:
        try await reader.query("BEGIN ISOLATION LEVEL REPEATABLE READ", logger: quietLogger)
        try await reader.query("SELECT count(*) FROM pg_class", logger: quietLogger)
      case .writerElsewhere:
        try await reader.query("BEGIN", logger: quietLogger)
        try await reader.query("SELECT pg_current_xact_id()", logger: quietLogger)
      }
      var pid: Int32 = 0
      for try await value in try await reader.query(
        "SELECT pg_backend_pid()", logger: quietLogger
      ).decode(Int32.self) {
        pid = value
      }
      #expect(pid != 0)
      _ = try await caller.deleteAccount(password: "correct horse battery", token: token).get()

      // Out of patience: an error naming the older transaction, and the rows not rewritten.
      let impatient = await #expect(throws: StorageError.self) {
        _ = try await SyncServer.compact(
          database: url, patience: .milliseconds(300), logger: quietLogger)
      }
      #expect(impatient?.message.contains("pid \(pid)") == true, "\(String(describing: impatient))")
      #expect(try await Self.filesHold(canary, database: name))

      // Patient: it waits while the older transaction is open, and finishes once it ends.
      let finished = Locked(false)
      let compaction = Task {
        defer { finished.withLock { $0 = true } }
        return try await SyncServer.compact(database: url, logger: quietLogger)
      }
      try await Task.sleep(for: .seconds(1))
      #expect(finished.withLock { $0 } == false)
      try await reader.query("COMMIT", logger: quietLogger)
      _ = try await compaction.value
    }
    // Before, the rewrite copied the rows the reader could still read, canary and all.
    let left = try await Self.filesHolding(canary, database: name)
    #expect(left.isEmpty, "the canary is still in \(left)")
  }
}
