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
  package struct Version: Sendable, Hashable {
    package var stamp: Stamp
    package var sequence: UInt64

    package init(stamp: Stamp, sequence: UInt64) {
      self.stamp = stamp
      self.sequence = sequence
    }
  }

  /// A text that stopped being current: the wall-clock time (ms) of the change that replaced
  /// it, and its sequence number in the log.
  package struct Replaced: Sendable, Hashable {
    package var milliseconds: UInt64
    package var sequence: UInt64
  }

  /// The current texts, oldest first.
  package private(set) var current: [Version] = []
  /// Texts named by applied changes that have not been applied themselves, with the earliest
  /// time (ms) a change named each.
  package private(set) var awaited: [Stamp: UInt64] = [:]
  /// The newest applied change that recorded no base: no older text is current.
  package private(set) var floor: Stamp = .zero

  /// No text.
  package init() {}

  /// Texts as a record keeps them.
  package init(current: [Version], awaited: [Stamp: UInt64], floor: Stamp) {
    self.current = current.sorted { $0.stamp < $1.stamp }
    self.awaited = awaited
    self.floor = floor
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
  /// - Returns: The texts this change replaced, and the change itself if it arrived replaced
  ///   (rule 4).
  package mutating func apply(
    stamp: Stamp, sequence: UInt64, base: [Stamp]?, isRedacted: Bool,
    isHeld: (Stamp) throws -> Bool
  ) rethrows -> [Replaced] {
    guard !current.contains(where: { $0.stamp == stamp }) else { return [] }
    var replaced: [Replaced] = []
    let time = stamp.time.milliseconds
    if let base {
      for named in base where named < stamp {
        if let index = current.firstIndex(where: { $0.stamp == named }) {
          replaced.append(Replaced(milliseconds: time, sequence: current[index].sequence))
          current.remove(at: index)
        } else if named >= floor, try !isHeld(named) {
          awaited[named] = min(awaited[named] ?? .max, time)
        }
      }
    } else if stamp > floor {
      floor = stamp
      for version in current where version.stamp < stamp {
        replaced.append(Replaced(milliseconds: time, sequence: version.sequence))
      }
      current.removeAll { $0.stamp < stamp }
      awaited = awaited.filter { $0.key >= stamp }
    }
    if let namedAt = awaited.removeValue(forKey: stamp) {
      if !isRedacted { replaced.append(Replaced(milliseconds: namedAt, sequence: sequence)) }
    } else if stamp < floor {
      if !isRedacted {
        replaced.append(Replaced(milliseconds: floor.time.milliseconds, sequence: sequence))
      }
    } else if !isRedacted {
      let index = current.firstIndex { $0.stamp > stamp } ?? current.endIndex
      current.insert(Version(stamp: stamp, sequence: sequence), at: index)
    }
    return replaced
  }

  /// The current texts but the one a note shows (its newest text), oldest first: the note's
  /// conflicts.
  package func conflicts(showing shown: Stamp) -> [Version] {
    current.filter { $0.stamp != shown }
  }
}
