import Foundation
import LMDB
import ServerTestSupport
import Testing
import VLog
import VLogSync
import VLogTesting

@testable import VLogServer

/// What a copy of a server's data holds of one account — a backup, a stolen disk: its events
/// and its keys of notes and attachments. On LMDB it is read from a copy of the data file; on
/// PostgreSQL from the tables as a dump taken then would hold them.
struct ServerCopy {
  var events: [Event]
  var objectKeys: [Identifier: [UInt8]]
  var bytes: Data
  /// The attachment bytes the events name, as stored.
  var blobs: [BlobHash: [UInt8]]

  static func take(of server: SyncServer, account name: String, into directory: String)
    async throws -> ServerCopy
  {
    let account = try #require(try await server.store.account(named: name)).number
    let storage: any ServerStorage
    var copied: LMDBStorage?
    if server.store is PostgresStorage {
      storage = server.store
    } else {
      try FileManager.default.createDirectory(
        atPath: directory, withIntermediateDirectories: true)
      try FileManager.default.copyItem(
        atPath: server.location + "/data.mdb", toPath: directory + "/data.mdb")
      copied = try LMDBStorage.open(at: directory, durability: .durable)
      storage = copied!
    }
    defer { copied?.close() }
    let page = try await storage.sync(
      account: account, pushing: [], after: 0, limit: .max, maximumBytes: .max,
      retention: (nil, 0))
    let keys = try await storage.objectKeys(account: account, after: nil, limit: .max)
    var blobs: [BlobHash: [UInt8]] = [:]
    for event in page.events {
      guard case .attachmentAdded(let attachment) = event.change, !event.isRedacted else {
        continue
      }
      blobs[attachment.blobHash] = try await storage.blob(attachment.blobHash, account: account)
    }
    return ServerCopy(
      events: page.events, objectKeys: keys.keys, bytes: try await storedBytes(of: server),
      blobs: blobs)
  }

  /// Whether `needle` is in a text of `note`, or in the bytes of one of its attachments, that
  /// opens with what the devices and the server hold: the account's keys the devices keep (any
  /// epoch), the notes' and attachments' keys they keep, and the keys of the note and its
  /// attachments that this copy or `now` (the server's data as it is) holds wrapped.
  func reveals(
    _ needle: String, of note: NoteID, with accountKeys: [AccountKeys],
    objectKeys held: [ObjectKey],
    now: ServerCopy
  ) -> Bool {
    let ofNote = events.filter { $0.change.noteID == note && $0.sealedValues != nil }
    let objects =
      [note.identifier]
      + ofNote.compactMap { event -> Identifier? in
        guard case .attachmentAdded(let attachment) = event.change else { return nil }
        return attachment.id.identifier
      }
    var candidates = held
    for object in objects {
      for wrapped in [objectKeys[object], now.objectKeys[object]] {
        guard let wrapped else { continue }
        for keys in accountKeys {
          if let key = try? keys.unwrap(wrapped, of: object) { candidates.append(key) }
        }
      }
    }
    let needleBytes = Array(needle.utf8)
    for event in ofNote {
      for key in candidates {
        guard
          let opened = try? EventSealer(keys: accountKeys[0]).open(event, objectKey: { _ in key })
        else { continue }
        switch opened.change {
        case .textSet(_, let text, _) where text.contains(needle):
          return true
        case .attachmentAdded(let attachment):
          // The metadata opens: the bytes are sealed under the sealed addition's name.
          guard case .attachmentAdded(let sealed) = event.change,
            let stored = blobs[sealed.blobHash],
            let bytes = try? key.openBlob(stored, of: attachment)
          else { continue }
          if bytes.firstRange(of: needleBytes) != nil { return true }
        default:
          continue
        }
      }
    }
    return false
  }
}

