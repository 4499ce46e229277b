import PropertyBased
import Testing

@testable import VLog

/// Text changes made by devices that edit, sync with one another and (some) record no base,
/// built from integers so that PropertyBased can shrink a failing history.
private struct TextHistory {
  struct Change: Hashable {
    var stamp: Stamp
    var base: [Stamp]?
    var sequence: UInt64
  }

  var changes: [Change] = []

  /// Three devices: each step edits (naming what the device shows, or everything current it
  /// knows, or nothing for a device of an older version) or syncs two devices.
  init(_ steps: [Int]) {
    let replicas = (1...3).map { ReplicaID(Identifier(high: 9, low: UInt64($0))) }
    var known: [Set<Stamp>] = Array(repeating: [], count: replicas.count)
    var clock: UInt64 = 1_000
    for step in steps {
      let device = step % replicas.count
      let action = (step / replicas.count) % 6
      let other = (step / 18) % replicas.count
      if action == 5 {
        let union = known[device].union(known[other])
        known[device] = union
        known[other] = union
        continue
      }
      clock += 1
      let stamp = Stamp(
        time: HybridTime(milliseconds: clock, counter: 0), replica: replicas[device])
      let current = Self.current(of: changes.filter { known[device].contains($0.stamp) })
      let base: [Stamp]? =
        switch action {
        case 0, 1, 2: current.max().map { [$0] } ?? []  // edits what it shows
        case 3: current.sorted()  // resolves every conflict it knows
        default: nil  // an older version: no base
        }
      changes.append(Change(stamp: stamp, base: base, sequence: UInt64(changes.count + 1)))
      known[device].insert(stamp)
    }
  }

  /// Rule 1, read off the whole set: the texts no change names (among the older ones) and
  /// no newer change without a base replaces.
  static func current(of changes: [Change]) -> Set<Stamp> {
    var named = Set<Stamp>()
    var floor = Stamp.zero
    for change in changes {
      if let base = change.base {
        named.formUnion(base.filter { $0 < change.stamp })
      } else {
        floor = max(floor, change.stamp)
      }
    }
    return Set(changes.map(\.stamp).filter { !named.contains($0) && $0 >= floor })
  }

  /// The versions after applying `changes` in this order, with what each reported replaced.
  static func apply(_ changes: [Change], redacting: Set<Stamp> = []) -> (
    TextVersions, [ReplacedChange]
  ) {
    var versions = TextVersions()
    var held = Set<Stamp>()
    var replaced: [ReplacedChange] = []
    for change in changes {
      versions.apply(
        stamp: change.stamp, sequence: change.sequence, base: change.base.map(ReplacedTexts.init),
        isRedacted: redacting.contains(change.stamp), isHeld: { held.contains($0) },
        report: { replaced.append($0) })
      held.insert(change.stamp)
    }
    return (versions, replaced)
  }
}

extension TextVersions {
  /// Applies a change and returns what it reported replaced.
  fileprivate mutating func apply(
    stamp: Stamp, sequence: UInt64, base: [Stamp]?, isRedacted: Bool,
    isHeld: (Stamp) -> Bool
  ) -> [ReplacedChange] {
    var replaced: [ReplacedChange] = []
    apply(
      stamp: stamp, sequence: sequence, base: base.map(ReplacedTexts.init), isRedacted: isRedacted,
      isHeld: isHeld,
      report: { replaced.append($0) })
    return replaced
  }
}

@Suite("Text versions: which texts are current")
struct TextVersionsTests {
  private let one = ReplicaID(Identifier(high: 9, low: 1))
  private let two = ReplicaID(Identifier(high: 9, low: 2))

  private func stamp(_ milliseconds: UInt64, _ replica: ReplicaID) -> Stamp {
    Stamp(time: HybridTime(milliseconds: milliseconds, counter: 0), replica: replica)
  }

  @Test("edits made after syncing replace what they saw: no conflict")
  func sequentialEdits() {
    var versions = TextVersions()
    var previous: Stamp?
    var replaced = 0
    for step in 0..<10 {
      let now = stamp(UInt64(100 + step), step % 2 == 0 ? one : two)
      replaced +=
        versions.apply(
          stamp: now, sequence: UInt64(step + 1), base: previous.map { [$0] } ?? [],
          isRedacted: false, isHeld: { _ in true }
        ).count
      previous = now
    }
    #expect(versions.current.map(\.stamp) == [previous])
    #expect(versions.conflicts(showing: previous!).isEmpty)
    #expect(replaced == 9)
  }

