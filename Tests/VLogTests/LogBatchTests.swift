import Foundation
import PropertyBased
import Testing

@testable import VLog

/// A log kept in dictionaries: the storage a ``LogBatch`` needs, with nothing of LMDB's or
/// PostgreSQL's. It answers facts from what it holds and writes what a finished batch decided.
private struct MemoryLog: LogFacts {
  var events: [UInt64: Event] = [:]
  var deletions: Set<Identifier> = []
  var tagDeletions: [Identifier: Stamp] = [:]
  var fields: [FieldKey: FieldChange] = [:]
  var objects: [Identifier: [UInt64]] = [:]
  var references: [BlobHash: Set<UInt64>] = [:]
  var queue: [ReplacedChange] = []
  var lastSequence: UInt64 = 0

  mutating func isDeleted(_ object: Identifier) -> Bool { deletions.contains(object) }

  mutating func tagDeletion(of tagObject: Identifier) -> Stamp? { tagDeletions[tagObject] }

  mutating func newestChanges(to keys: [FieldKey]) -> [FieldKey: FieldChange] {
    fields.filter { keys.contains($0.key) }
  }

  mutating func sequences(of objects: [Identifier]) -> [Identifier: [UInt64]] {
    self.objects.filter { objects.contains($0.key) }
  }

  mutating func events(at sequences: [UInt64]) -> [UInt64: Event] {
    events.filter { sequences.contains($0.key) }
  }

  mutating func referenced(_ blobs: [BlobHash: Set<UInt64>]) -> [BlobHash: Bool] {
    blobs.mapValues { _ in false }.merging(
      blobs.map { ($0.key, !(references[$0.key] ?? []).subtracting($0.value).isEmpty) }
    ) { $1 }
  }

  /// Writes what a finished batch decided.
  mutating func write(_ changes: LogDecisions) {
    for logged in changes.appended {
      events[logged.sequence] = logged.event
      lastSequence = max(lastSequence, logged.sequence)
    }
    for (sequence, event) in changes.redacted { events[sequence] = event }
    for (object, sequence) in changes.objects { objects[object, default: []].append(sequence) }
    for (object, _) in changes.deletions { deletions.insert(object) }
    tagDeletions.merge(changes.tagDeletions) { max($0, $1) }
    for (hash, sequences) in changes.addedReferences {
      references[hash, default: []].formUnion(sequences)
    }
    for (hash, sequences) in changes.removedReferences { references[hash]?.subtract(sequences) }
    for (key, change) in changes.fields { fields[key] = change }
    for key in changes.forgottenFields { fields[key] = nil }
    queue += changes.replaced
    queue.removeAll { changes.dequeued.contains($0) }
  }

  /// Appends `events` in batches of the given sizes (the rest in one more).
  static func appending(_ events: [Event], inBatchesOf sizes: [Int]) throws -> MemoryLog {
    var log = MemoryLog()
    var rest = events[...]
    for size in sizes + [events.count] where !rest.isEmpty {
      var batch = LogBatch(lastSequence: log.lastSequence, tracksFields: true)
      for event in rest.prefix(max(1, size)) { _ = try batch.append(event, facts: &log) }
      rest = rest.dropFirst(max(1, size))
      try batch.finish(facts: &log)
      log.write(batch.decisions)
    }
    return log
  }
}

/// Changes to two notes from three devices, built from integers so that PropertyBased can
/// shrink a failing history: creations, texts, archive flags, sort dates, tags lists and
/// deletions.
private func noteEvents(_ steps: [Int]) -> [Event] {
  let notes = [NoteID(Identifier(high: 7, low: 1)), NoteID(Identifier(high: 7, low: 2))]
  let replicas = (1...3).map { ReplicaID(Identifier(high: 9, low: UInt64($0))) }
  return steps.enumerated().map { index, step in
    let note = notes[step / 8 % notes.count]
    let stamp = Stamp(
      time: HybridTime(milliseconds: UInt64(1_000 + index), counter: 0),
      replica: replicas[step % replicas.count])
    let change: Change =
      switch step % 6 {
      case 0: .noteCreated(note, creationDate: Date(milliseconds: 5))
      case 1: .textSet(note, text: "text \(index)", replacing: nil)
      case 2: .archivedSet(note, archived: index % 2 == 0)
      case 3: .sortDateSet(note, sortDate: Date(milliseconds: Int64(index)))
      case 4: .tagsSet(note, tags: ["t\(index % 3)"])
      default: step % 5 == 0 ? .noteDeleted(note) : .archivedSet(note, archived: true)
      }
    return Event(stamp: stamp, change: change)
  }
}

