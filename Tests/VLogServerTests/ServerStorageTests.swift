import Foundation
import LMDB
import Testing
import VLogServerTesting
import VLogSync
import VLogTesting

@testable import VLog
@testable import VLogServer

@Suite("Server storage")
struct ServerStorageTests {
  static let replica = ReplicaID(Identifier(high: 0xAB, low: 0xCD))

  static func event(_ millisecond: UInt64, text: String) -> Event {
    Event(
      stamp: Stamp(
        time: HybridTime(milliseconds: 1_790_000_000_000 + millisecond, counter: 0),
        replica: replica),
      change: .textSet(NoteID(Identifier(high: 1, low: millisecond)), text: text))
  }

  @Test("a flipped byte in a server's stored event is found by verify, naming the account")
  func corruptServerEvent() async throws {
    try await withTemporaryDirectory { root in
      let directory = root + "/server"
      var server = try SyncServer.open(
        dataDirectory: directory, configuration: .testing, logger: quietLogger)
      try await createAccounts(["ann"], in: server.store)
      let events = [Self.event(1, text: "plain"), Self.event(2, text: "MARKER-5e1c-payload")]
      _ = try await server.store.sync(account: 1, pushing: events, after: 0, limit: 10)
      #expect(try await server.verify().faults.isEmpty)
      server.close()

      let file = URL(fileURLWithPath: directory + "/data.mdb")
      var bytes = [UInt8](try Data(contentsOf: file))
      let marker = Array("MARKER-5e1c".utf8)
      let offsets = (0...(bytes.count - marker.count)).filter {
        bytes[$0] == marker[0] && Array(bytes[$0..<($0 + marker.count)]) == marker
      }
      #expect(!offsets.isEmpty)
      for offset in offsets { bytes[offset + 2] ^= 0x01 }
      try Data(bytes).write(to: file)

      server = try SyncServer.open(
        dataDirectory: directory, configuration: .testing, logger: quietLogger)
      defer { server.close() }
      let verification = try await server.verify()
      #expect(verification.accounts == 1 && verification.events == 2)
      let faults = verification.faults
      #expect(faults.map(\.kind) == [.corruptEvent])
      #expect(faults.first?.message == "account 1: event 2: the checksum does not match its bytes")
      // Reading it is the storage's damage, which a client sees as a 500 naming nothing of it.
      let error = await #expect(throws: StorageError.self) {
        try await server.store.sync(account: 1, pushing: [], after: 0, limit: 10)
      }
      #expect(error?.code == .damaged)
      #expect(error?.message.contains("the checksum does not match") == true)
    }
  }

  @Test("a format 1 data directory is migrated: checksums added, the digest kept, events served")
  func migrateFormat1() async throws {
    try await withTemporaryDirectory { root in
      let directory = root + "/server"
      let events = [Self.event(1, text: "one"), Self.event(2, text: "two")]
      var digest = EventSetDigest.empty
      do {
        // What a format 1 server wrote: bare events, and heads of sequence and digest.
        let environment = try Environment.open(
          at: directory, configuration: .init(maximumDatabases: 8, durability: .noSync))
        defer { environment.close() }
        let databases = try ["meta", "accounts", "tokens", "log", "eventIDs", "heads", "blobs"]
          .map { try environment.openDatabase(named: $0, flags: .create) }
        let (meta, log, eventIDs, heads) = (databases[0], databases[3], databases[4], databases[5])
        try environment.write { transaction in
          try transaction.put(BigEndian.bytes(UInt32(1)), forKey: Array("format".utf8), in: meta)
          for (index, event) in events.enumerated() {
            let sequence = UInt64(index + 1)
            try transaction.put(
              EventCodec.encode(event),
              forKey: BigEndian.bytes(UInt64(1)) + BigEndian.bytes(sequence), in: log)
            try transaction.put(
              BigEndian.bytes(sequence), forKey: BigEndian.bytes(UInt64(1)) + event.stamp.bytes,
              in: eventIDs)
            digest.add(event.stamp)
          }
          try transaction.put(
            BigEndian.bytes(UInt64(2)) + digest.bytes, forKey: BigEndian.bytes(UInt64(1)),
            in: heads)
        }
      }
      let server = try SyncServer.open(
        dataDirectory: directory, configuration: .testing, logger: quietLogger)
      defer { server.close() }
      let outcome = try await server.store.sync(account: 1, pushing: [], after: 0, limit: 10)
      #expect(outcome.events == events)
      #expect(outcome.head.sequence == 2)
      #expect(outcome.head.digest == digest)
      let storage = try #require(server.store as? LMDBStorage)
      let log = storage.eventLog(of: 1)
      #expect(try storage.environment.read { try log.verify(in: $0) }.isEmpty)
    }
  }

  @Test(
    "a format 3 data directory (object index keyed by object first) is migrated: later deletions still erase"
  )
  func migrateFormat3() async throws {
    try await withTemporaryDirectory { root in
      let directory = root + "/server"
      var server = try SyncServer.open(
        dataDirectory: directory, configuration: .testing, logger: quietLogger)
      let note = NoteID(Identifier(high: 1, low: 1))
      let created = Event(
        stamp: Self.event(0, text: "").stamp, change: .noteCreated(note, creationDate: Date()))
      let canary = Self.event(1, text: "CANARY-7f3a")
      let gone = Self.event(2, text: "gone")
      let deleted = Event(
        stamp: Self.event(3, text: "").stamp,
        change: .noteDeleted(NoteID(Identifier(high: 1, low: 2))))
      try await server.store.createAccount(
        named: "ann",
        password: try PasswordHash(
          hashing: "correct horse battery", cost: .testing, salt: [UInt8](repeating: 1, count: 16)))
      _ = try await server.store.sync(
        account: 1, pushing: [created, canary, gone, deleted], after: 0, limit: 10)
      // Make it what format 3 wrote: account, object id, then sequence (0 for a marker).
      let storage = try #require(server.store as? LMDBStorage)
      let objects = try storage.environment.openDatabase(named: "objects", flags: [])
      let meta = try storage.environment.openDatabase(named: "meta", flags: [])
      try storage.environment.write { transaction in
        var entries: [([UInt8], [UInt8])] = []
        try transaction.forEach(in: objects) { key, value in
          entries.append((Array(key), Array(value)))
        }
        #expect(!entries.isEmpty && entries.allSatisfy { $0.0.count == 40 })
        try transaction.removeAll(in: objects)
        for (key, value) in entries {
          let marker = key[8..<16].allSatisfy { $0 == 0xFF }
          let sequence: [UInt8] = marker ? Array(repeating: 0, count: 8) : Array(key[32...])
          try transaction.put(
            value, forKey: Array(key[0..<8] + key[16..<32]) + sequence, in: objects)
        }
        try transaction.put(BigEndian.bytes(UInt32(3)), forKey: Array("format".utf8), in: meta)
      }
      server.close()
      server = try SyncServer.open(
        dataDirectory: directory, configuration: .testing, logger: quietLogger)
      defer { server.close() }
      #expect(try await server.verify().faults.isEmpty)
      let deletion = Event(stamp: Self.event(4, text: "").stamp, change: .noteDeleted(note))
      let outcome = try await server.store.sync(
        account: 1, pushing: [deletion], after: 0, limit: 10)
      #expect(outcome.events.count == 4)  // all but the one just pushed
      #expect(!outcome.events.contains { $0.description.contains("CANARY") })
      #expect(try await server.verify().faults.isEmpty)
    }
  }

  @Test(
    "a format 5 data directory (tags deleted by name) is migrated: the names go, verify is clean")
  func migrateFormat5() async throws {
    try await withTemporaryDirectory { root in
      let directory = root + "/server"
      var server = try SyncServer.open(
        dataDirectory: directory, configuration: .testing, logger: quietLogger)
      let note = NoteID(Identifier(high: 1, low: 1))
      func stamp(_ millisecond: UInt64) -> Stamp { Self.event(millisecond, text: "").stamp }
      let list = ["Quokka", "kept"]
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
      // Make it what format 5 wrote: the deletion by name, the list older than it whole.
      let storage = try #require(server.store as? LMDBStorage)
      let log = try storage.environment.openDatabase(named: "log", flags: [])
      let meta = try storage.environment.openDatabase(named: "meta", flags: [])
      try storage.environment.write { transaction in
        try EventLog.rewriteEvents(in: log, transaction: transaction) { event in
          switch event.change {
          case .tagErased: Event(stamp: event.stamp, change: .tagDeleted(name: "quokka"))
          case .tagsSet(note, ["kept"]):
            Event(stamp: event.stamp, change: .tagsSet(note, tags: list))
          default: nil
          }
        }
        try transaction.put(BigEndian.bytes(UInt32(5)), forKey: Array("format".utf8), in: meta)
      }
      #expect(try await server.verify().faults.count == 2)
      server.close()
      server = try SyncServer.open(
        dataDirectory: directory, configuration: .testing, logger: quietLogger)
      defer { server.close() }
      #expect(try await server.verify().faults.isEmpty)
      let outcome = try await server.store.sync(account: 1, pushing: [], after: 0, limit: 10)
      #expect(outcome.events.count == 3)
      #expect(!outcome.events.contains { $0.description.lowercased().contains("quokka") })
      #expect(outcome.events.last?.change == .tagErased(TagKey(name: "Quokka")))
    }
  }

  @Test(
    "a format 4 data directory gets its account and token indexes: sessions list, deletion erases")
  func migrateFormat4() async throws {
    try await withTemporaryDirectory { root in
      let directory = root + "/server"
      var server = try SyncServer.open(
        dataDirectory: directory, configuration: .testing, logger: quietLogger)
      let caller = APICaller(transport: InProcessTransport(server: server))
      let token = try await signUp(caller, "ann")
      _ = try await signUp(caller, "bob")
      _ = try await caller.sync(
        SyncPush(cursor: 0, events: [Self.event(1, text: "x")]), token: token
      )
      .get()
      // Make it what format 4 wrote: no account-name or account-token index.
      let storage = try #require(server.store as? LMDBStorage)
      let indexes = try ["accountNames", "accountTokens"].map {
        try storage.environment.openDatabase(named: $0, flags: [])
      }
      let meta = try storage.environment.openDatabase(named: "meta", flags: [])
      try storage.environment.write { transaction in
        for index in indexes { try transaction.removeAll(in: index) }
        try transaction.put(BigEndian.bytes(UInt32(4)), forKey: Array("format".utf8), in: meta)
      }
      server.close()
      server = try SyncServer.open(
        dataDirectory: directory, configuration: .testing, logger: quietLogger)
      defer { server.close() }
      let migrated = APICaller(transport: InProcessTransport(server: server))
      let sessions = try await migrated.sessions(token: token).get().sessions
      #expect(sessions.count == 1 && sessions[0].current)
      _ = try await migrated.deleteAccount(password: "correct horse battery", token: token).get()
      #expect(try await server.store.account(number: 1) == nil)
      #expect(try await server.store.tokens(of: 1).isEmpty)
      #expect(try await server.store.account(number: 2)?.name == "bob")
      #expect(try await server.verify().faults.isEmpty)
    }
  }
}
