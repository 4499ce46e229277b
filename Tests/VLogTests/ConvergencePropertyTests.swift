import Foundation
import PropertyBased
import Synchronization
import Testing
import VLogTesting

@testable import VLog

/// Random event sets from several replicas whose clocks collide, built from integers so that
/// PropertyBased can shrink a failing set to a small one.
enum RandomEvents {
  static let replicas = (1...3).map { ReplicaID(Identifier(high: 0, low: UInt64($0))) }
  static let notes = (1...3).map { NoteID(Identifier(high: 1, low: UInt64($0))) }
  static let attachments = (1...2).map { AttachmentID(Identifier(high: 2, low: UInt64($0))) }
  static let tagNames = ["Paris", "paris", "Work", "home", "PARIS"]

  /// A list of encoded event specifications.
  static let generator = Gen.int(in: 0...9_999_999).array(of: 1...40)

  /// The events the specifications describe, each with a unique stamp. Wall times fall in a
  /// window of four milliseconds, so replicas collide on equal times all the time.
  static func events(_ specs: [Int]) -> [Event] {
    var counters: [Stamp: UInt16] = [:]
    return specs.map { spec in
      var value = spec
      func take(_ count: Int) -> Int {
        defer { value /= count }
        return value % count
      }
      let replica = replicas[take(replicas.count)]
      let milliseconds = UInt64(1_000 + take(4))
      let kind = take(13)
      let note = notes[take(notes.count)]
      let detail = take(1000)
      let base = Stamp(time: HybridTime(milliseconds: milliseconds, counter: 0), replica: replica)
      let counter = counters[base, default: 0]
      counters[base] = counter + 1
      let stamp = Stamp(
        time: HybridTime(milliseconds: milliseconds, counter: counter), replica: replica)
      return Event(stamp: stamp, change: change(kind, note, detail))
    }
  }

  private static func change(_ kind: Int, _ note: NoteID, _ detail: Int) -> Change {
    let attachment = attachments[detail % attachments.count]
    switch kind {
    case 0, 1: return .noteCreated(note, creationDate: Date(milliseconds: Int64(detail)))
    case 2, 3: return .textSet(note, text: "text \(detail % 7)")
    case 4: return .archivedSet(note, archived: detail % 2 == 0)
    case 5: return .sortDateSet(note, sortDate: Date(milliseconds: Int64(detail % 5) * 1000))
    case 6:
      let names = tagNames.enumerated().filter { detail & (1 << $0.offset) != 0 }.map(\.element)
      return .tagsSet(note, tags: names)
    case 7: return .attachmentsSet(note, attachments: detail % 3 == 0 ? [] : [attachment])
    case 8: return detail % 4 == 0 ? .noteDeleted(note) : .textSet(note, text: "kept")
    case 9:
      return .attachmentAdded(
        Attachment(
          id: attachment, noteID: note, mimeType: detail % 2 == 0 ? "image/png" : "text/plain",
          width: detail % 3, height: 1, blobHash: BlobHash(bytes: Array(repeating: 7, count: 32))!,
          byteCount: 10))
    case 10: return detail % 3 == 0 ? .attachmentDeleted(attachment) : .tagRenamed(name: "pARIS")
    case 11:
      let name = tagNames[detail % tagNames.count]
      return detail % 4 == 0 ? .tagDeleted(name: name) : .tagRenamed(name: name)
    default: return .unknown(kind: EventKind(rawValue: 40 + UInt64(detail % 3)))
    }
  }
}

/// Whether ingesting `events` in several orders and batchings, with duplicates, always gives the
/// same state and event set, and whether a rebuild from the log gives it too.
func convergesInAnyOrder(
  _ events: [Event], seed: UInt64, mergePolicy: any MergePolicy
) async throws -> Bool {
  try await withReplicas(4, seed: seed, mergePolicy: mergePolicy) { replicas in
    var generator = SeededIdentifiers(seed: seed)
    // 1: one batch, in the given order.
    try replicas[0].store.ingest(events)
    // 2: one event at a time, reversed.
    for event in events.reversed() { try replicas[1].store.ingest([event]) }
    // 3: shuffled, in random batches, with duplicates.
    var shuffled = events + events.prefix(events.count / 2)
    shuffle(&shuffled, using: &generator)
    var index = 0
    while index < shuffled.count {
      let size = Int(generator.next().low % 5) + 1
      try replicas[2].store.ingest(Array(shuffled[index..<min(index + size, shuffled.count)]))
      index += size
    }
    // 4: three sets merged as A ∪ (B ∪ C): C and B first, then A.
    let third = events.count / 3
    let a = Array(events[..<third])
    let b = Array(events[third..<(2 * third)])
    let c = Array(events[(2 * third)...])
    try replicas[3].store.ingest(c + b)
    try replicas[3].store.ingest(a)

    let stores = replicas.map(\.store)
    guard try converged(stores) else { return false }
    // Incremental ingest equals a rebuild from scratch.
    let before = try stores[2].stateDigest()
    try stores[2].rebuildProjections()
    return try stores[2].stateDigest() == before
  }
}

private func shuffle(_ events: inout [Event], using identifiers: inout SeededIdentifiers) {
  guard events.count > 1 else { return }
  for index in stride(from: events.count - 1, to: 0, by: -1) {
    let other = Int(identifiers.next().low % UInt64(index + 1))
    events.swapAt(index, other)
  }
}

@Suite("Convergence properties")
struct ConvergencePropertyTests {
  @Test("any order, any batching, duplicates: identical state and event-set digests")
  func convergence() async {
    let checked = Atomic<Int>(0)
    await propertyCheck(count: 200, input: RandomEvents.generator) { specs in
      checked.add(1, ordering: .relaxed)
      let events = RandomEvents.events(specs)
      let holds = try await convergesInAnyOrder(
        events, seed: UInt64(specs.count), mergePolicy: StandardMerge())
      #expect(holds, "diverged on \(events.count) events: \(events.map(\.description))")
    }
    #expect(checked.load(ordering: .relaxed) >= 200)
  }

  @Test("the same property finds a counterexample when the merge compares wall time only")
  func catchesAWrongMerge() async throws {
    var generator = Xoshiro(seed: (1, 2, 3, 4))
    var counterexample: [Event]?
    for attempt in 0..<200 where counterexample == nil {
      let events = RandomEvents.events(RandomEvents.generator.run(using: &generator))
      if try await !convergesInAnyOrder(events, seed: UInt64(attempt), mergePolicy: WallTimeOnly())
      {
        counterexample = events
      }
    }
    #expect(counterexample != nil, "the wrong merge rule went unnoticed")
  }

  @Test("a store that receives its events twice, or its own events back, does not change")
  func idempotence() async throws {
    try await withReplicas(2) { replicas in
      let store = replicas[0].store
      let id = try store.write { $0.createNote(text: "once", tags: ["A"]) }
      try store.write { $0.setArchived(true, of: id) }
      let digests = (try store.stateDigest(), try store.eventSetDigest())
      let result = try store.ingest(allEvents(store))
      #expect(result.appended == 0)
      #expect(result.duplicates == 4)
      #expect(result.changes.isEmpty)
      #expect(try (store.stateDigest(), store.eventSetDigest()) == digests)
      #expect(try store.eventCount() == 4)
    }
  }
}

/// A deliberately wrong merge, injected to show that the property catches it: wall-clock
/// milliseconds only, ties going to whichever change arrives last, so replicas that receive
/// events in different orders diverge.
struct WallTimeOnly: MergePolicy {
  func wins(_ new: Stamp, over old: Stamp) -> Bool {
    new.time.milliseconds >= old.time.milliseconds
  }
}
