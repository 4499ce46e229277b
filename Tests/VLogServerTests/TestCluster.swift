import Foundation
import Logging
import PostgresNIO
import Testing

@testable import VLogServer

/// Where a test server keeps its data: every server test runs on both.
enum Backend: String, CaseIterable, Sendable, CustomTestStringConvertible {
  case lmdb
  case postgres

  var testDescription: String { rawValue }
}

/// The PostgreSQL cluster of a test run, and a new database in it for each test server.
///
/// `VLOG_TEST_POSTGRES` may name a server to use (a URL whose user may create databases);
/// otherwise the first test that needs one starts a throwaway cluster with `tools/pg-cluster`,
/// watched so that it is stopped and removed once this process exits, however it exits.
actor TestCluster {
  static let shared = TestCluster()

  private var started: (url: URLComponents, client: PostgresClient)?
  private var count = 0

  /// The URL of a new, empty database.
  func newDatabase() async throws -> String {
    let (url, client) = try await cluster()
    count += 1
    let name = "vlog_test_\(getpid())_\(count)"
    try await client.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"))
    var components = url
    components.path = "/" + name
    return try #require(components.string)
  }

  /// Runs a statement as the cluster's superuser, on its `postgres` database.
  func execute(_ sql: String) async throws {
    let (_, client) = try await cluster()
    try await client.query(PostgresQuery(unsafeSQL: sql))
  }

  private func cluster() async throws -> (URLComponents, PostgresClient) {
    if let started { return started }
    let url: String
    if let given = ProcessInfo.processInfo.environment["VLOG_TEST_POSTGRES"], !given.isEmpty {
      url = given
    } else {
      url = try Self.startCluster()
    }
    let components = try #require(URLComponents(string: url))
    let socket = components.queryItems?.first { $0.name == "host" }?.value
    let configuration: PostgresClient.Configuration =
      if let socket {
        .init(
          unixSocketPath: socket + "/.s.PGSQL.\(components.port ?? 5432)",
          username: components.user ?? "postgres", password: components.password,
          database: "postgres")
      } else {
        .init(
          host: components.host ?? "localhost", port: components.port ?? 5432,
          username: components.user ?? "postgres", password: components.password,
          database: "postgres", tls: .disable)
      }
    var logger = Logger(label: "TestCluster")
    logger.logLevel = .critical
    let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
    Task.detached { await client.run() }
    started = (components, client)
    return (components, client)
  }

  /// Starts a cluster with `tools/pg-cluster`, watched by this process's id. (Through
  /// `popen`: Foundation's `Process.waitUntilExit` can hang when called from a task.)
  private static func startCluster() throws -> String {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
      .deletingLastPathComponent().deletingLastPathComponent()
    let command = "'\(root.path)/tools/pg-cluster' start --watch \(getpid()) 2>&1"
    guard let pipe = popen(command, "r") else {
      throw ClusterError("cannot run tools/pg-cluster: errno \(errno)")
    }
    var output: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    let descriptor = fileno(pipe)
    while true {
      let count = read(descriptor, &buffer, buffer.count)
      if count > 0 {
        output += buffer[0..<count]
      } else if count == 0 || errno != EINTR {
        break
      }
    }
    let status = pclose(pipe)
    let text = String(decoding: output, as: UTF8.self)
    guard status == 0,
      let url = text.split(separator: "\n").first(where: { $0.hasPrefix("postgres://") })
    else {
      throw ClusterError("tools/pg-cluster failed (status \(status)): \(text)")
    }
    return String(url)
  }

  struct ClusterError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
  }
}

/// Every byte of data a server holds: its LMDB data file, or every text and bytea value of its
/// PostgreSQL tables, concatenated — for tests that look for what must not be stored.
func storedBytes(of server: SyncServer) async throws -> Data {
  guard let storage = server.store as? PostgresStorage else {
    return try Data(contentsOf: URL(fileURLWithPath: server.location + "/data.mdb"))
  }
  var columns: [(table: String, column: String, type: String)] = []
  let rows = try await storage.client.query(
    """
    SELECT table_name::text, column_name::text, data_type::text FROM information_schema.columns
    WHERE table_name LIKE 'vlog_%' AND data_type IN ('bytea', 'text')
    """)
  for try await column in rows.decode((String, String, String).self) { columns.append(column) }
  #expect(columns.count >= 10)
  var bytes = Data()
  for (table, column, type) in columns {
    let values = try await storage.client.query(
      PostgresQuery(unsafeSQL: "SELECT \(column) FROM \(table) WHERE \(column) IS NOT NULL"))
    if type == "bytea" {
      for try await value in values.decode(ByteBuffer.self) {
        bytes.append(contentsOf: value.readableBytesView)
      }
    } else {
      for try await value in values.decode(String.self) { bytes.append(contentsOf: value.utf8) }
    }
  }
  return bytes
}
