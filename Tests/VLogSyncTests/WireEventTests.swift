import Foundation
import Testing
import VLog
import VLogSync

/// Events of every kind with fixed stamps and ids, matched against golden JSON committed in
/// `Fixtures/events.jsonl`, one per line in this order.
enum GoldenEvents {
  static let replica = ReplicaID("d7a73666-0946-1e71-5ffe-d556129c8a84")!
  static let note = NoteID("24bd364a-c001-66ab-8fd2-03bee860ff22")!
  static let attachment = AttachmentID("1b4e28ba-2fa1-11d2-883f-0016d3cca427")!

  static func stamp(_ counter: UInt16) -> Stamp {
    Stamp(time: HybridTime(milliseconds: 1_795_412_027_507, counter: counter), replica: replica)
  }

  static let events: [Event] = [
    Event(
      stamp: stamp(0),
      change: .noteCreated(note, creationDate: Date(milliseconds: 1_795_412_027_507))),
    Event(stamp: stamp(1), change: .textSet(note, text: "Buy bread\nand \"milk\" / ünïcode 👋")),
    Event(stamp: stamp(2), change: .archivedSet(note, archived: true)),
    Event(
      stamp: stamp(3), change: .sortDateSet(note, sortDate: Date(milliseconds: 1_700_000_000_000))),
    Event(stamp: stamp(4), change: .tagsSet(note, tags: ["Errands", "home"])),
    Event(stamp: stamp(5), change: .attachmentsSet(note, attachments: [attachment])),
    Event(
      stamp: stamp(6),
      change: .attachmentAdded(
        Attachment(
          id: attachment, noteID: note, mimeType: "image/jpeg", width: 4032, height: 3024,
          blobHash: BlobHash(
            hex: "039058c6f2c0cb492c533b0a4d14ef77cc0f78abccced5287d84a1a2011cfb81")!,
          byteCount: 2_500_000))),
    Event(stamp: stamp(7), change: .attachmentDeleted(attachment)),
    Event(stamp: stamp(8), change: .tagRenamed(name: "Home")),
    Event(stamp: stamp(9), change: .noteDeleted(note)),
    Event(
      stamp: stamp(10), change: .unknown(kind: EventKind(rawValue: 77)),
      unknownFields: [0xA2, 0x06, 0x03, 0x01, 0x02, 0x03]),
  ]

  static func fixture() throws -> [String] {
    let url = try #require(
      Bundle.module.url(forResource: "events", withExtension: "jsonl", subdirectory: "Fixtures"))
    return try String(contentsOf: url, encoding: .utf8).split(separator: "\n").map(String.init)
  }

  static func encode(_ event: Event) throws -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    return String(decoding: try encoder.encode(WireEvent(event)), as: UTF8.self)
  }
}

@Suite("Wire events")
struct WireEventTests {
  @Test("every kind encodes to its golden JSON and decodes back to the same event")
  func golden() throws {
    let lines = try GoldenEvents.fixture()
    #expect(lines.count == GoldenEvents.events.count)
    for (event, line) in zip(GoldenEvents.events, lines) {
      #expect(try GoldenEvents.encode(event) == line)
      let decoded = try JSONDecoder().decode(WireEvent.self, from: Data(line.utf8))
      #expect(try decoded.event() == event)
    }
  }