@Suite("Log batch: the log's rules without storage")
struct LogBatchTests {
  @Test(
    "any order and batching: a deleted note's events redacted, every other field's changes but its newest queued once, each field's newest kept"
  )
  func rules() async {
    await propertyCheck(
      count: 200, input: Gen.int(in: 0...95).array(of: 1...30), Gen.int(in: 1...6).array(of: 0...6)
    ) { steps, sizes in
      let events = noteEvents(steps)
      let deleted = Set(events.compactMap { $0.change.deletedObject })
      var generator = Xoshiro(seed: (UInt64(steps.count), 1, 2, 3))
      var redactedIn: [Set<Stamp>] = []
      for order in [events, events.reversed(), events.shuffled(using: &generator)] {
        guard let log = try? MemoryLog.appending(order, inBatchesOf: sizes) else {
          Issue.record("the batch threw")
          return
        }
        #expect(Set(log.events.values.map(\.stamp)) == Set(events.map(\.stamp)))
        let stamps = log.events.mapValues(\.stamp)
        // Rule 1: every event of a deleted note but its deletions is redacted, and no other.
        for event in log.events.values {
          let note = event.change.noteID?.identifier ?? event.change.deletedObject
          let erased = note.map(deleted.contains) ?? false
          #expect(event.isRedacted == (erased && event.change.kind != .noteDeleted))
        }
        redactedIn.append(Set(log.events.values.filter(\.isRedacted).map(\.stamp)))
        // Rule 4, for the notes that stay: each field keeps its newest change; the others of
        // archive flags, sort dates and tags lists are queued, each once. A text that arrives
        // older than the newest may be a conflict, and is not queued.
        let queued = log.queue.map { stamps[$0.sequence]! }
        #expect(queued.count == Set(queued).count)
        for field in NoteField.allCases {
          for note in Set(events.compactMap(\.change.noteID))
          where !deleted.contains(note.identifier) {
            let changes = events.filter { $0.change.fieldKey == FieldKey(note: note, field: field) }
              .map(\.stamp).sorted(by: >)
            let newest = log.fields[FieldKey(note: note, field: field)]
            #expect(newest.flatMap { stamps[$0.sequence] } == changes.first)
            let replaced = Set(changes.dropFirst())
            let queuedHere = Set(queued).intersection(changes)
            if field == .text {
              #expect(queuedHere.isSubset(of: replaced))
            } else {
              #expect(queuedHere == replaced)
            }
          }
        }
      }
      #expect(Set(redactedIn).count == 1, "every order redacts the same events")
    }
  }

  @Test("a planted rule that keeps late content is caught: an edit after its note's deletion stays")
  func catchesLateContent() throws {
    let note = NoteID(Identifier(high: 7, low: 1))
    let replica = ReplicaID(Identifier(high: 9, low: 1))
    let deletion = Event(
      stamp: Stamp(time: HybridTime(milliseconds: 1_000, counter: 0), replica: replica),
      change: .noteDeleted(note))
    let edit = Event(
      stamp: Stamp(time: HybridTime(milliseconds: 1_001, counter: 0), replica: replica),
      change: .textSet(note, text: "late", replacing: nil))
    for rules in [LogRules.standard, .keepsLateContent] {
      var log = MemoryLog()
      for event in [deletion, edit] {
        var batch = LogBatch(lastSequence: log.lastSequence, tracksFields: true, rules: rules)
        _ = try batch.append(event, facts: &log)
        try batch.finish(facts: &log)
        log.write(batch.decisions)
      }
      #expect(log.events[2]?.isRedacted == (rules == .standard))
    }
  }
}

/// A ``MemoryLog`` seen as a database is: only the facts read so far are known, and a lookup of
/// any other throws ``MissingLogFacts`` naming it, for a round of reads.
private struct RoundTripFacts: LogFacts {
  var log: MemoryLog
  var known = MissingLogFacts()
  /// Round trips made.
  var rounds = 0

