import Foundation
import PostgresNIO
import ServerTestSupport
import Testing
import VLogTesting

@testable import VLog
@testable import VLogServer

@Suite("The plans of PostgreSQL's prepared statements")
struct PostgresPlanTests {
  /// The nodes of an `EXPLAIN (FORMAT JSON)` plan that read a table of VLog's.
  static func tableReads(in plan: Any) -> [[String: Any]] {
    var found: [[String: Any]] = []
    if let node = plan as? [String: Any] {
      if let relation = node["Relation Name"] as? String, relation.hasPrefix("vlog_") {
        found.append(node)
      }
      for value in node.values { found += tableReads(in: value) }
    } else if let list = plan as? [Any] {
      for value in list { found += tableReads(in: value) }
    }
    return found
  }

  /// The generic plan of `sql` (prepared with `types`), executed with `arguments`: the
  /// statement's own text, planned once for every call.
  static func plan(
    _ sql: String, types: String, arguments: String, on storage: PostgresStorage
  ) async throws -> [[String: Any]] {
    try await storage.client.withConnection { connection in
      try await connection.query(
        PostgresQuery(unsafeSQL: "PREPARE checked(\(types)) AS \(sql)"), logger: quietLogger)
      let rows = try await connection.query(
        PostgresQuery(unsafeSQL: "EXPLAIN (FORMAT JSON) EXECUTE checked(\(arguments))"),
        logger: quietLogger)
      var text = ""
      for try await line in rows.decode(String.self) { text += line }
      try await connection.query("DEALLOCATE checked", logger: quietLogger)
      let plan = try JSONSerialization.jsonObject(with: Data(text.utf8))
      return tableReads(in: plan)
    }
  }

  @Test(
    "every part of the facts read and the page read looks its keys up in an index, never the whole account"
  )
  func keysLookedUp() async throws {
    let url = try await TestCluster.shared.newDatabase()
    let server = try await SyncServer.open(
      database: url, configuration: .testing, logger: quietLogger)
    defer { server.close() }
    let storage = try #require(server.store as? PostgresStorage)
    // Tables of many accounts, analysed: what a generic plan is made from in production. (On
    // empty tables, any plan looks cheap.)
    let rows = "FROM generate_series(1, 5000) AS a, generate_series(1, 4) AS s"
    for statement in [
      "INSERT INTO vlog_events SELECT a, s, decode(md5('e' || a || '-' || s), 'hex'), '\\x00' \(rows)",
      "INSERT INTO vlog_objects SELECT a, decode(md5('o' || a || '-' || s), 'hex'), s \(rows)",
      "INSERT INTO vlog_deletions SELECT a, decode(md5('d' || a || '-' || s), 'hex'), s \(rows)",
      "INSERT INTO vlog_blob_references SELECT a, decode(md5('b' || a || '-' || s), 'hex'), s \(rows)",
      "INSERT INTO vlog_fields SELECT a, decode(md5('f' || a || '-' || s), 'hex'), 0, '\\x00', s \(rows)",
      "ANALYZE",
    ] {
      try await storage.client.query(PostgresQuery(unsafeSQL: statement), logger: quietLogger)
    }
    let facts = try await Self.plan(
      FactsQuery.sql,
      types: "int8, bytea[], bytea[], bytea[], int8[], bytea[], bytea[], int8[], bytea[]",
      arguments: #"1, '{"\\x01"}', '{"\\x02"}', '{"\\x03"}', '{4}', '{"\\x05"}', "#
        + #"'{}', '{}', '{"\\x06"}'"#,
      on: storage)
    let page = try await Self.plan(
      PageQuery.sql, types: "int8, int8, int8, int8", arguments: "1, 5, 10, 100", on: storage)
    #expect(facts.count == 6)
    #expect(page.count == 1)
    for read in facts + page {
      let type = read["Node Type"] as? String ?? ""
      let condition = read["Index Cond"] as? String ?? ""
      // An index condition on the account and the key, not the account alone with the key
      // filtered after (which reads the whole account).
      #expect(
        ["Index Scan", "Index Only Scan"].contains(type) && condition.contains(" AND "),
        "\(read["Relation Name"] ?? "?"): \(type), \(condition)")
    }
  }
}
