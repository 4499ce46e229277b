import Foundation
import ServerTestSupport
import Testing
import VLog
import VLogSync
import VLogTesting

@testable import VLogServer

/// A `GET` of a path with a query the API caller does not write: the object keys' listing with
/// a page size, a malformed parameter. A test may send any path through it.
struct QueryRequest<Value: Decodable & Sendable>: APIRequest {
  var path: String
  var method: String { "GET" }
  var requiresToken: Bool { true }
  var contentType: String? { nil }
  func body() throws -> [UInt8] { [] }
  func value(from body: [UInt8]) throws -> Value { try WireJSON.decode(from: body) }
}

private func listPage(after: Identifier?, limit: Int) -> QueryRequest<ObjectKeysPage> {
  QueryRequest(path: "/v1/object-keys?limit=\(limit)" + (after.map { "&after=\($0)" } ?? ""))
}

@Suite("Keys of notes and attachments on the server")
struct ObjectKeyTests {
  static func note(_ low: UInt64) -> NoteID { NoteID(Identifier(high: 7, low: low)) }

  /// A new encrypted account on a live server, signed in.
  static func encryptedAccount(_ caller: APICaller, _ name: String) async throws -> (
    account: NewEncryptedAccount, token: String
  ) {
    let account = try NewEncryptedAccount(
      username: name, password: "correct horse battery", cost: .testing,
      random: SystemRandom.bytes)
    _ = try await caller.createAccount(account.credentials, keys: account.serverKeys).get()
    return (account, try await caller.signIn(account.credentials).get().token)
  }

  /// `body` with a new encrypted account, "ann", signed in on a live server of `backend`.
  static func withEncryptedAccount(
    _ backend: Backend,
    _ body: @escaping @Sendable (APICaller, NewEncryptedAccount, String) async throws -> Void
  ) async throws {
    try await withTemporaryDirectory { root in
      let server = try await openServer(backend: backend, directory: root + "/server")
      defer { server.close() }
      try await withLiveServer(server) { baseURL in
        let caller = APICaller(transport: HTTPTransport(baseURL: baseURL))
        let (account, token) = try await encryptedAccount(caller, "ann")
        // The account's writes, signed as its devices sign them.
        try await body(caller.signingWrites(with: account.keys.requestSigningKey), account, token)
      }
    }
  }

  @Test(
    "The record of an account's keys reads back as written; one written before anchors (format 1) still reads, with none; other bytes do not"
  )
  func recordFormats() throws {
    let account = try NewEncryptedAccount(
      username: "ann", password: "correct horse battery", cost: .testing,
      random: SystemRandom.bytes)
    let hash = try PasswordHash(
      hashing: "a recovery secret", cost: .testing, salt: SystemRandom.bytes(PasswordHash.saltCount)
    )
    let record = try EncryptionRecord(account.serverKeys, recoverySecret: hash)
    #expect(EncryptionRecord(decoding: record.encoded) == record)
    #expect(record.passwordAnchor.count == 32 && record.encoded.first == 7)
    #expect(record.requestKey == account.keys.requestPublicKey && record.requestKey.count == 32)
    #expect(record.keysAuthenticator.count == 32 && record.sealedForPassword.count == 161)
    // Records of accounts made before keys had a vouching key: seals of 120 bytes.
    let head = Array(record.encoded[1..<(1 + 8 + 64)])
    let (sealP, sealR) = ([UInt8](repeating: 1, count: 120), [UInt8](repeating: 2, count: 120))
    var old: [UInt8] = [1] + head + sealP + sealR
    old += hash.encoded
    let read = try #require(EncryptionRecord(decoding: old))
    #expect(read.passwordAnchor.isEmpty && read.sealedForRecovery == sealR)
    #expect(read.recoverySecret == hash && read.epoch == 1)
    #expect(EncryptionRecord(decoding: [3] + old.dropFirst()) == nil)
    #expect(EncryptionRecord(decoding: old.prefix(100)) == nil)
    let derivation = record.keyDerivation
    var four: [UInt8] = [4] + head + sealP + sealR + record.passwordAnchor + record.recoveryAnchor
    four += [32] + record.keysAuthenticator
    four +=
      [derivation.version, derivation.logRounds, derivation.blockSize, derivation.parallelism]
      .map { UInt8($0) } + [UInt8(derivation.saltBytes.count)] + derivation.saltBytes
    four += hash.encoded
    var legacy = record
    (legacy.sealedForPassword, legacy.sealedForRecovery) = (sealP, sealR)
    legacy.requestKey = []
    #expect(EncryptionRecord(decoding: four) == legacy)
    // Written again, in format 7, it reads back the same, and so do seals of two sizes (a
    // client may send them; a device sealing one account's keys never does).
    #expect(EncryptionRecord(decoding: legacy.encoded) == legacy)
    var mixed = record
    mixed.sealedForPassword = sealP
    #expect(EncryptionRecord(decoding: mixed.encoded) == mixed)
    var odd = record.encoded
    #expect(odd[(1 + 8 + 64)...].starts(with: [0, 161]))
    odd[1 + 8 + 64 + 1] = 162
    #expect(EncryptionRecord(decoding: odd) == nil)
    // Format 5, before request keys: seals of 160 bytes after a length byte, no request key.
    // It reads with none, and a record written with none reads back so.
    let (sealP5, sealR5) = ([UInt8](repeating: 3, count: 160), [UInt8](repeating: 4, count: 160))
    var five: [UInt8] = [5] + head + [160] + sealP5 + [160] + sealR5
    five += record.passwordAnchor + record.recoveryAnchor + [32] + record.keysAuthenticator
    five +=
      [derivation.version, derivation.logRounds, derivation.blockSize, derivation.parallelism]
      .map { UInt8($0) } + [UInt8(derivation.saltBytes.count)] + derivation.saltBytes
    five += hash.encoded
    var keyless = record
    keyless.requestKey = []
    (keyless.sealedForPassword, keyless.sealedForRecovery) = (sealP5, sealR5)
    #expect(EncryptionRecord(decoding: five) == keyless)
    #expect(EncryptionRecord(decoding: keyless.encoded) == keyless)
    // Format 6: as 5, with the request key after the key derivation.
    var six: [UInt8] = [6] + five.dropFirst()
    six.insert(contentsOf: [32] + record.requestKey, at: six.count - hash.encoded.count)
    var keyed = keyless
    keyed.requestKey = record.requestKey
    #expect(EncryptionRecord(decoding: six) == keyed)
    // Seals of keys that retired event keys: longer than a length byte holds.
    var retiring = record
    retiring.sealedForPassword = [UInt8](repeating: 5, count: NewAccountKeys.maximumSealedBytes)
    #expect(EncryptionRecord(decoding: retiring.encoded) == retiring)
    var short = record.encoded
    short[short.count - hash.encoded.count - 33] = 31
    #expect(EncryptionRecord(decoding: short) == nil)
  }

