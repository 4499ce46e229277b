import Foundation
import ServerTestSupport
import Testing
import VLogServerTesting
import VLogSync
import VLogTesting

@testable import VLog
@testable import VLogServer

/// Whether a data file holds `text` anywhere in its bytes.
private func file(_ path: String, contains text: String) throws -> Bool {
  let data = try Data(contentsOf: URL(fileURLWithPath: path))
  return data.range(of: Data(text.utf8)) != nil
}

@Suite("Erasure through the server")
struct ErasureSyncTests {
  static let credentials = Credentials(username: "ann", password: "correct horse battery")
  static let canary = "canary-5d1e08-private"

  @Test(
    "a deleted note's canary is in no file after sync and compaction: not the devices', not the server's, not a new device's",
    arguments: Backend.allCases)
  func canaryIsGone(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      let serverDirectory = root + "/server"
      let server = try await openServer(backend: backend, directory: serverDirectory)
      let canary = Data(Self.canary.utf8)
      let storePaths = try await withLiveServer(server) { baseURL in
        do {
          let devices = try openDevices(
            3, root: root, transport: { _ in HTTPTransport(baseURL: baseURL) },
            credentials: Self.credentials, seed: 3, encoding: { $0 == 1 ? .json : .binary })
          defer { for device in devices { device.store.close() } }
          let (writer, reader, newcomer) = (devices[0], devices[1], devices[2])
          try await writer.account.createAccount()
          let doomed = try await writer.store.write { changes in
            let id = changes.createNote(text: "text \(Self.canary)", tags: ["tag-\(Self.canary)"])
            changes.addAttachment(
              Array("bytes \(Self.canary)".utf8), mimeType: "text/plain", to: id)
            return id
          }
          let kept = try await writer.store.write { $0.createNote(text: "stays", tags: ["work"]) }
          _ = try await writer.account.sync()
          _ = try await reader.account.sync()
          #expect(try reader.store.note(doomed)?.text.contains(Self.canary) == true)
          // The server holds it now: the check below can see it.
          #expect(try await storedBytes(of: server).range(of: canary) != nil)

          try await writer.store.write { $0.deleteNote(doomed) }
          let pushed = try await writer.account.sync()
          #expect(pushed.inSync)
          let received = try await reader.account.sync()
          #expect(received.inSync)
          let fresh = try await newcomer.account.sync()
          #expect(fresh.inSync)

          let digests = try devices.map { try Digests($0.store) }
          #expect(digests.allSatisfy { $0 == digests[0] }, "\(digests)")
          for device in devices {
            #expect(try device.store.note(doomed) == nil)
            #expect(try device.store.note(kept) != nil)
            #expect(
              !(try device.store.events()).map(\.event).contains {
                $0.description.contains(Self.canary)
              })
            #expect(try device.store.verify().isEmpty)
          }
          // The server keeps the deleted attachment's bytes for the grace period (an undo on the
          // writer would send none), then a sweep removes them.
          let blob = try #require(BlobHash(bytes: sha256(Array("bytes \(Self.canary)".utf8))))
          #expect(try await server.store.blob(blob, account: 1) != nil)
          #expect(try await server.store.sweepReleasedBlobs(releasedBefore: .max) == 1)
          #expect(try await server.store.blob(blob, account: 1) == nil)
          // The server serves the redacted events, and dropped the blob with them.
          let served = try await server.store.sync(account: 1, pushing: [], after: 0, limit: 100)
          #expect(served.events.contains { $0.redaction == .deleted })
          #expect(!served.events.contains { $0.description.contains(Self.canary) })
          #expect(try await server.verify().faults.isEmpty)
          if backend == .postgres {
            // No row holds it (PostgreSQL's VACUUM reclaims the dead rows' pages).
            #expect(try await storedBytes(of: server).range(of: canary) == nil)
          }
          return devices.map(\.store.path)
        }
      }
      // Compaction needs everything closed: the server stopped, the stores closed.
      server.close()
      let serverDirectories = backend == .lmdb ? [serverDirectory] : []
      // Before compaction, the erased bytes still lie in free pages: compaction is what
      // removes them (this is what the check after it would miss without compaction).
      let leftovers = try (serverDirectories + storePaths).filter {
        try file($0 + "/data.mdb", contains: Self.canary)
      }
      #expect(!leftovers.isEmpty)
      if backend == .lmdb {
        _ = try SyncServer.compact(dataDirectory: serverDirectory)
        #expect(try !file(serverDirectory + "/data.mdb", contains: Self.canary))
      }
      for path in storePaths {
        _ = try NoteStore.compact(at: path)
        #expect(try !file(path + "/data.mdb", contains: Self.canary), "\(path)")
      }
    }
  }
}