  mutating func read(_ missing: MissingLogFacts) {
    rounds += 1
    known.deletions.formUnion(missing.deletions)
    known.fields.formUnion(missing.fields)
    known.sequences.formUnion(missing.sequences)
    known.events.formUnion(missing.events)
    known.references.merge(missing.references) { $1 }
  }

  private func need<T>(_ path: WritableKeyPath<MissingLogFacts, Set<T>>, _ values: [T]) throws {
    let unknown = Set(values).subtracting(known[keyPath: path])
    guard unknown.isEmpty else {
      var missing = MissingLogFacts()
      missing[keyPath: path] = unknown
      throw missing
    }
  }

  mutating func isDeleted(_ object: Identifier) throws -> Bool {
    try need(\.deletions, [object])
    return log.isDeleted(object)
  }

  mutating func tagDeletion(of tagObject: Identifier) throws -> Stamp? {
    try need(\.deletions, [tagObject])
    return log.tagDeletion(of: tagObject)
  }

  mutating func newestChanges(to keys: [FieldKey]) throws -> [FieldKey: FieldChange] {
    try need(\.fields, keys)
    return log.newestChanges(to: keys)
  }

  mutating func sequences(of objects: [Identifier]) throws -> [Identifier: [UInt64]] {
    try need(\.sequences, objects)
    return log.sequences(of: objects)
  }

  mutating func events(at sequences: [UInt64]) throws -> [UInt64: Event] {
    try need(\.events, sequences)
    return log.events(at: sequences)
  }

  mutating func referenced(_ blobs: [BlobHash: Set<UInt64>]) throws -> [BlobHash: Bool] {
    var missing = MissingLogFacts()
    for (hash, excluded) in blobs where known.references[hash] != excluded {
      missing.references[hash] = excluded
    }
    guard missing.isEmpty else { throw missing }
    return log.referenced(blobs)
  }
}

@Suite("Log batch: facts read in rounds")
struct FactsRoundTests {
  /// Runs `step` in rounds until it is done, reading what each round needs.
  private func resolve<T>(
    _ batch: inout LogBatch, _ facts: inout RoundTripFacts, inPlace: Bool,
    _ step: (inout LogBatch, inout RoundTripFacts) throws -> T
  ) throws -> T {
    for _ in 0..<16 {
      switch try batch.round(inPlace: inPlace, facts: &facts, step) {
      case .done(let result): return result
      case .needs(let missing): facts.read(missing)
      }
    }
    throw MissingLogFacts()
  }

  @Test(
    "a batch over facts read in rounds decides what it decides over facts known at once, in a few rounds per step"
  )
  func roundsDecideTheSame() async {
    await propertyCheck(count: 100, input: Gen.int(in: 0...95).array(of: 2...30)) { steps in
      let events = noteEvents(steps)
      let half = events.count / 2
      guard var direct = try? MemoryLog.appending(Array(events[..<half]), inBatchesOf: []) else {
        Issue.record("the batch threw")
        return
      }
      var rounds = RoundTripFacts(log: direct)
      var batch = LogBatch(lastSequence: direct.lastSequence, tracksFields: true)
      var expected = LogBatch(lastSequence: direct.lastSequence, tracksFields: true)
      do {
        for event in events[half...] {
          _ = try resolve(&batch, &rounds, inPlace: true) { try $0.append(event, facts: &$1) }
          _ = try expected.append(event, facts: &direct)
        }
        try resolve(&batch, &rounds, inPlace: false) { try $0.finish(facts: &$1) }
        try expected.finish(facts: &direct)
      } catch {
        Issue.record("a step threw: \(error)")
        return
      }
      var viaRounds = rounds.log
      viaRounds.write(batch.decisions)
      direct.write(expected.decisions)
      #expect(viaRounds.events == direct.events)
      #expect(viaRounds.fields == direct.fields)
      #expect(Set(viaRounds.queue) == Set(direct.queue))
      #expect(viaRounds.deletions == direct.deletions)
      #expect(rounds.rounds <= 4 * (events.count - half + 1), "each step needs a few rounds")
    }
  }
}