@Suite("Crypto-shredding of an encrypted account's deleted notes")
struct CryptoShreddingTests {
  @Test(
    "A canary note with an attachment is synced to a second device, a copy of the server's data is taken, the note is deleted and the content key rotated: with everything both devices and the server keep, neither the copy's canary text nor its attachment's bytes open; without the rotation they do, and the test says so",
    arguments: Backend.allCases, [true, false])
  func deletedNoteDoesNotOpen(backend: Backend, rotates: Bool) async throws {
    let canaryText = "CanaryShredded under the old bridge"
    try await withTemporaryDirectory { root in
      let server = try await openServer(backend: backend, directory: root + "/server")
      defer { server.close() }
      try await withLiveServer(server) { baseURL in
        let unsigned = APICaller(transport: HTTPTransport(baseURL: baseURL))
        let (account, tokenA) = try await ObjectKeyTests.encryptedAccount(unsigned, "ann")
        // The account's writes, signed as its devices sign them.
        let caller = unsigned.signingWrites(with: account.keys.requestSigningKey)
        let ringA = AccountKeyring(
          keys: account.keys, caller: caller, token: { tokenA }, random: SystemRandom.bytes)
        let canary = NoteID(Identifier(high: 3, low: 1))
        let kept = NoteID(Identifier(high: 3, low: 2))
        let s = SealedEventTests.stamps(6)
        // The canary note has an attachment, whose bytes hold the canary too.
        let canaryBytes = Array("CanaryBytesShredded with the note".utf8)
        let attachment = Attachment(
          id: AttachmentID(Identifier(high: 3, low: 3)), noteID: canary, mimeType: "text/plain",
          width: 0, height: 0, blobHash: SealedBlob(naming: canaryBytes).hash,
          byteCount: canaryBytes.count)
        let clear = [
          Event(stamp: s[0], change: .noteCreated(canary, creationDate: Date())),
          Event(stamp: s[1], change: .textSet(canary, text: canaryText)),
          Event(stamp: s[2], change: .noteCreated(kept, creationDate: Date())),
          Event(stamp: s[3], change: .textSet(kept, text: "kept for later")),
          Event(stamp: s[4], change: .attachmentAdded(attachment)),
        ]
        for (_, sealed) in try await ringA.sealBlobs(of: clear, bytes: { _ in canaryBytes }) {
          let bytes = try await ringA.sealedBytes(of: attachment, bytes: { _ in canaryBytes })
          #expect(SealedBlob(naming: bytes) == sealed)
          _ = try await caller.putBlob(bytes, hash: sealed.hash, token: tokenA).get()
        }
        let written = try await ringA.seal(clear)
        let pushed = try await caller.sync(SyncPush(cursor: 0, events: written), token: tokenA)
          .get()

        // A second device signs in with the password and reads the canary.
        let tokenB = try await caller.signIn(account.credentials).get().token
        let password = try await caller.passwordKeys(
          username: "ann", password: "correct horse battery")
        let ringB = AccountKeyring(
          keys: try AccountKeys(
            opening: try await caller.accountKeys(token: tokenB).get(), with: password,
            username: "ann"),
          caller: caller, token: { tokenB }, random: SystemRandom.bytes)
        let pulled = try await caller.sync(SyncPush(cursor: 0, events: []), token: tokenB).get()
        let read = try await ringB.open(pulled.events)
        #expect(read.contains { $0.change == .textSet(canary, text: canaryText) })

        let copy = try await ServerCopy.take(
          of: server, account: "ann", into: root + "/copy")
        #expect(copy.objectKeys[canary.identifier] != nil)
        #expect(copy.objectKeys[attachment.id.identifier] != nil && copy.blobs.count == 1)
        #expect(copy.bytes.firstRange(of: Data("CanaryShredded".utf8)) == nil)
        #expect(copy.bytes.firstRange(of: Data("CanaryBytes".utf8)) == nil)
        // Before the deletion, what the devices hold opens the copy: the check can succeed.
        #expect(
          copy.reveals(
            "CanaryBytesShredded", of: canary, with: [account.keys], objectKeys: [], now: copy))

        // The first device deletes the canary; the second syncs the deletion.
        let deletion = try await ringA.seal(
          [Event(stamp: s[5], change: .noteDeleted(canary))])
        _ = try await caller.sync(
          SyncPush(cursor: pushed.cursor, events: deletion), token: tokenA
        ).get()
        if rotates { #expect(try await ringA.rotateIfDue(username: "ann")) }
        let later = try await caller.sync(
          SyncPush(cursor: pulled.cursor, events: []), token: tokenB
        ).get()
        _ = try await ringB.open(later.events)
        try await ringB.refresh()
        let (notesA, notesB) = (await ringA.heldObjects, await ringB.heldObjects)
        #expect(notesA == [kept.identifier] && notesB == [kept.identifier])
        let epochB = await ringB.keys.epoch
        #expect(epochB == (rotates ? 2 : 1))
        // The note's key is gone from the server, and so is its attachment's.
        let now = try await caller.lookUpObjectKeys(
          [canary.identifier, attachment.id.identifier], token: tokenA
        ).get()
        #expect(now.keys.isEmpty)

        // Everything the devices keep, and the keys the server keeps now (which open nothing
        // without the password), against the copy.
        let held = [await ringA.keys, await ringB.keys]
        let heldNoteKeys =
          Array(await ringA.heldKeys.values) + Array(await ringB.heldKeys.values)
        let nowCopy = try await ServerCopy.take(of: server, account: "ann", into: root + "/now")
        for needle in ["CanaryShredded", "CanaryBytesShredded"] {
          let revealed = copy.reveals(
            needle, of: canary, with: held, objectKeys: heldNoteKeys, now: nowCopy)
          #expect(revealed == !rotates, "\(needle): rotated: \(rotates), revealed: \(revealed)")
        }

        // The kept note still opens on a third device, after the rotation.
        let tokenC = try await caller.signIn(account.credentials).get().token
        let ringC = AccountKeyring(
          keys: try AccountKeys(
            opening: try await caller.accountKeys(token: tokenC).get(), with: password,
            username: "ann"),
          caller: caller, token: { tokenC }, random: SystemRandom.bytes)
        let all = try await caller.sync(SyncPush(cursor: 0, events: []), token: tokenC).get()
        let opened = try await ringC.open(all.events)
        #expect(opened.contains { $0.change == .textSet(kept, text: "kept for later") })
        #expect(
          !opened.contains {
            $0.change.noteID == canary && $0.redaction == nil && $0.change.kind != .noteDeleted
          })
      }
    }
  }
}
