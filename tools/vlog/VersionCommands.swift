import ArgumentParser
import Foundation
import VLog

/// `vlog note versions`: every text a note has had.
struct NoteVersions: StoreCommand {
  static let configuration = CommandConfiguration(
    commandName: "versions",
    abstract: "List every text a note has had, oldest first, with who wrote it and when.",
    discussion: """
      Each version is shown (the note's text), a conflict, replaced (restorable with vlog note \
      restore ID VERSION) or erased (this store's retention period passed: its words are gone \
      here). Every device that synced lists the versions of the same changes.
      """)
  @OptionGroup var options: StoreOptions
  @Argument(help: "The note's id (a UUID).") var id: NoteID

  func execute(on store: NoteStore) throws -> CommandOutput {
    let versions = try store.versions(of: id)
    let text = table(
      ["VERSION", "WRITTEN", "DEVICE", "STATE", "TEXT"],
      versions.map { version in
        [
          version.stamp.hex, format(version.date), String(version.device.description.prefix(8)),
          version.state.rawValue,
          version.text.map { String($0.split(whereSeparator: \.isNewline).first ?? "").prefix(40) }
            .map(String.init) ?? "—",
        ]
      })
    return CommandOutput(text: text, json: versions.map(VersionJSON.init))
  }
}

/// `vlog note restore`: a note's text from one of its versions.
struct RestoreVersion: StoreCommand {
  static let configuration = CommandConfiguration(
    commandName: "restore",
    abstract: "Give a note the text of one of its versions again.",
    discussion: """
      A restore is an edit like any other: it replaces the text the note shows, resolves its \
      conflicts and syncs to every device (an app can undo it). VERSION is an id vlog note \
      versions prints.
      """)
  @OptionGroup var options: StoreOptions
  @Argument(help: "The note's id (a UUID).") var id: NoteID
  @Argument(help: "The version's id (48 hexadecimal digits, from vlog note versions).")
  var version: String

  func validate() throws {
    guard Stamp(hex: version) != nil else {
      throw ValidationError("'\(version)' is not a version's id (48 hexadecimal digits)")
    }
  }

  func execute(on store: NoteStore) throws -> CommandOutput {
    guard let stamp = Stamp(hex: version) else { throw CLIError("not a version's id") }
    _ = try existingNote(id, in: store)
    return try changeNote(id, "restored", on: store) { $0.restoreVersion(stamp, of: $1) }
  }
}

/// The JSON of a note's version.
struct VersionJSON: Encodable {
  let version: String
  let written: String
  let device: String
  let state: String
  let text: String?
  let replaced: [String]

  init(_ version: NoteVersion) {
    self.version = version.stamp.hex
    written = ISO8601.format(milliseconds: Int64(clamping: version.stamp.time.milliseconds))
    device = version.device.description
    state = version.state.rawValue
    text = version.text
    replaced = version.replaced.map(\.hex)
  }
}
