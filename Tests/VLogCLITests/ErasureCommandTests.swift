import ArgumentParser
import Foundation
import Testing
import VLogTesting

@testable import VLog
@testable import VLogCLI

@Suite("vlog and erasure")
struct ErasureCommandTests {
  @Test("tags --delete, log and history name what was redacted; stats shows reclaimable bytes")
  func inspect() async throws {
    try await withTemporaryStore { store in
      let id = try store.write { $0.createNote(text: "secret text", tags: ["Hidden", "kept"]) }
      let other = try store.write { $0.createNote(text: "other", tags: ["hidden"]) }
      let tags = try run(Tags.self, ["--delete", "HIDDEN", "--json"], on: store)
      let rows =
        try JSONSerialization.jsonObject(with: Data(tags.jsonText().utf8)) as? [[String: Any]]
      #expect(rows?.map { $0["name"] as? String } == ["kept"])
      #expect(try store.note(other)?.tags.isEmpty == true)
      #expect(throws: VLogError.self) { try run(Tags.self, ["--delete", "nothing"], on: store) }

      try store.write { $0.deleteNote(id) }
      let log = try run(Log.self, ["--note", id.description], on: store)
      #expect(log.text.contains("(redacted: deleted)"))
      #expect(!log.text.contains("secret text"))
      let history = try run(History.self, [id.description, "--json"], on: store)
      let entries =
        try JSONSerialization.jsonObject(with: Data(history.jsonText().utf8)) as? [[String: Any]]
      // Its creation, text and tags list; not the deletion.
      #expect(entries?.filter { $0["redacted"] as? String == "deleted" }.count == 3)

      let stats = try run(Stats.self, ["--json"], on: store)
      let object =
        try JSONSerialization.jsonObject(with: Data(stats.jsonText().utf8)) as? [String: Any]
      #expect((object?["fileBytes"] as? Int ?? 0) > 0)
      #expect(object?["reclaimableBytes"] is Int)
      #expect(stats.text.contains("reclaimable by 'vlog compact'"))
    }
  }
}

extension BinaryTests {
  @Test("compact refuses a store another process has open, then compacts it once closed")
  func compact() async throws {
    try await withTemporaryDirectory { root in
      let path = root + "/store"
      let store = try NoteStore.open(at: path)
      let id = try await store.write {
        $0.createNote(text: String(repeating: "erase me ", count: 500))
      }
      try await store.write { $0.deleteNote(id) }
      let digest = try store.stateDigest()

      let (busyStatus, _, busy) = try await vlog(["compact", "--store", path])
      #expect(busyStatus == 1)
      #expect(busy.contains("a process has it open"))
      store.close()

      let (status, output, _) = try await vlog(["compact", "--store", path, "--json"])
      #expect(status == 0)
      let result = try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any]
      let after = try #require(result?["bytesAfter"] as? Int)
      let before = try #require(result?["bytesBefore"] as? Int)
      #expect(after < before)
      let reopened = try NoteStore.open(at: path)
      defer { reopened.close() }
      #expect(try reopened.stateDigest() == digest)

      let (missingStatus, _, missing) = try await vlog(["compact", "--data", root + "/nothing"])
      #expect(missingStatus == 1)
      #expect(missing.contains("no server data"))

      // --wait is for --database alone, and a number of seconds above 0.
      let (waitStatus, _, wait) = try await vlog(["compact", "--store", path, "--wait", "5"])
      #expect(waitStatus == 1)
      #expect(wait.contains("--wait applies only with --database"), "\(wait)")
      let (zeroStatus, _, zero) = try await vlog([
        "compact", "--database", "postgres://nobody@127.0.0.1:1/none", "--wait", "0",
      ])
      #expect(zeroStatus == 1)
      #expect(zero.contains("--wait: 0"), "\(zero)")
    }
  }
}
