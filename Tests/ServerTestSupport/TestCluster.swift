import Foundation
import Logging
package import PostgresNIO
import VLogTesting

/// Where a test server keeps its data: every server test runs on both.
package enum Backend: String, CaseIterable, Sendable, CustomStringConvertible {
  case lmdb
  case postgres

  package var description: String { rawValue }
}

/// The PostgreSQL cluster of a test run, and a new database in it for each test server.
///
/// `VLOG_TEST_POSTGRES` may name a server to use (a URL whose user may create databases);
/// otherwise the first test that needs one starts a throwaway cluster with `tools/pg-cluster`,
/// watched so that it is stopped and removed once this process exits, however it exits.
package actor TestCluster {
  package static let shared = TestCluster()

  private var started: (url: URLComponents, client: PostgresClient)?
  private var count = 0

  /// The URL of a new, empty database.
  package func newDatabase() async throws -> String {
    let (url, client) = try await cluster()
    count += 1
    let name = "vlog_test_\(getpid())_\(count)"
    try await client.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"))
    var components = url
    components.path = "/" + name
    guard let string = components.string else {
      throw ClusterError("the cluster's URL cannot name database \(name)")
    }
    return string
  }

  /// Runs a statement as the cluster's superuser, on its `postgres` database.
  package func execute(_ sql: String) async throws {
    let (_, client) = try await cluster()
    try await client.query(PostgresQuery(unsafeSQL: sql))
  }

  /// The first column of what `sql` returns, as text, run as the cluster's superuser on its
  /// `postgres` database.
  package func strings(_ sql: String) async throws -> [String] {
    let (_, client) = try await cluster()
    var values: [String] = []
    for try await value in try await client.query(PostgresQuery(unsafeSQL: sql)).decode(
      String.self)
    {
      values.append(value)
    }
    return values
  }

  /// The cluster being started: callers that come meanwhile wait for it (the actor takes
  /// other calls while one waits) instead of each starting a cluster of its own.
  private var starting: Task<(url: URLComponents, client: PostgresClient), any Error>?

  private func cluster() async throws -> (URLComponents, PostgresClient) {
    if let started { return started }
    if let starting { return try await starting.value }
    let task = Task { try await Self.start() }
    starting = task
    let result = try await task.value
    started = result
    return result
  }

  /// Starts the run's cluster (or takes the one `VLOG_TEST_POSTGRES` names) and a client of
  /// its `postgres` database.
  private static func start() async throws -> (url: URLComponents, client: PostgresClient) {
    let url: String
    if let given = ProcessInfo.processInfo.environment["VLOG_TEST_POSTGRES"], !given.isEmpty {
      url = given
    } else {
      url = try await startCluster()
    }
    guard let components = URLComponents(string: url) else {
      throw ClusterError("not a PostgreSQL URL: \(url)")
    }
    let client = client(of: components, database: "postgres")
    Task.detached { await client.run() }
    return (components, client)
  }

  /// A client, not yet running, of database `name` of the cluster at `components`.
  private static func client(of components: URLComponents, database name: String)
    -> PostgresClient
  {
    let socket = components.queryItems?.first { $0.name == "host" }?.value
    let configuration: PostgresClient.Configuration =
      if let socket {
        .init(
          unixSocketPath: socket + "/.s.PGSQL.\(components.port ?? 5432)",
          username: components.user ?? "postgres", password: components.password,
          database: name)
      } else {
        .init(
          host: components.host ?? "localhost", port: components.port ?? 5432,
          username: components.user ?? "postgres", password: components.password,
          database: name, tls: .disable)
      }
    var logger = Logger(label: "TestCluster")
    logger.logLevel = .critical
    return PostgresClient(configuration: configuration, backgroundLogger: logger)
  }

  /// Runs `body` with a connection, as the cluster's superuser, to database `name`, which
  /// closes when `body` returns.
  package func withConnection<R: Sendable>(
    database name: String, _ body: @Sendable (PostgresConnection) async throws -> R
  ) async throws -> R {
    let (components, _) = try await cluster()
    let client = Self.client(of: components, database: name)
    return try await withThrowingDiscardingTaskGroup { group in
      group.addTask { await client.run() }
      defer { group.cancelAll() }
      return try await client.withConnection { try await body($0) }
    }
  }

  /// Starts a cluster with `tools/pg-cluster`, watched by this process's id.
  private static func startCluster() async throws -> String {
    let text = try await pgCluster(["start", "--watch", "\(getpid())"])
    guard let url = text.split(separator: "\n").first(where: { $0.hasPrefix("postgres://") })
    else {
      throw ClusterError("tools/pg-cluster printed no URL: \(text)")
    }
    return String(url)
  }

  /// Runs `tools/pg-cluster` with `arguments` on a thread of its own; what it printed. A
  /// cluster takes seconds to start or stop, and waiting for it on the cooperative pool (two
  /// threads on a two-core machine) would stall every server of the process meanwhile: their
  /// accept loops and handlers run there.
  ///
  /// Through ``ChildProcess``, which gives the child none of this process's descriptors: the
  /// cluster's server and its watcher live on, and a copy of a server's connection in them
  /// would keep it open after the server closed it.
  package static func pgCluster(_ arguments: [String]) async throws -> String {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
      .deletingLastPathComponent().deletingLastPathComponent()
    let result = try await ChildProcess.runOffPool("\(root.path)/tools/pg-cluster", arguments)
    guard result.status == 0 else {
      throw ClusterError(
        "tools/pg-cluster \(arguments.joined(separator: " ")) failed (status \(result.status)): "
          + result.output + result.errors)
    }
    return result.output
  }

  struct ClusterError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
  }
}

/// A PostgreSQL cluster of one test's own, to stop and start as faults do: the shared
/// ``TestCluster`` serves every other test.
package struct ThrowawayCluster: Sendable {
  /// The cluster's directory, which holds its Unix socket.
  package let directory: String

  /// Starts one, durable (a fault loses no commit), watched by this process's id like the
  /// shared cluster.
  package static func start() async throws -> ThrowawayCluster {
    let text = try await TestCluster.pgCluster(["start", "--durable", "--watch", "\(getpid())"])
    guard let directory = text.split(separator: "\n").last.map(String.init),
      directory.hasPrefix("/")
    else {
      throw TestCluster.ClusterError("tools/pg-cluster printed no directory: \(text)")
    }
    return ThrowawayCluster(directory: directory)
  }

  /// The path of the server's Unix socket.
  package var socket: String { directory + "/.s.PGSQL.5432" }

  /// Stops the server as a fault would: `pg_ctl stop -m immediate`, or SIGKILL to every process
  /// of it (`kill`).
  package func halt(killing: Bool) async throws {
    _ = try await TestCluster.pgCluster(["halt", directory, killing ? "kill" : "immediate"])
  }

  /// Starts the halted server again.
  package func resume() async throws {
    _ = try await TestCluster.pgCluster(["resume", directory])
  }

  /// Stops the server and removes the directory. (A failure to is not the test's: the
  /// cluster's watcher removes it when this process ends.)
  package func stop() async {
    _ = try? await TestCluster.pgCluster(["stop", directory])
  }

  /// Runs `body` with a cluster of its own, stopped and removed afterwards, whether `body`
  /// returns or throws.
  package static func with<Result>(
    _ body: (ThrowawayCluster) async throws -> Result
  ) async throws -> Result {
    let cluster = try await start()
    do {
      let result = try await body(cluster)
      await cluster.stop()
      return result
    } catch {
      await cluster.stop()
      throw error
    }
  }
}