  @Test(
    "An encrypted account's note keys: stored at the current epoch only, the first one standing, looked up and listed in pages; erased in the push that stores the note's deletion, which makes a rotation due and refuses the key again; a rotation must cover every key, replaces them all and links the epochs forward; a clear account has none",
    arguments: Backend.allCases)
  func lifecycle(backend: Backend) async throws {
    try await Self.withEncryptedAccount(backend) { caller, account, token in
      let keys = account.keys
      let notes = (1...5).map(Self.note)
      var noteKeys: [NoteID: ObjectKey] = [:]
      for note in notes { noteKeys[note] = try ObjectKey(random: SystemRandom.bytes) }
      func wrapped(_ keys: AccountKeys, _ notes: [NoteID]) throws -> [Identifier: [UInt8]] {
        Dictionary(
          uniqueKeysWithValues: try notes.map {
            ($0.identifier, try keys.wrap(noteKeys[$0]!, of: $0.identifier))
          })
      }

      // Stored at the current epoch; a second key of a note does not replace the first.
      let stored = try await caller.storeObjectKeys(
        ObjectKeys(epoch: 1, keys: wrapped(keys, notes)), token: token
      ).get()
      #expect(stored.stored == 5)
      let impostor = try keys.wrap(
        try ObjectKey(random: SystemRandom.bytes), of: notes[0].identifier)
      let again = try await caller.storeObjectKeys(
        ObjectKeys(epoch: 1, keys: [notes[0].identifier: impostor]), token: token
      ).get()
      #expect(again.stored == 0)
      let stale = try await caller.storeObjectKeys(
        ObjectKeys(epoch: 2, keys: wrapped(keys, notes)), token: token)
      #expect(stale.status == 409 && stale.error?.body?.code == .keysChanged, "\(stale)")
      let malformed = await caller.storeObjectKeys(
        ObjectKeys(epoch: 1, keys: [notes[0].identifier: [1, 2, 3]]), token: token)
      #expect(malformed.status == 400, "\(malformed)")
      #expect(malformed.error?.body?.field == "keys.\(notes[0].identifier)")

      let found = try await caller.lookUpObjectKeys(
        [notes[0].identifier, Identifier(high: 9, low: 9)], token: token
      ).get()
      #expect(found.epoch == 1 && found.keys.count == 1)
      let foundKeys = try found.validated(maximum: 10)
      #expect(
        try keys.unwrap(foundKeys[notes[0].identifier]!, of: notes[0].identifier)
          == noteKeys[notes[0]])

      // Listed in order, in pages.
      var listed: [Identifier] = []
      var after: Identifier?
      var pages = 0
      repeat {
        let page = try await caller.send(
          listPage(after: after, limit: 2), token: token
        ).get()
        let ids = try page.validated().keys.sorted()
        #expect(ids.count <= 2)
        listed += ids
        after = ids.last
        pages += 1
        if !page.more { break }
      } while pages < 10
      #expect(listed == notes.map(\.identifier) && pages == 3)
      #expect(await caller.send(listPage(after: nil, limit: 0), token: token).status == 400)

      // The push that stores a note's deletion erases its key and makes a rotation due.
      #expect(try await caller.accountKeys(token: token).get().rotationDue == false)
      let sealer = EventSealer(keys: keys)
      let stamps = SealedEventTests.stamps(4)
      let events = try [
        Event(stamp: stamps[0], change: .noteCreated(notes[4], creationDate: Date())),
        Event(stamp: stamps[1], change: .textSet(notes[4], text: "gone soon")),
        Event(stamp: stamps[2], change: .noteDeleted(notes[4])),
      ].map { try sealer.seal($0, objectKey: { noteKeys[NoteID($0)]! }) }
      _ = try await caller.sync(SyncPush(cursor: 0, events: events), token: token).get()
      let afterDeletion = try await caller.lookUpObjectKeys(
        notes.map(\.identifier), token: token
      ).get()
      #expect(Set(afterDeletion.keys.keys) == Set(notes.prefix(4).map(\.identifier.description)))
      #expect(try await caller.accountKeys(token: token).get().rotationDue)
      // A device that missed the deletion cannot put the key back.
      let late = try await caller.storeObjectKeys(
        ObjectKeys(epoch: 1, keys: wrapped(keys, [notes[4]])), token: token
      ).get()
      #expect(late.stored == 0)
      // An attachment added to the note on a device that missed the deletion: its key is
      // stored (the attachment is not deleted), and erased by the push of its addition,
      // which the log erases on arrival.
      let lateAttachment = Attachment(
        id: AttachmentID(Identifier(high: 8, low: 1)), noteID: notes[4], mimeType: "text/plain",
        width: 0, height: 0, blobHash: SealedBlob(naming: [1]).hash, byteCount: 1)
      let attachmentKey = try ObjectKey(random: SystemRandom.bytes)
      let storedLate = try await caller.storeObjectKeys(
        ObjectKeys(
          epoch: 1,
          keys: [
            lateAttachment.id.identifier: try keys.wrap(
              attachmentKey, of: lateAttachment.id.identifier)
          ]),
        token: token
      ).get()
      #expect(storedLate.stored == 1)
      let addition = try sealer.seal(
        Event(stamp: stamps[3], change: .attachmentAdded(lateAttachment)),
        objectKey: { _ in attachmentKey },
        sealedBlob: { _ in SealedBlob(hash: SealedBlob(naming: [2]).hash, byteCount: 29) })
      _ = try await caller.sync(SyncPush(cursor: 0, events: [addition]), token: token).get()
      #expect(
        try await caller.lookUpObjectKeys([lateAttachment.id.identifier], token: token).get()
          .keys.isEmpty)

