public import Foundation

/// One text a note has had: what a change wrote, who wrote it and when, and what became of it.
///
/// Read from the log, so every device that synced lists the versions its log holds — a phone's
/// edits on the laptop too — with the same states once they hold the same events and keep
/// history as long (retention is each store's setting: a device that keeps replaced texts for
/// 30 days lists an older one as erased where one that keeps them forever can restore it).
public struct NoteVersion: Sendable, Hashable, Identifiable {
  /// What became of a text.
  public enum State: String, Sendable, Hashable {
    /// The text the note shows.
    case shown
    /// A text written without seeing the one the note shows, kept until a change resolves it
    /// (``Note/conflicts``).
    case conflict
    /// A text a later change replaced: kept in the log, and restorable.
    case replaced
    /// A text another replaced longer ago than this store's retention period: its words are
    /// gone from this store (and from every store and server whose period has passed too), only
    /// the change's stamp is left.
    case erased
  }

  /// The stamp of the change that wrote it: what ``Edits/restoreVersion(_:of:)`` names.
  public let stamp: Stamp
  /// The text; nil for an ``State/erased`` one.
  public let text: String?
  /// What became of it.
  public let state: State
  /// The texts its change replaced, by stamp: the one its device showed, and the conflicts it
  /// resolved. Empty for a note's first text, and for a change whose values were erased.
  public let replaced: [Stamp]

  /// The version's id: its stamp.
  public var id: Stamp { stamp }
  /// The device that wrote it.
  public var device: ReplicaID { stamp.replica }
  /// When it was written, by the writing device's clock (to the millisecond).
  public var date: Date { Date(milliseconds: Int64(clamping: stamp.time.milliseconds)) }
}

extension NoteStore {
  /// Every text a note has had, oldest first (in stamp order, the order of the merge): the one
  /// it shows, its conflicts, those later changes replaced, and — without their words — those
  /// the retention period erased.
  ///
  /// A deleted note has no versions: deleting erased every one of them, here and on every
  /// replica. For an app's history view, observe the list:
  ///
  /// ```swift
  /// for try await versions in store.observe({ try $0.versions(of: id) }) {
  ///   show(versions.reversed())  // newest first, again after each edit or sync that adds one
  /// }
  /// ```
  ///
  /// Reads the note's events through the log's object index: its cost grows with the note's
  /// changes and their texts (every version's text is read), not with the log.
  ///
  /// - Throws: ``VLogError`` `noteNotFound` for a note the store does not hold, `noteDeleted`
  ///   for a deleted one.
  public func versions(of id: NoteID) throws -> [NoteVersion] {
    try read { transaction in
      if try schema.hasTombstone(id.identifier, in: transaction) {
        throw VLogError(.noteDeleted, "note \(id) was deleted; deleting it erased its versions")
      }
      guard let record = try noteRecord(id, in: transaction), record.isCreated else {
        throw VLogError(.noteNotFound, "there is no note \(id)")
      }
      let conflicts = Set(record.texts.conflicts(showing: record.textStamp).map(\.stamp))
      var versions: [NoteVersion] = []
      for sequence in try eventLog.sequences(of: id.identifier, in: transaction) {
        guard let logged = try eventLog.event(at: sequence, in: transaction),
          logged.event.change.kind == .textSet
        else { continue }
        let event = logged.event
        guard !event.isRedacted, case .textSet(_, let text, let replacing) = event.change else {
          versions.append(
            NoteVersion(stamp: event.stamp, text: nil, state: .erased, replaced: []))
          continue
        }
        let state: NoteVersion.State =
          event.stamp == record.textStamp
          ? .shown : conflicts.contains(event.stamp) ? .conflict : .replaced
        versions.append(
          NoteVersion(
            stamp: event.stamp, text: text, state: state, replaced: Array(replacing ?? [])))
      }
      return versions.sorted { $0.stamp < $1.stamp }
    }
  }
}
