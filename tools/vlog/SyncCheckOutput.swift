import Foundation
import VLog
import VLogSync

extension SyncCommand {
  /// Compares `store` with its server without syncing, signing in first if told: which events
  /// and notes differ, and whether the next sync repairs them.
  static func check(on store: NoteStore, account: SyncAccount, signIn: Bool) async throws
    -> (output: CommandOutput, inSync: Bool)
  {
    if signIn { try await account.signIn() }
    let check = try await account.checkSync()
    return (output(of: check, server: account.binding.server), check.inSync)
  }

  /// The text and JSON of a check.
  static func output(of check: SyncCheck, server: String) -> CommandOutput {
    struct Difference: Encodable {
      let id: String
      let side: String
      let kind: String?
      let note: String?
      let repair: String
      let repairedByNextSync: Bool
      let reason: String?
    }
    struct JSON: Encodable {
      let server: String
      let inSync: Bool
      let eventSetDigest: String
      let serverEventSetDigest: String
      let complete: Bool
      let nextSyncRepairs: Bool
      let notes: [String]
      let differences: [Difference]
      let quarantined: [QuarantinedEvent]
    }
    let differences = check.differences.map { difference in
      let (repair, reason) = describe(difference.repair)
      return Difference(
        id: difference.id.hex, side: difference.side.rawValue,
        kind: difference.kind?.description, note: difference.note?.description,
        repair: repair, repairedByNextSync: difference.repair.isNextSync, reason: reason)
    }
    let json = JSON(
      server: server, inSync: check.inSync, eventSetDigest: check.deviceDigest.description,
      serverEventSetDigest: check.serverDigest.description, complete: check.isComplete,
      nextSyncRepairs: check.nextSyncRepairs, notes: check.notes.map(\.description),
      differences: differences, quarantined: check.quarantined)
    // Events set aside are counted as held: the server holds them, this store refused them.
    let quarantine =
      check.quarantined.isEmpty
      ? []
      : [
        "quarantined: \(check.quarantined.count) events the server holds were set aside here: "
          + "no device of the account vouched for them ('vlog status' lists them)"
      ]
    guard !check.inSync else {
      return CommandOutput(
        text: (["in sync with \(server): both hold the same events (\(check.deviceDigest))"]
          + quarantine).joined(separator: "\n"),
        json: json)
    }
    let notes = check.notes.count
    var lines = [
      "not in sync with \(server): \(check.differences.count) events differ"
        + (notes > 0 ? ", about \(notes) note\(notes == 1 ? "" : "s")" : "")
        + (check.isComplete ? "" : " (the server listed only some: there may be more)")
    ]
    lines.append(
      table(
        ["EVENT", "KIND", "NOTE", "MISSING ON", "NEXT SYNC"],
        zip(check.differences, differences).map { difference, row in
          [
            row.id, row.kind ?? "?", row.note ?? "—",
            difference.side == .missingOnServer ? "server" : "this store",
            row.reason.map { "\(row.repair): \($0)" } ?? row.repair,
          ]
        }))
    lines.append(
      check.nextSyncRepairs
        ? "the next sync repairs every difference"
        : "the next sync does not repair every difference: see NEXT SYNC")
    lines += quarantine
    return CommandOutput(text: lines.joined(separator: "\n"), json: json)
  }

  /// What a sync does about a difference, in a word or two, and why where it does not.
  private static func describe(_ repair: SyncDifference.Repair) -> (String, String?) {
    switch repair {
    case .pushFromOutbox: ("pushes it (outbox)", nil)
    case .restampAndPush:
      (
        "restamps and pushes it",
        "stamped ahead of the server's clock (this device's clock was ahead): stamped again by "
          + "the server's"
      )
    case .push: ("pushes it (repair)", nil)
    case .pushLater:
      ("pushes it later", "stamped too far ahead of the server's clock to push yet")
    case .fetch: ("fetches it", nil)
    case .never(let reason): ("never", reason)
    }
  }
}
