import Foundation
import PostgresNIO
import ServerTestSupport
import Testing

@testable import VLogServer

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
