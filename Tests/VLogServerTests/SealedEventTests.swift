import Foundation
import ServerTestSupport
import Testing
import VLog
import VLogSync
import VLogTesting

@testable import VLogServer

@Suite("Sealed events on the server")
struct SealedEventTests {
  /// Stamps a moment ago, one replica's.
  static func stamps(_ count: Int) -> [Stamp] {
    let now = UInt64(Date().timeIntervalSince1970 * 1000) - 60_000
    return (0..<count).map {
      Stamp(
        time: HybridTime(milliseconds: now + UInt64($0), counter: 0),
        replica: ReplicaID(Identifier(high: 5, low: 5)))
    }
  }

  @Test(
    "An encrypted account: its keys open on a new device with the password or the recovery key; a live server stores, pages, strips and erases its sealed events with its own log, holds none of their values nor any secret, and the account's device opens what it serves",
    arguments: Backend.allCases)
  func throughServer(backend: Backend) async throws {
    let account = try NewEncryptedAccount(
      username: "ann", password: "correct horse battery", cost: .testing,
      random: SystemRandom.bytes)
    let secrets = [
      "correct horse battery", account.credentials.password, account.recoveryKey.description,
      account.serverKeys.recoverySecret,
    ]
    let kept = NoteID(Identifier(high: 1, low: 1))
    let deleted = NoteID(Identifier(high: 1, low: 2))
    let noteKeys = [
      kept: try ObjectKey(random: SystemRandom.bytes),
      deleted: try ObjectKey(random: SystemRandom.bytes),
    ]
    let noteKey: @Sendable (Identifier) throws -> ObjectKey = { object in
      guard let key = noteKeys[NoteID(object)] else { throw CancellationError() }
      return key
    }
    let s = Self.stamps(9)
    let first: [Event] = [
      Event(
        stamp: s[0], change: .noteCreated(kept, creationDate: Date(milliseconds: 1_767_225_600_000))
      ),
      Event(stamp: s[1], change: .textSet(kept, text: "CanaryTextKept at the mill")),
      Event(stamp: s[2], change: .tagsSet(kept, tags: ["CanaryTagKept", "CanaryTagErased"])),
      Event(stamp: s[3], change: .tagRenamed(name: "CanaryTagKept")),
      Event(
        stamp: s[4],
        change: .noteCreated(deleted, creationDate: Date(milliseconds: 1_767_225_600_000))),
      Event(stamp: s[5], change: .textSet(deleted, text: "CanaryTextDeleted by the river")),
    ]
    let second: [Event] = [
      Event(stamp: s[6], change: .noteDeleted(deleted)),
      Event(stamp: s[7], change: .tagErased(TagKey(name: "CanaryTagErased"))),
    ]
    let canaries = ["CanaryText", "CanaryTag", "canarytag", "mill", "river"]

    try await withTemporaryDirectory { root in
      let server: SyncServer
      switch backend {
      case .lmdb:
        server = try SyncServer.open(
          dataDirectory: root + "/server", configuration: .testing, logger: quietLogger)
      case .postgres:
        server = try await SyncServer.open(
          database: try await TestCluster.shared.newDatabase(), configuration: .testing,
          logger: quietLogger)
      }
      defer { server.close() }
      try await withLiveServer(server) { baseURL in
        let caller = APICaller(transport: HTTPTransport(baseURL: baseURL))
          .signingWrites(with: account.keys.requestSigningKey)
        _ = try await caller.createAccount(account.credentials, keys: account.serverKeys).get()
        let token = try await caller.signIn(account.credentials).get().token
        // A new device: the password opens the keys the server keeps, and so does the
        // recovery key.
        let body = try await caller.accountKeys(token: token).get()
        let password = try await caller.passwordKeys(
          username: "ann", password: "correct horse battery")
        let keys = try AccountKeys(opening: body, with: password, username: "ann")
        #expect(keys == account.keys)
        #expect(
          try AccountKeys(opening: body, with: account.recoveryKey.keys(), username: "ann")
            == account.keys)
        let wrong = try PasswordKeys(
          username: "ann", password: "correct horse batterx", derivation: password.derivation)
        #expect(throws: AccountKeyError.self) {
          try AccountKeys(opening: body, with: wrong, username: "ann")
        }
        #expect(
          await caller.signIn(Credentials(username: "ann", password: wrong.signInSecret)).status
            == 401)
        // An account that is not encrypted has no keys on the server.
        let bobs = try await signUp(caller, "bob")
        let none = await caller.accountKeys(token: bobs)
        #expect(none.status == 404 && none.error?.body?.code == .notFound)
        let sealer = EventSealer(keys: keys)
        // Events in clear are refused: nothing of them is stored.
        let clear = await caller.sync(SyncPush(cursor: 0, events: first), token: token)
        #expect(clear.status == 400 && clear.error?.body?.field == "events[0]", "\(clear)")
        // One push in each encoding.
        let sealedFirst = try first.map { try sealer.seal($0, objectKey: noteKey) }
        let sealedSecond = try second.map {
          try sealer.seal($0, objectKey: noteKey)
        }
        _ = try await caller.sync(
          SyncPush(cursor: 0, events: sealedFirst), encoding: .binary, token: token
        ).get()
        _ = try await caller.sync(
          SyncPush(cursor: 0, events: sealedSecond), encoding: .json, token: token
        ).get()

        // A new device of the account pulls everything and opens it.
        let page = try await caller.sync(
          SyncPush(cursor: 0, events: []), encoding: .binary, token: token
        ).get()
        #expect(page.events.count == 8)
        let opened = try page.events.map { try sealer.open($0, objectKey: noteKey) }
        let byStamp = Dictionary(uniqueKeysWithValues: opened.map { ($0.stamp, $0) })
        #expect(byStamp[s[0]] == first[0])
        #expect(byStamp[s[1]] == first[1])
        #expect(byStamp[s[3]] == first[3])
        // The log stripped the tag erased after the list was set, sealed as both were.
        #expect(byStamp[s[2]]?.change == .tagsSet(kept, tags: ["CanaryTagKept"]))
        // The deleted note's events are erased: redacted, their sealed values gone.
        #expect(byStamp[s[4]]?.redaction == .deleted && byStamp[s[5]]?.redaction == .deleted)
        #expect(byStamp[s[6]] == second[0] && byStamp[s[7]] == second[1])
        #expect(
          page.events.allSatisfy {
            $0.redaction != nil || $0.change.kind == .noteDeleted || $0.sealedValues != nil
          })

        // Another account's keys, and note keys of its own, open none of them.
        let stranger = try EventSealer(keys: AccountKeys(random: SystemRandom.bytes))
        let strangerNoteKey = try ObjectKey(random: SystemRandom.bytes)
        for event in page.events where event.sealedValues != nil {
          #expect(throws: AccountKeyError.self) {
            try stranger.open(event, objectKey: { _ in strangerNoteKey })
          }
        }
      }
      // The server's own check of its log holds, and nothing it stores says any canary.
      #expect(try await server.verify().faults.isEmpty)
      let stored = try await storedBytes(of: server)
      for canary in canaries + secrets {
        #expect(stored.firstRange(of: Data(canary.utf8)) == nil, "\(backend): \(canary)")
      }
    }
  }
}

/// The system's cryptographically secure random bytes.
enum SystemRandom {
  static func bytes(_ count: Int) -> [UInt8] {
    var generator = SystemRandomNumberGenerator()
    return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
  }
}