@Suite("Retention on the server")
struct ServerRetentionTests {
  @Test(
    "a server with retention 0 serves replaced values redacted; a new device converges with the device that kept them",
    arguments: Backend.allCases)
  func serverRetention(backend: Backend) async throws {
    var configuration = SyncServer.Configuration.testing
    configuration.retention = .zero
    try await withServer(backend: backend, configuration: configuration) { server in
      try await withTemporaryDirectory { root in
        let transport = InProcessTransport(server: server)
        let devices = try openDevices(
          2, root: root, transport: { _ in transport }, credentials: ErasureSyncTests.credentials,
          seed: 8)
        defer { for device in devices { device.store.close() } }
        try await devices[0].account.createAccount()
        let id = try await devices[0].store.write { $0.createNote(text: "draft 0") }
        for draft in 1...20 {
          devices[0].clock.advance(by: 1)
          try await devices[0].store.write { $0.setText("draft \(draft)", of: id) }
        }
        let report = try await devices[0].account.sync()
        #expect(report.inSync)
        let served = try await server.store.sync(account: 1, pushing: [], after: 0, limit: 100)
        #expect(served.events.filter { $0.redaction == .superseded }.count == 20)
        #expect(!served.events.contains { $0.description.contains("draft 3") })
        let fresh = try await devices[1].account.sync()
        #expect(fresh.inSync)
        #expect(try Digests(devices[0].store) == Digests(devices[1].store))
        #expect(try devices[1].store.note(id)?.text == "draft 20")
        #expect(try await server.verify().faults.isEmpty)
      }
    }
  }
}

@Suite("Undo through the server")
struct UndoSyncTests {
  @Test(
    "undoing a synced delete brings the note back under a new id on every device; the server, which kept the bytes for the grace period, gets none again",
    arguments: Backend.allCases)
  func undoDeleteAcrossDevices(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      try await withTemporaryDirectory { root in
        let transport = InProcessTransport(server: server)
        let devices = try openDevices(
          2, root: root, transport: { _ in transport }, credentials: ErasureSyncTests.credentials,
          seed: 21)
        defer { for device in devices { device.store.close() } }
        let (phone, laptop) = (devices[0], devices[1])
        try await phone.account.createAccount()
        let bytes = Array("holiday photo".utf8)
        let (id, attachmentID) = try await phone.store.write { changes in
          let id = changes.createNote(text: "Holiday", tags: ["trips"])
          return (id, changes.addAttachment(bytes, mimeType: "image/png", to: id))
        }
        let hash = try #require(try phone.store.attachment(attachmentID)).blobHash
        _ = try await phone.account.sync()
        #expect(try await server.store.blob(hash, account: 1) == bytes)
        try await phone.store.write { $0.deleteNote(id) }
        _ = try await phone.account.sync()
        // The server keeps the bytes only the deleted note used for the grace period, and the
        // phone while its undo may need them: the undo's new attachment sends none.
        #expect(try await server.store.blob(hash, account: 1) == bytes)
        #expect(try phone.store.removeUnusedBlobs() == 0)
        #expect(try phone.store.undo())
        let report = try await phone.account.sync()
        #expect(report.blobsUploaded == 0)
        // Used again, they outlast the grace period.
        #expect(try await server.sweepReleasedBlobs() == 0)
        #expect(try await server.store.blob(hash, account: 1) == bytes)
        _ = try await laptop.account.sync()
        #expect(try Digests(phone.store) == Digests(laptop.store))
        let restored = try #require(try laptop.store.timeline(limit: 10).first)
        #expect(restored.id != id)
        let attachment = try #require(try laptop.store.note(restored.id)?.attachments.first)
        #expect(try await laptop.account.attachmentData(attachment.id) == bytes)
      }
    }
  }
}

