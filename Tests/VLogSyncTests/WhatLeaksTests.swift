import Foundation
import Testing
import VLog
import VLogWire

@testable import VLogSync

@Suite("What a server sees of an encrypted account")
struct WhatLeaksTests {
  static let note = EventSealingTests.note
  static let attachment = AttachmentID(Identifier(high: 0x33, low: 0x44))

  /// Each kind's change with the user's values `variant` 0 or 1: the ids stay, the rest differ.
  static func change(_ kind: String, _ variant: Int) -> Change {
    let one = variant == 1
    switch kind {
    case "noteCreated":
      return .noteCreated(note, creationDate: Date(milliseconds: one ? 1_000 : 9_000_000))
    case "textSet":
      return .textSet(
        note, text: one ? "short" : String(repeating: "a longer text ", count: 9),
        replacing: [EventSealingTests.stamp(0)])
    case "archivedSet": return .archivedSet(note, archived: one)
    case "sortDateSet": return .sortDateSet(note, sortDate: Date(milliseconds: one ? 5 : 7_000))
    case "tagsSet": return .tagsSet(note, tags: one ? ["Work"] : ["Home", "Paris"])
    case "tagAdded": return .tagAdded(note, name: one ? "Work" : "Home")
    case "tagRemoved": return .tagRemoved(note, tag: TagKey(name: one ? "Work" : "Home"))
    case "attachmentsSet":
      return .attachmentsSet(
        note,
        attachments: one ? [attachment] : [attachment, AttachmentID(Identifier(high: 1, low: 2))])
    case "tagRenamed": return .tagRenamed(name: one ? "Work" : "Home")
    case "tagErased": return .tagErased(TagKey(name: one ? "Work" : "Home"))
    case "attachmentDeleted": return .attachmentDeleted(attachment)
    case "noteDeleted": return .noteDeleted(note)
    default:
      return .attachmentAdded(
        Attachment(
          id: attachment, noteID: note, mimeType: one ? "image/png" : "application/pdf",
          width: one ? 640 : 0, height: one ? 480 : 0,
          blobHash: BlobHash(bytes: Array(repeating: one ? 7 : 9, count: 32))!,
          byteCount: one ? 1000 : 250_000))
    }
  }

  static let kinds = [
    "noteCreated", "textSet", "archivedSet", "sortDateSet", "tagsSet", "tagAdded", "tagRemoved",
    "attachmentsSet", "attachmentAdded", "attachmentDeleted", "tagRenamed", "tagErased",
    "noteDeleted",
  ]

  /// The wire form's fields, flattened to `path: value` (`attachment.mimeType`).
  static func fields(of event: Event) throws -> [String: String] {
    let object = try JSONSerialization.jsonObject(
      with: JSONEncoder().encode(WireEvent(event)), options: [.fragmentsAllowed])
    var flat: [String: String] = [:]
    func walk(_ value: Any, _ path: String) {
      if let dictionary = value as? [String: Any] {
        for (key, inner) in dictionary { walk(inner, path.isEmpty ? key : path + "." + key) }
      } else {
        flat[path] = "\(value)"
      }
    }
    walk(object, "")
    return flat
  }

  /// For each kind, what its sealed wire form shows of the user's values: each field whose
  /// value changes when they do (`extra`, the sealed values, by its size), derived from the
  /// wire format by sealing two versions of the same event.
  static func shown() throws -> [String: [String]] {
    let sealer = try EventSealingTests.sealer()
    var shown: [String: [String]] = [:]
    for kind in kinds {
      let versions = try [0, 1].map { variant in
        let event = Event(stamp: EventSealingTests.stamp(5), change: change(kind, variant))
        return try fields(
          of: sealer.seal(
            event, objectKey: { _ in try EventSealingTests.noteKey() },
            sealedBlob: {
              SealedBlob(
                hash: $0.blobHash,
                byteCount: Padding.padme($0.byteCount + 1) + SealedBlob.overhead)
            }))
      }
      var differing: [String] = []
      for path in Set(versions[0].keys).union(versions[1].keys).sorted() {
        let (a, b) = (versions[0][path], versions[1][path])
        if path == "extra" {
          let sizes = [a, b].map { Data(base64Encoded: $0 ?? "")?.count ?? 0 }
          if sizes[0] != sizes[1] { differing.append("size of the sealed values") }
        } else if a != b {
          differing.append(path)
        }
      }
      shown[kind] = differing
    }
    return shown
  }

