import Foundation
import ServerTestSupport
import Testing
import VLogServerTesting
import VLogSync
import VLogTesting

@testable import VLog
@testable import VLogServer

/// The two backends are two implementations of one set of rules (erasure, retention, paging,
/// idempotency): pushed the same events in the same batches, they must store the same bytes.
@Suite("Backend equivalence")
struct BackendEquivalenceTests {
  /// Events of three devices that made random changes — every field, deletions of notes,
  /// attachments and tags, renames — and synced through a scratch server between rounds: each
  /// device's log as it would push it.
  static func deviceLogs(seed: UInt64) async throws -> [[Event]] {
    try await withServer(backend: .lmdb, seed: seed) { scratch in
      try await withTemporaryDirectory { root in
        var generator = SeededGenerator(seed: seed)
        let devices = try openDevices(
          3, root: root, transport: { _ in InProcessTransport(server: scratch) },
          credentials: Credentials(username: "ann", password: "correct horse battery"), seed: seed)
        defer { for device in devices { device.store.close() } }
        try await devices[0].account.createAccount()
        var shared: [NoteID] = []
        for round in 0..<4 {
          for (index, device) in devices.enumerated() {
            device.clock.advance(by: Double(round * 10 + index))
            let created = try makeRandomChanges(
              on: device.store, count: 8, shared: shared, using: &generator)
            if round == 0 { shared += created.prefix(2) }
            if generator.next() % 5 == 0,
              try device.store.tags().contains(where: { $0.tag.id == TagID(name: "work") })
            {
              // Refused when no note has the tag any more: then there is nothing to delete.
              _ = try? await device.store.write { $0.deleteTag(named: "work") }
            }
            _ = try await device.account.sync()
          }
        }
        return try devices.map { try $0.store.events().map(\.event) }
      }
    }
  }

  /// The pushes: every device's events in random batches, interleaved, some sent twice.
  static func batches(of logs: [[Event]], seed: UInt64) -> [[Event]] {
    var generator = SeededGenerator(seed: seed ^ 0x5EED)
    var positions = logs.map { _ in 0 }
    var batches: [[Event]] = []
    while positions.indices.contains(where: { positions[$0] < logs[$0].count }) {
      let device = positions.indices.filter { positions[$0] < logs[$0].count }
        .randomElement(using: &generator)!
      let count = Int.random(in: 1...25, using: &generator)
      let end = min(logs[device].count, positions[device] + count)
      var batch = Array(logs[device][positions[device]..<end])
      positions[device] = end
      if generator.next() % 4 == 0, let previous = batches.last {
        batch = previous.suffix(3) + batch  // a retry after a lost answer
      }
      batches.append(batch)
    }
    return batches
  }

  struct Snapshot: Equatable {
    let stored: [Int]
    let head: [UInt64]
    let digest: [EventSetDigest]
    let events: [[UInt8]]
    let blobs: [Bool]
  }

  /// Pushes `batches` to `server`'s account 1 and records what each push did and what the log
  /// holds at the end.
  static func replay(
    _ batches: [[Event]], on server: SyncServer, retention: Duration?, blobs: [BlobHash]
  ) async throws -> Snapshot {
    try await createAccounts(["ann"], in: server.store)
    for hash in blobs {
      _ = try await server.store.storeBlob(Array("blob".utf8), hash: hash, account: 1, now: 0)
    }
    var stored: [Int] = []
    var heads: [UInt64] = []
    var digests: [EventSetDigest] = []
    for batch in batches {
      let now = (batch.map(\.stamp.time.milliseconds).max() ?? 0) + 60_000
      let outcome = try await server.store.sync(
        account: 1, pushing: batch, after: 0, limit: 3, maximumBytes: .max,
        retention: (retention, Milliseconds(rawValue: now)))
      stored.append(outcome.stored)
      heads.append(outcome.head.sequence)
      digests.append(outcome.head.digest)
    }
    let page = try await server.store.sync(
      account: 1, pushing: [], after: 0, limit: 100_000, maximumBytes: .max,
      retention: (nil, 0))
    var present: [Bool] = []
    for hash in blobs { present.append(try await server.store.blob(hash, account: 1) != nil) }
    #expect(try await server.verify().faults.isEmpty)
    return Snapshot(
      stored: stored, head: heads, digest: digests, events: page.events.map { $0.encoded() },
      blobs: present)
  }

