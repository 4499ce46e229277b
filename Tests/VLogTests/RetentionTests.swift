import Foundation
import LMDB
import PropertyBased
import Synchronization
import Testing
import VLogTesting

@testable import VLog

/// Opens replicas with the given retention periods (one per replica), closes them afterwards.
func withReplicas<R>(
  retentions: [NoteStore.Retention], seed: UInt64 = 1, _ body: ([Replica]) async throws -> R
) async throws -> R {
  try await withTemporaryDirectory { root in
    var replicas: [Replica] = []
    for (index, retention) in retentions.enumerated() {
      let clock = ManualClock()
      var options = NoteStore.Options(
        durability: .noSync,
        dependencies: .testing(clock: clock, seed: seed &* 1000 &+ UInt64(index)))
      options.retention = retention
      let store = try NoteStore.open(at: "\(root)/replica-\(index)", options: options)
      replicas.append(Replica(store: store, clock: clock))
    }
    defer { for replica in replicas { replica.store.close() } }
    return try await body(replicas)
  }
}

@Suite("Retention")
struct RetentionTests {
  @Test(
    "with retention 0, a note edited 1,000 times keeps one text; state and digests are those of a store that keeps everything"
  )
  func retentionZero() async throws {
    try await withReplicas(retentions: [.period(.zero), .forever, .forever]) { replicas in
      let (bounded, keeping, receiver) = (replicas[0].store, replicas[1].store, replicas[2].store)
      let id = try bounded.write { $0.createNote(text: "version 0", tags: ["draft"]) }
      for version in 1...1000 {
        replicas[0].clock.advance(by: 0.001)
        try bounded.write { $0.setText("version \(version)", of: id) }
      }
      try bounded.write { $0.setTags(["final"], of: id) }
      let events = try bounded.events()
      let texts = events.filter { if case .textSet = $0.event.change { true } else { false } }
      #expect(texts.count == 1001)
      #expect(
        texts.filter { !$0.event.isRedacted }.map { logged -> String? in
          if case .textSet(id, let text, _) = logged.event.change { text } else { nil }
        } == ["version 1000"])
      #expect(texts.dropLast().allSatisfy { $0.event.redaction == .superseded })
      #expect(try bounded.note(id)?.text == "version 1000")
      #expect(try bounded.verify().isEmpty)

      // A store that keeps every value and one that only got the redacted log agree with it.
      try receiver.ingest(events.map(\.event))
      let full = try bounded.events().map(\.event)
      try keeping.ingest(full)
      #expect(try converged([bounded, keeping, receiver]))
      #expect(try bounded.tags().map(\.tag.name) == ["final"])

      // The history says which values retention took.
      let history = try bounded.history(of: id)
      let superseded = history.filter { $0.logged.event.redaction == .superseded }
      // 1,000 texts; the tags list stays, since a tag's own changes do not replace the list.
      #expect(superseded.count == 1000)
      // The text, the list, the removal of `draft` and the addition of `final`.
      #expect(history.filter { $0.outcome == .won }.count == 4)
    }
  }

  @Test("with 30 days, a replaced value is kept for 30 days after it was replaced, then redacted")
  func thirtyDays() async throws {
    try await withReplicas(retentions: [.standard]) { replicas in
      let (store, clock) = (replicas[0].store, replicas[0].clock)
      let id = try store.write { $0.createNote(text: "old secret") }
      clock.advance(by: 10 * 86400)
      try store.write { $0.setText("new", of: id) }
      clock.advance(by: 29 * 86400)
      #expect(try store.applyRetention() == 0)
      #expect(
        try store.history(of: id).contains { $0.logged.event.description.contains("old secret") })
      clock.advance(by: 2 * 86400)
      // Any commit applies it; so does applyRetention.
      _ = try store.write { $0.createNote(text: "other") }
      let history = try store.history(of: id)
      #expect(!history.contains { $0.logged.event.description.contains("old secret") })
      #expect(history.contains { $0.logged.event.redaction == .superseded })
      #expect(try store.note(id)?.text == "new")
      #expect(try store.verify().isEmpty)
    }
  }

  @Test("the retention setting is kept in the store: a tool that opens it does not change it")
  func settingPersists() throws {
    try withTemporaryDirectory { root in
      let fresh = try NoteStore.open(at: root + "/a")
      #expect(fresh.retention == .seconds(30 * 86400))
      fresh.close()
      var options = NoteStore.Options()
      options.retention = .forever
      let set = try NoteStore.open(at: root + "/a", options: options)
      #expect(set.retention == nil)
      set.close()
      let reopened = try NoteStore.open(at: root + "/a")
      #expect(reopened.retention == nil)
      reopened.close()
      options.retention = .period(.seconds(90))
      let changed = try NoteStore.open(at: root + "/a", options: options)
      #expect(changed.retention == .seconds(90))
      changed.close()
      #expect(try NoteStore.open(at: root + "/a").retention == .seconds(90))
    }
  }

  @Test("verify reports a value kept past the retention period")
  func verifyCatchesKeptValue() async throws {
    try await withReplicas(retentions: [.period(.zero)]) { replicas in
      let store = replicas[0].store
      let id = try store.write { $0.createNote(text: "first") }
      let first = try #require(
        try store.events().first { if case .textSet = $0.event.change { true } else { false } })
      try store.write { $0.setText("second", of: id) }
      #expect(try store.verify().isEmpty)
      try store.environment.write { transaction in
        let bytes = first.event.encoded()
        try transaction.put(
          forKey: BigEndian.bytes(first.sequence),
          reservingCount: LogRecord.headerSize + bytes.count, in: store.schema.log
        ) { LogRecord.write(bytes, into: $0) }
      }
      let faults = try store.verify()
      #expect(faults.contains { $0.kind == .erasure && $0.message.contains("retention") })
    }
  }

  @Test(
    "retention commutes with merge: with retention 0, without, or receiving a redacted log, in any order, one state"
  )
  func retentionCommutes() async {
    let checked = Atomic<Int>(0)
    await propertyCheck(count: 150, input: RandomEvents.generator) { specs in
      checked.add(1, ordering: .relaxed)
      let events = RandomEvents.events(specs)
      let holds = try await withReplicas(
        retentions: [.period(.zero), .forever, .forever, .period(.zero)],
        seed: UInt64(specs.count)
      ) { replicas in
        let stores = replicas.map(\.store)
        try stores[0].ingest(events)
        try stores[1].ingest(events)
        try stores[2].ingest(Array(events.prefix(events.count / 3)))
        try stores[2].ingest(allEvents(stores[0]))
        for event in events.reversed() { try stores[3].ingest([event]) }
        guard try converged(stores) else { return false }
        for store in stores { guard try store.verify().isEmpty else { return false } }
        // What retention 0 left unredacted is what the state needs.
        let rebuilt = try stores[0].stateDigest()
        try stores[0].rebuildProjections()
        return try stores[0].stateDigest() == rebuilt
      }
      #expect(holds, "diverged on \(events.map(\.description))")
    }
    #expect(checked.load(ordering: .relaxed) >= 150)
  }
}