      // A rotation must start at the current epoch and cover every key the account holds.
      let (next, link) = try keys.rotated(random: SystemRandom.bytes)
      let passwordPublicKey = try NewAccountKeys.bytes(
        account.serverKeys.passwordPublicKey, "", count: 32)
      let recoveryPublicKey = try NewAccountKeys.bytes(
        account.serverKeys.recoveryPublicKey, "", count: 32)
      func rotation(from epoch: UInt64, _ notes: [NoteID]) throws -> KeyRotation {
        KeyRotation(
          epoch: epoch,
          sealedForPassword: try next.sealed(
            to: passwordPublicKey, username: "ann"),
          sealedForRecovery: try next.sealed(
            to: recoveryPublicKey, username: "ann"),
          link: link, keys: try wrapped(next, notes),
          keysAuthenticator: next.keysAuthenticator(
            epoch: epoch + 1, passwordPublicKey: passwordPublicKey,
            recoveryPublicKey: recoveryPublicKey, username: "ann"))
      }
      let partial = await caller.rotateKeys(
        try rotation(from: 1, Array(notes.prefix(3))), token: token)
      #expect(partial.status == 409 && partial.error?.body?.code == .keysChanged, "\(partial)")
      let wrongEpoch = await caller.rotateKeys(
        try rotation(from: 2, Array(notes.prefix(4))), token: token)
      #expect(wrongEpoch.status == 409, "\(wrongEpoch)")
      #expect(try await caller.accountKeys(token: token).get().epoch == 1)