  /// The table of `EndToEndEncryption.md`'s "What each event shows": kind, then what it shows.
  static func documented() throws -> [String: [String]] {
    let article = URL(fileURLWithPath: #filePath)
      .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
      .appendingPathComponent("Sources/VLogSync/VLogSync.docc/EndToEndEncryption.md")
    let text = try String(contentsOf: article, encoding: .utf8)
    let section = try #require(text.range(of: "### What each event shows"))
    var table: [String: [String]] = [:]
    for line in text[section.upperBound...].split(separator: "\n") {
      if line.hasPrefix("###") { break }
      guard line.hasPrefix("| `") else { continue }
      let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
      let kind = cells[0].trimmingCharacters(in: CharacterSet(charactersIn: "`"))
      table[kind] =
        cells[1] == "nothing"
        ? []
        : cells[1].components(separatedBy: "; ").map {
          $0.trimmingCharacters(in: CharacterSet(charactersIn: "`"))
        }
    }
    return table
  }

  @Test(
    "What each sealed event shows a server of the user's values, derived from the wire format by sealing two versions of it, is what EndToEndEncryption.md's table says"
  )
  func derivedList() throws {
    let shown = try Self.shown()
    let documented = try Self.documented()
    #expect(Set(documented.keys) == Set(Self.kinds))
    for kind in Self.kinds {
      #expect(documented[kind] == shown[kind], "\(kind): the wire shows \(shown[kind] ?? [])")
    }
  }

  /// The size of `change`'s sealed values.
  static func sealedSize(_ change: Change) throws -> Int {
    let sealed = try EventSealingTests.sealer().seal(
      Event(stamp: EventSealingTests.stamp(5), change: change),
      objectKey: { _ in try EventSealingTests.noteKey() })
    return try #require(sealed.sealedValues).count
  }

  @Test(
    "Padding hides what padding should: texts of nearby lengths seal to one size, as do a flag either way, dates of any magnitude and short lists; attachments of nearby sizes too"
  )
  func padding() throws {
    let note = Self.note
    for length in [10, 100, 1000, 10_000] {
      let sizes = try Set(
        (length..<(length + length / 20 + 2)).map {
          try Self.sealedSize(.textSet(note, text: String(repeating: "x", count: $0)))
        })
      // At most two sizes across 5 % of lengths: Padmé's buckets are about 6 % wide or less.
      #expect(sizes.count <= 2, "\(length): \(sizes.sorted())")
      // At most 13 % more than the text and its note's id, or the smallest size.
      #expect(
        sizes.allSatisfy {
          Double($0 - SealedBlob.overhead)
            <= max(Double(Padding.minimumValueBytes), Double(length + 24) * 1.13)
        })
    }
    #expect(
      try Self.sealedSize(.textSet(note, text: String(repeating: "x", count: 100)))
        == Self.sealedSize(.textSet(note, text: String(repeating: "y", count: 103))))
    #expect(
      try Self.sealedSize(.archivedSet(note, archived: true))
        == Self.sealedSize(.archivedSet(note, archived: false)))
    let dates = try Set(
      [0, 5, 7_000, 1_767_225_600_123, 253_402_300_799_000].map {
        try Self.sealedSize(.sortDateSet(note, sortDate: Date(milliseconds: $0)))
      })
    #expect(dates.count == 1)
    #expect(
      try Self.sealedSize(.tagsSet(note, tags: ["Work"]))
        == Self.sealedSize(.tagsSet(note, tags: ["Home", "Paris"])))
    let key = try EventSealingTests.noteKey()
    let sizes = try Set(
      [1000, 1010, 1020].map { count in
        let bytes = [UInt8](repeating: 1, count: count)
        let attachment = Attachment(
          id: Self.attachment, noteID: note, mimeType: "image/png", width: 1, height: 1,
          blobHash: SealedBlob(naming: bytes).hash, byteCount: count)
        let sealed = try key.sealBlob(bytes, of: attachment)
        #expect(try key.openBlob(sealed, of: attachment) == bytes)
        return sealed.count
      })
    #expect(sizes == [1024 + SealedBlob.overhead])
  }
}
