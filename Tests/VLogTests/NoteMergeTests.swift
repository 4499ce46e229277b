import Foundation
import PropertyBased
import Testing

@testable import VLog

/// Changes to one note made on three devices, built from integers so that PropertyBased can
/// shrink a failing history: creations, texts that record no base, archive flags, sort dates,
/// tags lists, tag additions and removals, and attachments lists.
private struct NoteHistory {
  struct Entry {
    var change: Change
    var stamp: Stamp
    var sequence: UInt64
  }

  static let note = NoteID(Identifier(high: 7, low: 7))
  static let names = ["alpha", "beta", "gamma", "delta"]
  static let attachments = (1...3).map { AttachmentID(Identifier(high: 8, low: UInt64($0))) }

  var entries: [Entry] = []

  /// A history; with `sharedMilliseconds`, every two changes share a wall-clock millisecond
  /// (on different devices), where only the stamps' replicas order them.
  init(_ steps: [Int], sharedMilliseconds: Bool = false) {
    let replicas = (1...3).map { ReplicaID(Identifier(high: 9, low: UInt64($0))) }
    for (index, step) in steps.enumerated() {
      let milliseconds = UInt64(1_000 + (sharedMilliseconds ? index / 2 : index))
      let stamp = Stamp(
        time: HybridTime(milliseconds: milliseconds, counter: 0),
        replica: replicas[(step + index) % replicas.count])
      let note = Self.note
      let pick = step / 8
      let change: Change =
        switch step % 8 {
        case 0: .noteCreated(note, creationDate: Date(milliseconds: Int64(pick)))
        case 1: .textSet(note, text: "text \(index)", replacing: nil)
        case 2: .archivedSet(note, archived: pick % 2 == 0)
        case 3: .sortDateSet(note, sortDate: Date(milliseconds: Int64(pick)))
        case 4:
          .tagsSet(
            note, tags: Self.names.enumerated().filter { pick >> $0.offset & 1 == 1 }.map(\.element)
          )
        case 5: .tagAdded(note, name: Self.names[pick % Self.names.count])
        case 6: .tagRemoved(note, tag: TagKey(name: Self.names[pick % Self.names.count]))
        default:
          .attachmentsSet(
            note,
            attachments: Self.attachments.enumerated().filter { pick >> $0.offset & 1 == 1 }
              .map(\.element))
        }
      entries.append(Entry(change: change, stamp: stamp, sequence: UInt64(index + 1)))
    }
  }

  /// Applies the entries in this order to an empty note.
  static func apply(_ entries: [Entry], merge: NoteMerge = NoteMerge()) -> (
    NoteRecord, [ReplacedChange]
  ) {
    var record = NoteRecord()
    var replaced: [ReplacedChange] = []
    for entry in entries {
      _ = merge.apply(
        entry.change, stamp: entry.stamp, sequence: entry.sequence, to: &record,
        replaced: &replaced, isHeld: { _ in true })
    }
    return (record, replaced)
  }

  /// The entries setting one field, the newest first.
  func newestFirst(_ field: NoteField) -> [Entry] {
    entries.filter { $0.change.field == field }.sorted { $0.stamp > $1.stamp }
  }

  /// The note's tags, read off the whole set: the newest list's, less the tags a newer
  /// addition or removal changed, then the tags newer additions put on, oldest first.
  var expectedTags: [String] {
    let list = newestFirst(.tags).first
    let listStamp = list?.stamp ?? .zero
    var newest: [TagKey: (stamp: Stamp, name: String?)] = [:]
    for entry in entries where entry.stamp > listStamp {
      let key: TagKey
      let name: String?
      switch entry.change {
      case .tagAdded(_, let added): (key, name) = (TagKey(name: added), added)
      case .tagRemoved(_, let removed): (key, name) = (removed, nil)
      default: continue
      }
      if newest[key].map({ $0.stamp < entry.stamp }) ?? true { newest[key] = (entry.stamp, name) }
    }
    guard case .tagsSet(_, let names)? = list?.change else {
      return newest.values.sorted { $0.stamp < $1.stamp }.compactMap(\.name)
    }
    return names.filter { newest[TagKey(name: $0)] == nil }
      + newest.values.sorted { $0.stamp < $1.stamp }.compactMap(\.name)
  }
}

