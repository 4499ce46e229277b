import ArgumentParser
import Foundation
import Testing
import VLogSync
import VLogTesting

@testable import VLog
@testable import VLogCLI

@Suite("vlog export and import")
struct TransferTests {
  @Test(
    "export, then import into an empty store: identical digests; importing twice changes nothing")
  func roundTrip() async throws {
    try withTemporaryDirectory { root in
      let source = try NoteStore.open(at: root + "/a", options: .init(durability: .noSync))
      defer { source.close() }
      let id = try source.write { changes in
        let id = changes.createNote(
          text: "Trip \"Paris\" / 2026\nline two", tags: ["Travel", "Paris"])
        changes.addAttachment([1, 2, 3], mimeType: "image/png", width: 3, height: 1, to: id)
        return id
      }
      try source.write { changes in
        changes.setArchived(true, of: id)
        changes.setSortDate(Date(timeIntervalSince1970: 1_000), of: id)
        changes.renameTag(to: "PARIS")
      }
      let doomed = try source.write { $0.createNote(text: "gone") }
      try source.write { $0.deleteNote(doomed) }
      try source.ingest([
        Event(
          stamp: Stamp(time: HybridTime(milliseconds: 5, counter: 0), replica: source.replicaID),
          change: .unknown(kind: EventKind(rawValue: 77)), unknownFields: [0xA2, 0x06, 0x01, 0x09])
      ])

      let file = root + "/events.jsonl"
      _ = try run(Export.self, ["--output", file], on: source)
      let lines = try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n")
      #expect(try lines.count == source.eventCount())

      let target = try NoteStore.open(at: root + "/b", options: .init(durability: .noSync))
      defer { target.close() }
      let first = try run(Import.self, [file], on: target)
      #expect(first.text.hasPrefix("read \(lines.count) events: \(lines.count) new"))
      #expect(try target.eventSetDigest() == source.eventSetDigest())
      #expect(try target.stateDigest() == source.stateDigest())
      #expect(try target.unknownEventCount() == 1)

      let digest = try target.stateDigest()
      let second = try run(Import.self, [file], on: target)
      #expect(
        second.text.hasPrefix("read \(lines.count) events: 0 new, \(lines.count) already here"))
      #expect(try target.stateDigest() == digest)
      #expect(try target.eventCount() == lines.count)
    }
  }

  @Test(
    "a malformed line fails with its line number and field path, and imports nothing",
    arguments: [
      (
        #"{"time":"2026-01-01T00:00:00.000Z","counter":0,"replica":"x","kind":"textSet"}"#,
        "events.jsonl:2: replica: 'x' is not a UUID"
      ),
      (
        #"{"time":"2026-01-01T00:00:00.000Z","counter":0,"replica":"1b4e28ba-2fa1-11d2-883f-0016d3cca427","kind":"textSet","note":"1b4e28ba-2fa1-11d2-883f-0016d3cca427","text":7}"#,
        "events.jsonl:2: text: expected a string"
      ),
      (
        #"{"time":"2026-01-01T00:00:00.000Z","counter":0,"replica":"1b4e28ba-2fa1-11d2-883f-0016d3cca427","kind":"attachmentAdded","note":"1b4e28ba-2fa1-11d2-883f-0016d3cca427","attachment":{"id":"1b4e28ba-2fa1-11d2-883f-0016d3cca427","mimeType":"image/png","sha256":"abc","byteCount":3}}"#,
        "events.jsonl:2: attachment.sha256: 'abc' is not 64 hexadecimal digits"
      ),
      (
        #"{"time":"2026-01-01T00:00:00.000Z","counter":0,"replica":"1b4e28ba-2fa1-11d2-883f-0016d3cca427","kind":"noteDeleted","note":"1b4e28ba-2fa1-11d2-883f-0016d3cca427","colour":"red"}"#,
        "events.jsonl:2: colour: not a field of this object"
      ),
      (
        #"{"time":"2026-01-01T00:00:00.000Z","counter":0,"replica":"1b4e28ba-2fa1-11d2-883f-0016d3cca427","kind":"textSet","note":null,"text":"x"}"#,
        "events.jsonl:2: note: required for textSet"
      ),
      (
        #"{"time":"2026-01-01T00:00:00.000Z","counter":0,"replica":"1b4e28ba-2fa1-11d2-883f-0016d3cca427","kind":"textSet","note":"1b4e28ba-2fa1-11d2-883f-0016d3cca427","text":"x","tags":["a"]}"#,
        "events.jsonl:2: tags: not a field of textSet"
      ),
      (
        #"{"time":"yesterday","counter":0,"replica":"1b4e28ba-2fa1-11d2-883f-0016d3cca427","kind":"noteDeleted","note":"1b4e28ba-2fa1-11d2-883f-0016d3cca427"}"#,
        "events.jsonl:2: time: 'yesterday' is not a time"
      ),
      (#"{"time": "2026"#, "events.jsonl:2: not valid JSON"),
    ])
  func malformedLine(line: String, expected: String) async throws {
    try withTemporaryDirectory { root in
      let source = try NoteStore.open(at: root + "/a", options: .init(durability: .noSync))
      defer { source.close() }
      try source.write { $0.createNote(text: "valid") }
      let good = try JSONEncoder().encode(WireEvent(try #require(try source.events().first).event))
      let file = root + "/events.jsonl"
      try (String(decoding: good, as: UTF8.self) + "\n" + line + "\n").write(
        toFile: file, atomically: true, encoding: .utf8)

      let target = try NoteStore.open(at: root + "/b", options: .init(durability: .noSync))
      defer { target.close() }
      let error = #expect(throws: CLIError.self) {
        try Import.parse([file, "--store", target.path]).execute(on: target)
      }
      #expect(
        error?.message.hasPrefix(root + "/" + expected) == true, "got: \(error?.message ?? "")")
      #expect(error?.message.hasSuffix("nothing was imported") == true)
      #expect(try target.eventCount() == 0)
    }
  }

  @Test(
    "an import larger than a batch is read a batch at a time, in one transaction, from the start again if the store's file grows: a bad last line imports nothing, a file without it everything"
  )
  func importInBatches() async throws {
    try withTemporaryDirectory { root in
      let source = try NoteStore.open(at: root + "/a", options: .init(durability: .noSync))
      defer { source.close() }
      let count = Import.batchSize * 2 + 500
      try source.write { edits in
        for index in 0..<count / 2 { edits.createNote(text: "note \(index)") }
      }
      let file = root + "/events.jsonl"
      _ = try Export.parse(["--output", file, "--store", source.path]).execute(on: source)
      let lines = try String(contentsOfFile: file, encoding: .utf8)
      let events = lines.split(separator: "\n").count
      #expect(events > Import.batchSize * 2)
      try (lines + "{}\n").write(toFile: root + "/bad.jsonl", atomically: true, encoding: .utf8)

      // A store whose file must grow during the import: the transaction starts over, and
      // reads the file from the start again.
      let target = try NoteStore.open(
        at: root + "/b", options: .init(durability: .noSync, mapSize: 1 << 20))
      defer { target.close() }
      let error = #expect(throws: CLIError.self) {
        try Import.parse([root + "/bad.jsonl", "--store", target.path]).execute(on: target)
      }
      #expect(
        error?.message.contains("bad.jsonl:\(events + 1):") == true, "\(String(describing: error))")
      #expect(try target.eventCount() == 0)
      _ = try Import.parse([file, "--store", target.path]).execute(on: target)
      #expect(try target.eventCount() == events)
      #expect(try target.stateDigest() == source.stateDigest())
      #expect(try target.verify().isEmpty)
    }
  }

  @Test("every kind of event survives the wire form unchanged", arguments: 0..<3)
  func wireRoundTrip(seed: Int) async throws {
    try await withTemporaryStore { store in
      try store.write { changes in
        let id = changes.createNote(
          text: "t\(seed)", isArchived: true, sortDate: Date(timeIntervalSince1970: 9), tags: ["A"])
        let attachment = changes.addAttachment(
          [UInt8(seed)], mimeType: "image/gif", width: 1, height: 2, to: id)
        changes.deleteAttachment(attachment)
        changes.renameTag(to: "a")
        changes.deleteNote(id)
      }
      for logged in try store.events() {
        let data = try JSONEncoder().encode(WireEvent(logged.event))
        #expect(try JSONDecoder().decode(WireEvent.self, from: data).event() == logged.event)
      }
    }
  }
}
