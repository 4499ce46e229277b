/// Which of a note's texts are still *current*: the rule that keeps texts written on two
/// devices without seeing each other, as plain values — no storage, no I/O — for the projector
/// to keep in a note's record.
///
/// A text change names the texts it replaced: those its device showed when it was made (its
/// *base*; none for a note that had no text). A change that recorded no base (one made by a
/// version that did not record bases) replaces every older text, which is plain
/// last-writer-wins. A note shows its newest text, as for every field; its other current texts
/// are its conflicts, written without seeing the one it shows, until a change that names them
/// replaces them.
///
/// The rules, each a function of the set of changes applied, never of their order:
///
/// 1. A text is current when it is not redacted, no applied change names it in its base, and
///    no applied change that recorded no base is newer than it.
/// 2. A change names only texts older than itself: a base stamp that is not older than the
///    change it belongs to is ignored, so no set of changes can replace its own newest text.
/// 3. A redacted change is never current, but what it replaced stays replaced: a redacted text
///    change keeps its base.
/// 4. A text is reported as replaced once — when it stops being current, or when it arrives
///    already replaced — with the time of a change that replaced it: the retention queue gets
///    replaced texts and never a current one, so retention never erases a conflict.
///
/// Memory: the current texts (one, unless texts conflict), and the stamps named by changes
/// whose own text has not arrived yet (a replica that received an edit before the text it
/// replaced), which are dropped as those texts arrive.
package struct TextVersions: Sendable, Hashable {
  /// A text change held here: its stamp, and where the log keeps its text.
  package typealias Version = FieldChange

  /// The newest current text, and the older ones, oldest first: a note with one text keeps no
  /// array (none is allocated when its record is read or written).
  private var newest: Version?
  private var older: [Version] = []
  /// Texts named by applied changes that have not been applied themselves, with the earliest
  /// time (ms) a change named each.
  package private(set) var awaited: [Stamp: UInt64] = [:]
  /// The newest applied change that recorded no base: no older text is current.
  package private(set) var floor: Stamp = .zero

  /// No text.
  package init() {}

  /// Texts as a record keeps them.
  package init(current: [Version], awaited: [Stamp: UInt64], floor: Stamp) {
    let sorted = current.sorted { $0.stamp < $1.stamp }
    newest = sorted.last
    older = Array(sorted.dropLast())
    self.awaited = awaited
    self.floor = floor
  }

  /// Texts as a record keeps them: the one its note shows (the newest current text) apart.
  package init(shown: Version?, others: [Version], awaited: [Stamp: UInt64], floor: Stamp) {
    if let shown, others.allSatisfy({ $0.stamp < shown.stamp }) {
      newest = shown
      older = others.isEmpty ? [] : others.sorted { $0.stamp < $1.stamp }
    } else {
      let sorted = ((shown.map { [$0] } ?? []) + others).sorted { $0.stamp < $1.stamp }
      newest = sorted.last
      older = Array(sorted.dropLast())
    }
    self.awaited = awaited
    self.floor = floor
  }

  /// The current texts, oldest first.
  package var current: [Version] { newest.map { older + [$0] } ?? [] }

  private func isCurrent(_ stamp: Stamp) -> Bool {
    newest?.stamp == stamp || older.contains { $0.stamp == stamp }
  }

  /// Removes a current text.
  private mutating func remove(_ stamp: Stamp) -> Version? {
    if let index = older.firstIndex(where: { $0.stamp == stamp }) {
      return older.remove(at: index)
    }
    guard let newest, newest.stamp == stamp else { return nil }
    self.newest = older.popLast()
    return newest
  }

  private mutating func insert(_ version: Version) {
    guard let newest else {
      newest = version
      return
    }
    if newest.stamp < version.stamp {
      older.append(newest)
      self.newest = version
    } else {
      let index = older.firstIndex { $0.stamp > version.stamp } ?? older.endIndex
      older.insert(version, at: index)
    }
  }

  /// Removes every current text older than `stamp`, reporting each.
  private mutating func removeAll(olderThan stamp: Stamp, report: (Version) -> Void) {
    while let first = older.first ?? newest, first.stamp < stamp {
      _ = remove(first.stamp)
      report(first)
    }
  }

  /// Applies a text change.
  ///
  /// - Parameters:
  ///   - stamp: The change's stamp.
  ///   - sequence: Its sequence number in the log.
  ///   - base: The texts it replaced, by stamp; nil if it recorded none (it replaces every
  ///     older text).
  ///   - isRedacted: Whether its text was erased: it is then never current (rule 3).
  ///   - isHeld: Whether the log holds the change with this stamp: a named text that is not
  ///     current and not held is awaited.
  ///   - report: Called with each text this change replaced, and with the change itself if it
  ///     arrived replaced (rule 4).
  package mutating func apply(
    stamp: Stamp, sequence: UInt64, base: ReplacedTexts?, isRedacted: Bool,
    isHeld: (Stamp) throws -> Bool, report: (ReplacedChange) -> Void
  ) rethrows {
    guard !isCurrent(stamp) else { return }
    let time = stamp.time.milliseconds
    if let base {
      for named in base where ReplacedTexts.replaces(stamp, named) {
        if let version = remove(named) {
          report(ReplacedChange(milliseconds: time, sequence: version.sequence))
        } else if named >= floor, try !isHeld(named) {
          awaited[named] = min(awaited[named] ?? .max, time)
        }
      }
    } else if stamp > floor {
      floor = stamp
      removeAll(olderThan: stamp) {
        report(ReplacedChange(milliseconds: time, sequence: $0.sequence))
      }
      if !awaited.isEmpty { awaited = awaited.filter { $0.key >= stamp } }
    }
    if !awaited.isEmpty, let namedAt = awaited.removeValue(forKey: stamp) {
      if !isRedacted { report(ReplacedChange(milliseconds: namedAt, sequence: sequence)) }
    } else if stamp < floor {
      if !isRedacted {
        report(ReplacedChange(milliseconds: floor.time.milliseconds, sequence: sequence))
      }
    } else if !isRedacted {
      insert(Version(stamp: stamp, sequence: sequence))
    }
  }

  /// The current texts but the one a note shows (its newest text), oldest first: the note's
  /// conflicts.
  package func conflicts(showing shown: Stamp) -> [Version] {
    if older.isEmpty { return newest.map { $0.stamp == shown ? [] : [$0] } ?? [] }
    return current.filter { $0.stamp != shown }
  }

  /// Whether the note has current texts other than the one it shows.
  package func hasConflicts(showing shown: Stamp) -> Bool {
    !older.isEmpty || (newest.map { $0.stamp != shown } ?? false)
  }
}
