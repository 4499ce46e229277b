import Foundation
import PostgresNIO
import ServerTestSupport
import Testing
import VLogTesting

@testable import VLog
@testable import VLogServer

@Suite("Deleted tags' names in an older PostgreSQL schema")
struct PostgresLegacyTagNameTests {
  @Test(
    "a schema 3 database (tags deleted by name) is migrated: the names go, verify is clean")
  func migrateSchema3() async throws {
    let url = try await TestCluster.shared.newDatabase()
    let note = NoteID(Identifier(high: 1, low: 1))
    let replica = ReplicaID(Identifier(high: 2, low: 2))
    func stamp(_ millisecond: UInt64) -> Stamp {
      Stamp(
        time: HybridTime(milliseconds: 1_790_000_000_000 + millisecond, counter: 0),
        replica: replica)
    }
    let list = ["Quokka", "kept"]
    do {
      let server = try await SyncServer.open(
        database: url, configuration: .testing, logger: quietLogger)
      defer { server.close() }
      try await server.store.createAccount(
        named: "ann",
        password: try PasswordHash(
          hashing: "correct horse battery", cost: .testing, salt: [UInt8](repeating: 1, count: 16)))
      _ = try await server.store.sync(
        account: 1,
        pushing: [
          Event(stamp: stamp(0), change: .noteCreated(note, creationDate: Date())),
          Event(stamp: stamp(1), change: .tagsSet(note, tags: list)),
          Event(stamp: stamp(2), change: .tagErased(TagKey(name: "quokka"))),
        ], after: 0, limit: 10)
      // Make it what schema 3 held: the deletion by name, the list older than it whole.
      let storage = try #require(server.store as? PostgresStorage)
      let deletion = PostgresLogWriter.record(
        Event(stamp: stamp(2), change: .tagDeleted(name: "quokka")))
      let whole = PostgresLogWriter.record(
        Event(stamp: stamp(1), change: .tagsSet(note, tags: list)))
      try await storage.client.query(
        "UPDATE vlog_events SET record = \(deletion) WHERE account = \(Int64(1)) AND sequence = 3")
      try await storage.client.query(
        "UPDATE vlog_events SET record = \(whole) WHERE account = \(Int64(1)) AND sequence = 2")
      try await storage.client.query("UPDATE vlog_schema SET version = 3")
      #expect(try await server.verify().faults.count == 2)
    }
    let server = try await SyncServer.open(
      database: url, configuration: .testing, logger: quietLogger)
    defer { server.close() }
    #expect(try await server.verify().faults.isEmpty)
    let bytes = try await storedBytes(of: server)
    #expect(bytes.range(of: Data("quokka".utf8)) == nil)
    #expect(bytes.range(of: Data("Quokka".utf8)) == nil)
  }
}