  static func blobs(in logs: [[Event]]) -> [BlobHash] {
    var hashes: [BlobHash] = []
    for event in logs.joined() {
      if case .attachmentAdded(let attachment) = event.change,
        !hashes.contains(attachment.blobHash)
      {
        hashes.append(attachment.blobHash)
      }
    }
    return hashes
  }

  @Test(
    "LMDB and PostgreSQL store the same bytes for the same pushes: erasure, retention, retries",
    arguments: 0..<UInt64(12))
  func sameBytes(seed: UInt64) async throws {
    let logs = try await Self.deviceLogs(seed: seed)
    let batches = Self.batches(of: logs, seed: seed)
    let retention: Duration? = [nil, .zero, .seconds(3)][Int(seed % 3)]
    let blobs = Self.blobs(in: logs)
    let lmdb = try await withServer(backend: .lmdb) { server in
      try await Self.replay(batches, on: server, retention: retention, blobs: blobs)
    }
    let postgres = try await withServer(backend: .postgres) { server in
      try await Self.replay(batches, on: server, retention: retention, blobs: blobs)
    }
    #expect(lmdb.events.count > 50)
    #expect(lmdb.stored == postgres.stored)
    #expect(lmdb.head == postgres.head)
    #expect(lmdb.digest == postgres.digest)
    #expect(lmdb.blobs == postgres.blobs)
    #expect(lmdb.events == postgres.events, "seed \(seed)")
    if seed == 1 {
      // The comparison can fail: the same pushes under another retention differ.
      let other = try await withServer(backend: .postgres) { server in
        try await Self.replay(
          batches, on: server, retention: retention == nil ? .zero : nil, blobs: blobs)
      }
      #expect(other.events != lmdb.events)
    }
  }

  @Test(
    "A rule changed in the engine's LogBatch changes what both backends store, alike, and verify reports it on both"
  )
  func plantedRuleReachesBothBackends() async throws {
    let replica = ReplicaID(Identifier(high: 0x91A7, low: 1))
    let note = NoteID(Identifier(high: 3, low: 1))
    func event(_ counter: UInt16, _ change: Change) -> Event {
      Event(
        stamp: Stamp(
          time: HybridTime(milliseconds: 1_790_000_000_000, counter: counter), replica: replica),
        change: change)
    }
    // A note deleted on one device while another's edits were still on their way.
    let pushes = [
      [
        event(1, .noteCreated(note, creationDate: Date(timeIntervalSince1970: 1_790_000_000))),
        event(2, .textSet(note, text: "before the deletion")),
        event(4, .noteDeleted(note)),
      ],
      [event(3, .textSet(note, text: "late")), event(5, .archivedSet(note, archived: true))],
    ]
    var planted = SyncServer.Configuration.testing
    planted.logRules = .keepsLateContent
    func replay(_ backend: Backend, _ configuration: SyncServer.Configuration) async throws
      -> (events: [Event], faults: [VerificationFault])
    {
      try await withServer(backend: backend, configuration: configuration) { server in
        try await createAccounts(["ann"], in: server.store)
        for push in pushes {
          _ = try await server.store.sync(account: 1, pushing: push, after: 0, limit: 1)
        }
        let page = try await server.store.sync(account: 1, pushing: [], after: 0, limit: 100)
        return (page.events, try await server.verify().faults)
      }
    }
    let standard = try await replay(.lmdb, .testing)
    let plantedLMDB = try await replay(.lmdb, planted)
    let plantedPostgres = try await replay(.postgres, planted)
    // The standard rules store the late edits redacted; the planted one as they came, on both
    // backends alike.
    #expect(standard.events.filter(\.isRedacted).count == 4)
    #expect(plantedLMDB.events.filter(\.isRedacted).count == 2)
    #expect(plantedLMDB.events.map { $0.encoded() } == plantedPostgres.events.map { $0.encoded() })
    // The checks, also the engine's, find what the plant kept, on both.
    #expect(standard.faults.isEmpty)
    #expect(plantedLMDB.faults.count == 2)
    #expect(plantedLMDB.faults.allSatisfy { $0.kind == .erasure })
    #expect(plantedPostgres.faults.map(\.kind) == plantedLMDB.faults.map(\.kind))
  }