      let rotated = try await caller.rotateKeys(
        try rotation(from: 1, Array(notes.prefix(4))), token: token
      ).get()
      #expect(rotated.epoch == 2 && !rotated.rotationDue && rotated.links.isEmpty)
      // The password opens the new epoch's keys; the old epoch's link leads to them.
      let password = try await caller.passwordKeys(
        username: "ann", password: "correct horse battery")
      #expect(try AccountKeys(opening: rotated, with: password, username: "ann") == next)
      let linked = try await caller.accountKeys(since: 1, token: token).get()
      #expect(try linked.linkBytes().count == 1)
      #expect(try keys.following(try linked.linkBytes()[0]) == next)
      #expect(try await caller.accountKeys(since: 2, token: token).get().links.isEmpty)
      let badSince = await caller.send(
        QueryRequest<AccountKeysBody>(path: "/v1/accounts/current/keys?since=-1"), token: token)
      #expect(badSince.status == 400 && badSince.error?.body?.field == "since")
      // Every key is wrapped by the new epoch's content key, not the old one's.
      let now = try await caller.lookUpObjectKeys(notes.map(\.identifier), token: token).get()
      #expect(now.epoch == 2)
      for (object, bytes) in try now.validated(maximum: 10) {
        #expect(try next.unwrap(bytes, of: object) == noteKeys[NoteID(object)])
        #expect(throws: AccountKeyError.self) { try keys.unwrap(bytes, of: object) }
      }
      // Keys wrapped by the old epoch's content key are refused now.
      let old = await caller.storeObjectKeys(
        ObjectKeys(epoch: 1, keys: [Identifier(high: 8, low: 8): impostor]), token: token)
      #expect(old.status == 409)

      // An account that is not encrypted has no keys: every keys endpoint answers 404.
      let bob = try await signUp(caller, "bob")
      #expect(await caller.lookUpObjectKeys([notes[0].identifier], token: bob).status == 404)
      #expect(await caller.listObjectKeys(token: bob).status == 404)
      #expect(
        await caller.storeObjectKeys(ObjectKeys(epoch: 1, keys: [:]), token: bob).status == 404)
      let empty = try rotation(from: 1, [])
      #expect(await caller.rotateKeys(empty, token: bob).status == 404)
    }
  }

  @Test(
    "A device that made a note's key and stored it, then restarted before pushing the note, seals the note's events again with the key the server kept, not the one it makes anew: the other device opens them; a key store the server refuses leaves no key behind, so the next seal makes and stores one; each event of a batch, sealed in parts on every core, has a nonce of its own",
    arguments: Backend.allCases)
  func restartBeforePush(backend: Backend) async throws {
    try await Self.withEncryptedAccount(backend) { caller, account, token in
      let note = Self.note(1)
      let created = Date(timeIntervalSince1970: 1_700_000_000)
      let s = SealedEventTests.stamps(600)
      // Enough events that the keyring seals them in parts, with one note created.
      let clear =
        [Event(stamp: s[0], change: .noteCreated(note, creationDate: created))]
        + (1..<600).map { Event(stamp: s[$0], change: .textSet(note, text: "text \($0)")) }
      let first = AccountKeyring(
        keys: account.keys, caller: caller, token: { token }, random: SystemRandom.bytes)
      _ = try await first.seal(clear)
      // The restarted device holds no key, makes a new one, and finds the server's.
      let restarted = AccountKeyring(
        keys: account.keys, caller: caller, token: { token }, random: SystemRandom.bytes)
      let sealed = try await restarted.seal(clear)
      let nonces = sealed.compactMap { $0.sealedValues.map { Array($0.prefix(12)) } }
      #expect(nonces.count == clear.count && Set(nonces).count == clear.count)
      #expect(await restarted.heldKeys[note.identifier] == first.heldKeys[note.identifier])
      let other = AccountKeyring(
        keys: account.keys, caller: caller, token: { token }, random: SystemRandom.bytes)
      #expect(try await other.open(sealed) == clear)

      // A store refused (an expired token, here) throws, and leaves no key that was never
      // stored: sealing again makes one and stores it.
      let second = Self.note(2)
      let creation = [Event(stamp: s[1], change: .noteCreated(second, creationDate: created))]
      let refused = AccountKeyring(
        keys: account.keys, caller: caller, token: { "not-a-token" },
        random: SystemRandom.bytes)
      await #expect(throws: APIError.self) { try await refused.seal(creation) }
      #expect(await refused.heldObjects.isEmpty)
      let stored = try await first.seal(creation)
      #expect(try await other.open(stored) == creation)
    }
  }
}