  @Test(
    "null in an optional field reads as absent; null in a required field is refused, naming it"
  )
  func nulls() throws {
    let head =
      #""time":"2026-11-22T05:33:47.507Z","counter":0,"replica":"d7a73666-0946-1e71-5ffe-d556129c8a84","kind":"noteDeleted","note":"24bd364a-c001-66ab-8fd2-03bee860ff22""#
    let event = try JSONDecoder().decode(WireEvent.self, from: Data("{\(head)}".utf8)).event()
    #expect(event.change == .noteDeleted(GoldenEvents.note))
    // `text` is no field of a deletion, `extra` and `redacted` optional: null is absence.
    let nulls = #"{\#(head),"text":null,"extra":null,"redacted":null}"#
    #expect(try WireJSON.decode(WireEvent.self, from: Array(nulls.utf8)).event() == event)
    for (json, message) in [
      (
        head.replacingOccurrences(of: #""d7a73666-0946-1e71-5ffe-d556129c8a84""#, with: "null"),
        "replica: expected a string, found null"
      ),
      (
        head.replacingOccurrences(of: #""24bd364a-c001-66ab-8fd2-03bee860ff22""#, with: "null"),
        "note: required for noteDeleted"
      ),
    ] {
      do {
        _ = try WireJSON.decode(WireEvent.self, from: Array("{\(json)}".utf8)).event()
        Issue.record("a null required field was accepted: \(json)")
      } catch {
        #expect(error.description == message)
      }
    }
  }

  @Test(
    "bad fields are refused with their path",
    arguments: [
      (
        #""kind":"textSet","note":"24bd364a-c001-66ab-8fd2-03bee860ff22""#,
        "text: required for textSet"
      ),
      (
        #""kind":"teleported","note":"24bd364a-c001-66ab-8fd2-03bee860ff22""#,
        "kind: 'teleported' is not a kind of event"
      ),
      (#""kind":"unknown""#, "kindNumber: required for an unknown kind"),
      (#""kind":"unknown","kindNumber":2"#, "extra: missing textSet: id (field 4)"),
      (#""kind":"unknown","kindNumber":0"#, "kindNumber: 0 is not a kind"),
      (
        #""kind":"attachmentsSet","note":"24bd364a-c001-66ab-8fd2-03bee860ff22","attachments":["x"]"#,
        "attachments[0]: 'x' is not a UUID"
      ),
      (
        #""kind":"attachmentAdded","note":"24bd364a-c001-66ab-8fd2-03bee860ff22","attachment":{"id":"1b4e28ba-2fa1-11d2-883f-0016d3cca427","sha256":"039058c6f2c0cb492c533b0a4d14ef77cc0f78abccced5287d84a1a2011cfb81","byteCount":3}"#,
        "attachment.mimeType: required"
      ),
      (
        #""kind":"noteDeleted","note":"24bd364a-c001-66ab-8fd2-03bee860ff22","extra":"%%%""#,
        "extra: not base64"
      ),
      (
        #""kind":"noteDeleted","note":"24bd364a-c001-66ab-8fd2-03bee860ff22","extra":"AAE=""#,
        "extra: invalid field number 0"
      ),
      (
        #""kind":"textSet","note":"24bd364a-c001-66ab-8fd2-03bee860ff22","text":"a","replaces":["zz"]"#,
        "replaces[0]: 'zz' is not an event id"
      ),
    ])
  func refused(fields: String, expected: String) throws {
    let json =
      #"{"time":"2026-11-22T05:33:47.507Z","counter":0,"replica":"d7a73666-0946-1e71-5ffe-d556129c8a84","#
      + fields + "}"
    let wire = try JSONDecoder().decode(WireEvent.self, from: Data(json.utf8))
    let error = #expect(throws: WireError.self) { try wire.event() }
    #expect(error?.description.hasPrefix(expected) == true, "got: \(error?.description ?? "")")
  }

  @Test(
    "JSON type errors name their path",
    arguments: [
      (#"{"time":"x","counter":"0","replica":"r","kind":"k"}"#, "counter: expected an integer"),
      (#"{"counter":0,"replica":"r","kind":"k"}"#, "time: required"),
      (
        #"{"time":"x","counter":0,"replica":"r","kind":"k","attachment":{"id":"a","width":"wide"}}"#,
        "attachment.width: expected an integer"
      ),
      (
        #"{"time":"x","counter":0,"replica":"r","kind":"k","attachment":{"id":"a","colour":1}}"#,
        "attachment.colour: not a field of this object"
      ),
      (
        #"{"time":"x","counter":0,"replica":"r","kind":"k","tags":["a",3]}"#,
        "tags[1]: expected a string"
      ),
    ])
  func typeErrors(json: String, expected: String) {
    do {
      _ = try JSONDecoder().decode(WireEvent.self, from: Data(json.utf8))
      Issue.record("decoded \(json)")
    } catch let error as DecodingError {
      #expect(WireError(error).description == expected)
    } catch {
      Issue.record("unexpected \(error)")
    }
  }
}