  @Test(
    "A blob whose last attachment is erased stays if the same push names it again, and goes when that one is deleted too",
    arguments: Backend.allCases)
  func blobReleasedAndNamedAgain(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      try await createAccounts(["ann"], in: server.store)
      let bytes = Array("the same photo".utf8)
      let hash = try #require(BlobHash(bytes: sha256(bytes)))
      #expect(try await server.store.storeBlob(bytes, hash: hash, account: 1, now: 0))
      let replica = ReplicaID(Identifier(high: 0xB10B, low: 1))
      var counter: UInt16 = 0
      func event(_ change: Change) -> Event {
        counter += 1
        return Event(
          stamp: Stamp(
            time: HybridTime(milliseconds: 1_790_000_000_000, counter: counter),
            replica: replica),
          change: change)
      }
      let (first, second) = (
        NoteID(Identifier(high: 1, low: 1)), NoteID(Identifier(high: 1, low: 2))
      )
      func attachment(_ low: UInt64, on note: NoteID) -> Change {
        .attachmentAdded(
          Attachment(
            id: AttachmentID(Identifier(high: 2, low: low)), noteID: note, mimeType: "image/png",
            width: 1, height: 1, blobHash: hash, byteCount: bytes.count))
      }
      let push = [
        event(.noteCreated(first, creationDate: Date(timeIntervalSince1970: 1_790_000_000))),
        event(attachment(1, on: first)),
        event(.noteDeleted(first)),
        event(.noteCreated(second, creationDate: Date(timeIntervalSince1970: 1_790_000_000))),
        event(attachment(2, on: second)),
      ]
      _ = try await server.store.sync(account: 1, pushing: push, after: 0, limit: 10)
      #expect(try await server.store.blob(hash, account: 1) == bytes)
      _ = try await server.store.sync(
        account: 1, pushing: [event(.noteDeleted(second))], after: 0, limit: 10)
      // Released (at 0 here), the bytes wait out the grace period, for an undo: still served,
      // and counted as held until the time asked about passes the release.
      #expect(try await server.store.blob(hash, account: 1) == bytes)
      #expect(try await server.store.missingBlobs([hash], account: 1, releasedBefore: 0) == [])
      #expect(
        try await server.store.missingBlobs([hash], account: 1, releasedBefore: 1) == [hash])
      #expect(try await server.verify().faults.isEmpty)
      // An attachment that uses them again (an undo's) keeps them past the sweep.
      let third = NoteID(Identifier(high: 1, low: 3))
      _ = try await server.store.sync(
        account: 1,
        pushing: [
          event(.noteCreated(third, creationDate: Date(timeIntervalSince1970: 1_790_000_000))),
          event(attachment(3, on: third)),
        ], after: 0, limit: 10)
      #expect(try await server.store.sweepReleasedBlobs(releasedBefore: 1) == 0)
      #expect(try await server.store.blob(hash, account: 1) == bytes)
      // Released again and past the grace period: swept.
      _ = try await server.store.sync(
        account: 1, pushing: [event(.noteDeleted(third))], after: 0, limit: 10)
      #expect(try await server.store.sweepReleasedBlobs(releasedBefore: 0) == 0)
      #expect(try await server.store.sweepReleasedBlobs(releasedBefore: 1) == 1)
      #expect(try await server.store.blob(hash, account: 1) == nil)
      #expect(try await server.verify().faults.isEmpty)
    }
  }
}
