/// The steps that bring data of an older format to the current one, each registered once with a
/// name, as GRDB's `DatabaseMigrator` registers them: the store, the LMDB server and the
/// PostgreSQL server each list theirs, and opening runs, in one transaction, the steps for the
/// format it finds, in the order they were registered.
///
/// A step says which formats it runs for, not only the format it brings the data to: a later
/// step may do an earlier one's work again in the current form (rebuilding an index from the
/// log), and then runs for the formats the earlier one left behind only.
package struct Migrations<Step> {
  /// One registered step.
  package struct Migration {
    /// What the step does, for logs and tests.
    package let name: String
    /// The stored formats it runs for.
    package let formats: Range<UInt32>
    /// What runs it.
    package let step: Step
  }

  /// The format the steps bring data to.
  package let current: UInt32
  /// Every step, in the order it runs.
  package private(set) var all: [Migration] = []

  package init(current: UInt32) { self.current = current }

  /// Registers a step, after those registered before it.
  ///
  /// - Parameters:
  ///   - name: What the step does.
  ///   - formats: The stored formats it runs for: `..<current` for one every older format
  ///     needs; below a later step's lower bound when that step does its work too.
  package mutating func register(_ name: String, formats: Range<UInt32>, _ step: Step) {
    // Steps are registered by code with constant formats, never from stored bytes: a step past
    // the current format is a programming error.
    precondition(formats.upperBound <= current, "a migration for a format past the current one")
    all.append(Migration(name: name, formats: formats, step: step))
  }

  /// Registers a step that every format below `current` needs.
  package mutating func register(_ name: String, below format: UInt32, _ step: Step) {
    register(name, formats: 0..<format, step)
  }

  /// The steps data of `format` runs, in order: none for the current format.
  ///
  /// - Returns: nil for a format newer than ``current``, which this version cannot read.
  package func pending(from format: UInt32) -> [Migration]? {
    guard format <= current else { return nil }
    return all.filter { $0.formats.contains(format) }
  }
}