  @Test("two edits of the same text, in either order: both current, the newer shown")
  func concurrentEdits() {
    let first = stamp(100, one)
    let fromOne = stamp(200, one)
    let fromTwo = stamp(201, two)
    for order in [[fromOne, fromTwo], [fromTwo, fromOne]] {
      var versions = TextVersions()
      var held: Set<Stamp> = [first]
      _ = versions.apply(stamp: first, sequence: 1, base: [], isRedacted: false) { _ in false }
      for (index, edit) in order.enumerated() {
        let replaced = versions.apply(
          stamp: edit, sequence: UInt64(index + 2), base: [first], isRedacted: false
        ) { held.contains($0) }
        held.insert(edit)
        #expect(replaced.count == (index == 0 ? 1 : 0))
      }
      #expect(versions.current.map(\.stamp) == [fromOne, fromTwo])
      #expect(versions.conflicts(showing: fromTwo).map(\.stamp) == [fromOne])
      // A change that names both resolves the conflict and reports both replaced.
      let resolution = stamp(300, one)
      let replaced = versions.apply(
        stamp: resolution, sequence: 4, base: [fromTwo, fromOne], isRedacted: false
      ) { held.contains($0) }
      #expect(replaced.map(\.sequence).sorted() == [2, 3])
      #expect(versions.current.map(\.stamp) == [resolution])
    }
  }

  @Test("an edit that arrives before the text it replaced: that text is never current")
  func editBeforeItsBase() {
    let first = stamp(100, one)
    let edit = stamp(200, two)
    var versions = TextVersions()
    #expect(
      versions.apply(stamp: edit, sequence: 1, base: [first], isRedacted: false) { _ in false }
        .isEmpty)
    #expect(versions.awaited[first] == 200)
    let replaced = versions.apply(stamp: first, sequence: 2, base: [], isRedacted: false) { _ in
      true
    }
    #expect(replaced == [ReplacedChange(milliseconds: 200, sequence: 2)])
    #expect(versions.current.map(\.stamp) == [edit])
    #expect(versions.awaited.isEmpty)
  }

  @Test("a change without a base replaces every older text; a base not older is ignored")
  func unrecordedBase() {
    var versions = TextVersions()
    let a = stamp(100, one)
    let b = stamp(101, two)
    let legacy = stamp(150, one)
    let late = stamp(120, two)
    _ = versions.apply(stamp: a, sequence: 1, base: [], isRedacted: false) { _ in false }
    _ = versions.apply(stamp: b, sequence: 2, base: [], isRedacted: false) { _ in false }
    #expect(versions.current.count == 2)
    let replaced = versions.apply(stamp: legacy, sequence: 3, base: nil, isRedacted: false) {
      _ in false
    }
    #expect(replaced.map(\.sequence) == [1, 2])
    #expect(versions.current.map(\.stamp) == [legacy])
    // An older text arriving later is replaced at once.
    #expect(
      versions.apply(stamp: late, sequence: 4, base: [], isRedacted: false) { _ in false }
        == [ReplacedChange(milliseconds: 150, sequence: 4)])
    // A crafted change naming a newer text (itself included) replaces nothing.
    let crafted = stamp(160, two)
    _ = versions.apply(
      stamp: crafted, sequence: 5, base: [stamp(170, one), crafted], isRedacted: false
    ) { _ in false }
    #expect(versions.current.map(\.stamp) == [legacy, crafted])
    #expect(versions.awaited.isEmpty)
  }

  @Test("any order of any history: the current texts are rule 1's, and none is reported replaced")
  func anyOrder() async {
    await propertyCheck(count: 300, input: Gen.int(in: 0...999).array(of: 1...30)) { steps in
      let history = TextHistory(steps)
      let expected = TextHistory.current(of: history.changes)
      let sequences = Dictionary(
        uniqueKeysWithValues: history.changes.map { ($0.stamp, $0.sequence) })
      var orders = [history.changes, history.changes.reversed()]
      var generator = Xoshiro(seed: (UInt64(steps.count), 2, 3, 4))
      for _ in 0..<3 { orders.append(history.changes.shuffled(using: &generator)) }
      for order in orders {
        let (versions, replaced) = TextHistory.apply(order)
        #expect(Set(versions.current.map(\.stamp)) == expected)
        #expect(versions.awaited.isEmpty, "every named text arrived")
        // Every text that is not current was reported replaced exactly once; no current one was.
        let reported = replaced.map(\.sequence)
        #expect(Set(reported).count == reported.count)
        #expect(
          Set(reported)
            == Set(
              history.changes.filter { !expected.contains($0.stamp) }.map {
                sequences[$0.stamp]!
              }))
      }
      // Texts that are not current may be redacted (as retention does) in any order: the
      // current ones do not change.
      let redacted = Set(history.changes.map(\.stamp).filter { !expected.contains($0) })
      for order in orders.prefix(3) {
        let (versions, _) = TextHistory.apply(order, redacting: redacted)
        #expect(Set(versions.current.map(\.stamp)) == expected)
      }
    }
  }

  @Test("the property catches a planted rule that lets the newest text replace every other")
  func catchesLastWriterOnly() {
    // Two devices edit the same text offline: rule 1 keeps both; a last-writer-only rule
    // (every change treated as recording no base) keeps one.
    let history = TextHistory([0, 1, 15, 16])
    let expected = TextHistory.current(of: history.changes)
    let planted = history.changes.map {
      TextHistory.Change(stamp: $0.stamp, base: nil, sequence: $0.sequence)
    }
    let (versions, _) = TextHistory.apply(planted)
    #expect(expected.count >= 2)
    #expect(Set(versions.current.map(\.stamp)) != expected)
  }
}