@Suite("Note merge: one note's state from its changes, without storage")
struct NoteMergeTests {
  @Test(
    "any order of any history gives one state: each field its newest change's, tags one by one, every losing change replaced once"
  )
  func anyOrder() async {
    await propertyCheck(count: 300, input: Gen.int(in: 0...255).array(of: 1...40)) { steps in
      let history = NoteHistory(steps)
      var orders = [history.entries, history.entries.reversed()]
      var generator = Xoshiro(seed: (UInt64(steps.count), 5, 6, 7))
      for _ in 0..<3 { orders.append(history.entries.shuffled(using: &generator)) }
      let (first, _) = NoteHistory.apply(orders[0])
      for order in orders {
        let (record, replaced) = NoteHistory.apply(order)
        #expect(record == first)

        // Each field: its newest change's value.
        if case .archivedSet(_, let archived)? = history.newestFirst(.archived).first?.change {
          #expect(record.archived == archived)
        } else {
          #expect(record.archivedStamp == .zero)
        }
        if case .sortDateSet(_, let date)? = history.newestFirst(.sortDate).first?.change {
          #expect(record.sortDate == date.milliseconds)
        }
        if case .attachmentsSet(_, let list)? = history.newestFirst(.attachments).first?.change {
          #expect(record.attachments == list)
        }
        #expect(record.textStamp == history.newestFirst(.text).first?.stamp ?? .zero)
        #expect(record.tags == history.expectedTags)
        // The earliest creation.
        let creations = history.entries.filter { $0.change.kind == .noteCreated }
        #expect(record.isCreated == !creations.isEmpty)
        if case .noteCreated(_, let date)? = creations.min(by: { $0.stamp < $1.stamp })?.change {
          #expect(record.creationDate == date.milliseconds)
        }

        // Every change of a field but its newest is replaced, once.
        let losers = NoteField.allCases.flatMap { history.newestFirst($0).dropFirst() }
        let reported = replaced.map(\.sequence)
        #expect(reported.count == Set(reported).count)
        #expect(Set(reported) == Set(losers.map(\.sequence)))
      }
    }
  }

  @Test("a tag deletion voids what the note holds of the tag older than it, and nothing newer")
  func tagDeletion() {
    let replica = ReplicaID(Identifier(high: 9, low: 1))
    func stamp(_ milliseconds: UInt64) -> Stamp {
      Stamp(time: HybridTime(milliseconds: milliseconds, counter: 0), replica: replica)
    }
    let note = NoteHistory.note
    let merge = NoteMerge()
    var record = NoteRecord()
    var replaced: [ReplacedChange] = []
    for (change, milliseconds) in [
      (Change.tagsSet(note, tags: ["alpha", "beta"]), UInt64(10)),
      (.tagAdded(note, name: "gamma"), 20), (.tagAdded(note, name: "delta"), 40),
    ] {
      _ = merge.apply(
        change, stamp: stamp(milliseconds), sequence: milliseconds, to: &record,
        replaced: &replaced, isHeld: { _ in true })
    }
    let deletions = [
      TagKey(name: "alpha"): stamp(30), TagKey(name: "gamma"): stamp(30),
      TagKey(name: "delta"): stamp(30),
    ]
    #expect(merge.names(deletions, in: record))
    #expect(merge.voidTags(deletions, in: &record))
    #expect(record.tags == ["beta", "delta"])
    #expect(!merge.names(deletions, in: record))
    #expect(!merge.voidTags(deletions, in: &record))
  }

  @Test("a note shows its newest attachments list, then what was added after it, oldest first")
  func shownAttachments() {
    let replica = ReplicaID(Identifier(high: 9, low: 1))
    func stamp(_ milliseconds: UInt64) -> Stamp {
      Stamp(time: HybridTime(milliseconds: milliseconds, counter: 0), replica: replica)
    }
    let (a, b, c) = (
      NoteHistory.attachments[0], NoteHistory.attachments[1], NoteHistory.attachments[2]
    )
    var record = NoteRecord()
    record.attachments = [b]
    record.attachmentsStamp = stamp(20)
    let added = [(stamp: stamp(40), id: c), (stamp: stamp(10), id: a), (stamp: stamp(30), id: b)]
    #expect(NoteMerge().shownAttachments(of: record, added: added) == [b, c])
    record.attachmentsStamp = stamp(5)
    #expect(NoteMerge().shownAttachments(of: record, added: added) == [b, a, c])
  }

  @Test("the property catches a planted merge that compares wall time only")
  func catchesWallTimeOnly() {
    // Two changes of one field in the same millisecond on two devices: the stamps order them;
    // wall time alone lets the one applied last win, so two orders disagree.
    let history = NoteHistory([2, 26], sharedMilliseconds: true)
    let planted = NoteMerge(policy: WallTimeOnly())
    let (forwards, _) = NoteHistory.apply(history.entries, merge: planted)
    let (backwards, _) = NoteHistory.apply(history.entries.reversed(), merge: planted)
    #expect(forwards != backwards)
    let (standard, _) = NoteHistory.apply(history.entries)
    let (reversed, _) = NoteHistory.apply(history.entries.reversed())
    #expect(standard == reversed)
  }
}
