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
    return ServerCopy(
      events: page.events, objectKeys: keys.keys, bytes: try await storedBytes(of: server))
  }

  /// Whether `needle` is in a text of `note` that opens with what the devices and the server
  /// hold: the account's keys the devices keep (any epoch), the notes' keys they keep, and the
  /// keys of notes `now` (the server's data as it is) holds wrapped.
  func reveals(
    _ needle: String, of note: NoteID, with accountKeys: [AccountKeys], noteKeys: [ObjectKey],
    now: ServerCopy
  ) -> Bool {
    var candidates = noteKeys
    for wrapped in [objectKeys[note.identifier], now.objectKeys[note.identifier]] {
      guard let wrapped else { continue }
      for keys in accountKeys {
        if let key = try? keys.unwrap(wrapped, of: note.identifier) { candidates.append(key) }
      }
    }
    for event in events where event.change.noteID == note && event.sealedValues != nil {
      for key in candidates {
        guard
          let opened = try? EventSealer(keys: accountKeys[0]).open(event, objectKey: { _ in key }),
          case .textSet(_, let text, _) = opened.change
        else { continue }
        if text.contains(needle) { return true }
      }
    }
    return false
  }
}

@Suite("Crypto-shredding of an encrypted account's deleted notes")
struct CryptoShreddingTests {
  @Test(
    "A canary note is synced to a second device, a copy of the server's data is taken, the note is deleted and the content key rotated: with everything both devices and the server keep, the copy's canary does not open; without the rotation it does, and the test says so",
    arguments: Backend.allCases, [true, false])
  func deletedNoteDoesNotOpen(backend: Backend, rotates: Bool) async throws {
    let canaryText = "CanaryShredded under the old bridge"
    try await withTemporaryDirectory { root in
      let server = try await openServer(backend: backend, directory: root + "/server")
      defer { server.close() }
      try await withLiveServer(server) { baseURL in
        let caller = APICaller(transport: HTTPTransport(baseURL: baseURL))
        let (account, tokenA) = try await ObjectKeyTests.encryptedAccount(caller, "ann")
        let ringA = AccountKeyring(
          keys: account.keys, caller: caller, token: { tokenA }, random: SystemRandom.bytes)
        let canary = NoteID(Identifier(high: 3, low: 1))
        let kept = NoteID(Identifier(high: 3, low: 2))
        let s = SealedEventTests.stamps(5)
        let written = try await ringA.seal(
          [
            Event(stamp: s[0], change: .noteCreated(canary, creationDate: Date())),
            Event(stamp: s[1], change: .textSet(canary, text: canaryText)),
            Event(stamp: s[2], change: .noteCreated(kept, creationDate: Date())),
            Event(stamp: s[3], change: .textSet(kept, text: "kept for later")),
          ])
        let pushed = try await caller.sync(SyncPush(cursor: 0, events: written), token: tokenA)
          .get()

        // A second device signs in with the password and reads the canary.
        let tokenB = try await caller.signIn(account.credentials).get().token
        let password = try PasswordKeys(
          username: "ann", password: "correct horse battery", cost: .testing)
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
        #expect(copy.bytes.firstRange(of: Data("CanaryShredded".utf8)) == nil)

        // The first device deletes the canary; the second syncs the deletion.
        let deletion = try await ringA.seal(
          [Event(stamp: s[4], change: .noteDeleted(canary))])
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
        let now = try await caller.lookUpObjectKeys([canary.identifier], token: tokenA).get()
        #expect(now.keys.isEmpty)

        // Everything the devices keep, and the keys the server keeps now (which open nothing
        // without the password), against the copy.
        let held = [await ringA.keys, await ringB.keys]
        let heldNoteKeys =
          Array(await ringA.heldKeys.values) + Array(await ringB.heldKeys.values)
        let revealed = copy.reveals(
          "CanaryShredded", of: canary, with: held, noteKeys: heldNoteKeys,
          now: try await ServerCopy.take(of: server, account: "ann", into: root + "/now"))
        #expect(revealed == !rotates, "rotated: \(rotates), revealed: \(revealed)")

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