@Suite("A deleted tag's name, through the server")
struct TagErasureSyncTests {
  static let credentials = Credentials(username: "ann", password: "correct horse battery")
  static let name = "SecretTag-Quokka"

  /// Whether a file holds the tag's name in any of the spellings the test used.
  static func holdsName(_ path: String) throws -> Bool {
    try [name, name.lowercased(), name.uppercased()].contains { try file(path, contains: $0) }
  }

  @Test(
    "a deleted tag's name is in no file after sync and compaction, while Paris and paris stay one tag",
    arguments: Backend.allCases)
  func nameIsGone(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      let serverDirectory = root + "/server"
      let server = try await openServer(backend: backend, directory: serverDirectory)
      let storePaths = try await withLiveServer(server) { baseURL in
        do {
          let devices = try openDevices(
            3, root: root, transport: { _ in HTTPTransport(baseURL: baseURL) },
            credentials: Self.credentials, seed: 5, encoding: { $0 == 1 ? .json : .binary })
          defer { for device in devices { device.store.close() } }
          let (writer, reader, newcomer) = (devices[0], devices[1], devices[2])
          try await writer.account.createAccount()
          let (a, b) = try await writer.store.write { changes in
            (
              changes.createNote(text: "a", tags: [Self.name, "work"]),
              changes.createNote(text: "b", tags: ["Paris"])
            )
          }
          try await writer.store.write { $0.renameTag(to: Self.name.uppercased()) }
          _ = try await writer.account.sync()
          _ = try await reader.account.sync()
          // The reader tags another note with it, and tags b "paris" (one tag with "Paris").
          let c = try await reader.store.write { $0.createNote(text: "c") }
          try await reader.store.write { changes in
            changes.setTags([Self.name.lowercased()], of: c)
            changes.setTags(["Paris", "paris"], of: b)
          }
          _ = try await reader.account.sync()
          _ = try await writer.account.sync()
          #expect(
            try await storedBytes(of: server).range(of: Data(Self.name.lowercased().utf8)) != nil)

          try await writer.store.write { $0.deleteTag(named: Self.name) }
          #expect(try await writer.account.sync().inSync)
          #expect(try await reader.account.sync().inSync)
          #expect(try await newcomer.account.sync().inSync)
          let digests = try devices.map { try Digests($0.store) }
          #expect(digests.allSatisfy { $0 == digests[0] }, "\(digests)")
          for device in devices {
            let store = device.store
            #expect(try store.note(a)?.tags.map(\.name) == ["work"])
            #expect(try store.note(c)?.tags.isEmpty == true)
            #expect(try store.tags().map(\.tag.id.rawValue).sorted() == ["paris", "work"])
            #expect(try store.notes(taggedWith: "PARIS").count == 1)
            #expect(
              !(try store.events()).map(\.event).contains {
                $0.description.lowercased().contains(Self.name.lowercased())
              })
            #expect(try store.verify().isEmpty)
          }
          let served = try await server.store.sync(account: 1, pushing: [], after: 0, limit: 100)
          #expect(
            !served.events.contains {
              $0.description.lowercased().contains(Self.name.lowercased())
            })
          #expect(try await server.verify().faults.isEmpty)
          if backend == .postgres {
            let bytes = try await storedBytes(of: server)
            #expect(bytes.range(of: Data(Self.name.lowercased().utf8)) == nil)
            #expect(bytes.range(of: Data(Self.name.uppercased().utf8)) == nil)
          }
          return devices.map(\.store.path)
        }
      }
      server.close()
      if backend == .lmdb {
        #expect(try Self.holdsName(serverDirectory + "/data.mdb"))
        _ = try SyncServer.compact(dataDirectory: serverDirectory)
        #expect(try !Self.holdsName(serverDirectory + "/data.mdb"))
      }
      for path in storePaths {
        _ = try NoteStore.compact(at: path)
        #expect(try !Self.holdsName(path + "/data.mdb"), "\(path)")
      }
    }
  }
}
