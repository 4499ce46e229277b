import Foundation
import ServerTestSupport
import Testing
import VLog
import VLogServerTesting
import VLogSync
import VLogTesting
import VLogWire

@testable import VLogServer

/// Writes to an encrypted account's log and keys, tried as the holder of a session token
/// would: with the token and without the keys, or with a lost device's keys after a re-keying.
@Suite("Writes an encrypted account's devices sign")
struct SignedWriteTests {
  @Test(
    "A token alone writes nothing to an encrypted account: a push of a deletion, a rotation, object keys and an upload of bytes, unsigned, signed with a key of its own, or with the devices' signature of another body, are refused 403 and change nothing; after a re-keying, a lost device's keys sign nothing either; the devices' own writes pass, and a clear account's take no signature",
    arguments: Backend.allCases)
  func tokenAlone(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      try await withServer(backend: backend, clock: ManualClock(start: Date())) { server in
        try await withLiveServer(server) { baseURL in
          let kept = FileCredentialStore(path: root + "/a.json")
          let a = try EncryptedSyncTests.device(
            "a", root: root, baseURL: baseURL, credentialStore: kept)
          try await a.account.createAccount()
          try await a.account.signIn()
          let note = try await a.store.write { $0.createNote(text: "CanaryKept") }
          try await a.account.sync()
          let account = try await EncryptedSyncTests.number(of: server)
          let keys = try AccountKeys(
            rawRepresentation: try #require(try kept.accountKeys(for: "ann")))
          let record = try #require(try await server.store.encryption(of: account))
          #expect(record.requestKey == keys.requestPublicKey && record.requestKey.count == 32)
          #expect(try await a.account.checkSync().inSync)

          let token = try #require(await a.account.currentToken)
          let caller = APICaller(transport: HTTPTransport(baseURL: baseURL))
          func serverEvents() async throws -> [Event] {
            try await server.store.sync(account: account, pushing: [], after: 0, limit: 1000)
              .events
          }
          let before = try await serverEvents()
          // A deletion as a device would make it, authenticator and all: only the signature
          // of the push is missing.
          let deletion = try EventSealer(keys: keys).seal(
            Event(
              stamp: Stamp(
                time: HybridTime(
                  milliseconds: UInt64(Date().timeIntervalSince1970 * 1000), counter: 0),
                replica: ReplicaID(Identifier(high: 0xBAD, low: 1))),
              change: .noteDeleted(note)),
            objectKey: { _ in try ObjectKey(random: SystemRandom.bytes) })
          let push = SyncPush(cursor: 0, events: [deletion])
          let otherKey = SystemRandom.bytes(RequestSignature.privateKeyBytes)
          let forgedKeys = ObjectKeys(
            epoch: record.epoch,
            keys: [Identifier(high: 0xBAD, low: 2): SystemRandom.bytes(ObjectKeys.wrappedBytes)])
          let rotation = KeyRotation(
            epoch: record.epoch, sealedForPassword: record.sealedForPassword,
            sealedForRecovery: record.sealedForRecovery,
            link: SystemRandom.bytes(KeyRotation.linkBytes), keys: [:],
            keysAuthenticator: record.keysAuthenticator)
          // Bytes no event names, which would take the account's room on the server.
          let blob = [UInt8](repeating: 0xAB, count: 4096)
          let blobHash = SealedBlob(naming: blob).hash
          for (what, signer) in [("unsigned", nil), ("signed with a key of its own", otherKey)] {
            let signed = caller.signingWrites(with: signer)
            let pushed = await signed.sync(push, token: token)
            #expect(pushed.status == 403 && pushed.error?.body?.code == .unsignedWrite, "\(what)")
            let stored = await signed.storeObjectKeys(forgedKeys, token: token)
            #expect(stored.status == 403, "\(what): \(stored)")
            let rotated = await signed.rotateKeys(rotation, token: token)
            #expect(rotated.status == 403, "\(what): \(rotated)")
            let uploaded = await signed.putBlob(blob, hash: blobHash, token: token)
            #expect(uploaded.status == 403, "\(what): \(uploaded)")
          }
          // The devices' signature of one body does not carry another.
          let devices = caller.signingWrites(with: keys.requestSigningKey)
          let signedEmpty = await devices.sync(SyncPush(cursor: 0, events: []), token: token)
          #expect(signedEmpty.status == 200)
          #expect(await devices.putBlob(blob, hash: blobHash, token: token).status == 201)
          var replayed = TransportRequest(
            method: "POST", path: "/v1/sync",
            headers: [
              "authorization": "Bearer \(token)", "content-type": "application/json",
              "vlog-signature": try RequestSignature.signature(
                method: "POST", route: "/v1/sync",
                body: Array(try JSONEncoder().encode(SyncRequest(cursor: 0, events: []))),
                privateKey: keys.requestSigningKey),
            ])
          replayed.body = Array(try JSONEncoder().encode(SyncRequest(push)))
          #expect(try await HTTPTransport(baseURL: baseURL).send(replayed).status == 403)

          // Nothing changed: the note's events and key are all there, the epoch is the same,
          // and the device is in sync.
          #expect(try await serverEvents() == before)
          #expect(
            try await server.store.objectKeys(of: [note.identifier], account: account).keys.count
              == 1)
          #expect(try await server.store.encryption(of: account)?.epoch == record.epoch)
          #expect(try await a.account.sync().inSync)
          #expect(try a.store.note(note)?.text == "CanaryKept")

          // After a re-keying, the lost device's keys sign nothing the server takes, with the
          // token of a session that survived it.
          let b = try EncryptedSyncTests.device("b", root: root, baseURL: baseURL)
          try await b.account.signIn()
          try await b.account.sync()
          _ = try await b.account.rekey()
          let rekeyed = try #require(try await server.store.encryption(of: account))
          #expect(rekeyed.requestKey.count == 32 && rekeyed.requestKey != keys.requestPublicKey)
          let bToken = try #require(await b.account.currentToken)
          let lost = await devices.sync(push, token: bToken)
          #expect(lost.status == 403 && lost.error?.body?.code == .unsignedWrite, "\(lost)")
          #expect(try await serverEvents().count == before.count)
          // The account's devices write on.
          try await b.store.write { $0.setText("CanaryEdited", of: note) }
          #expect(try await b.account.sync().inSync)
          try await a.account.sync()
          #expect(try a.store.note(note)?.text == "CanaryEdited")

          // A clear account's pushes take no signature.
          let clear = APICaller(transport: HTTPTransport(baseURL: baseURL))
          _ = try await clear.createClearAccount(
            username: "bob", password: "battery staple orchid", cost: .testing)
          let (session, _) = try await clear.signIn(
            username: "bob", password: "battery staple orchid", floor: .testing)
          let created = Event(
            stamp: deletion.stamp, change: .noteCreated(note, creationDate: Date()))
          let clearPush = await clear.sync(
            SyncPush(cursor: 0, events: [created]), token: session.token)
          #expect(clearPush.status == 200, "\(clearPush)")
        }
      }
    }
  }

  @Test(
    "After a re-keying, a lying server with a lost device's keys makes no event the account's devices apply that is stamped after it: such an edit is set aside by every device; the events the devices authenticated before it still check on a new device",
    arguments: Backend.allCases)
  func retiredKeys(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      try await withServer(backend: backend, clock: ManualClock(start: Date())) { server in
        try await withLiveServer(server) { baseURL in
          let kept = FileCredentialStore(path: root + "/lost.json")
          let lost = try EncryptedSyncTests.device(
            "lost", root: root, baseURL: baseURL, credentialStore: kept)
          try await lost.account.createAccount()
          try await lost.account.signIn()
          let note = try await lost.store.write { $0.createNote(text: "CanaryKept") }
          try await lost.account.sync()
          let lostKeys = try AccountKeys(
            rawRepresentation: try #require(try kept.accountKeys(for: "ann")))
          let account = try await EncryptedSyncTests.number(of: server)
          // The note's key as the lost device held it.
          let wrapped = try #require(
            try await server.store.objectKeys(of: [note.identifier], account: account)
              .keys[note.identifier])
          let noteKey = try lostKeys.unwrap(wrapped, of: note.identifier)

          let laptop = try EncryptedSyncTests.device("laptop", root: root, baseURL: baseURL)
          try await laptop.account.signIn()
          try await laptop.account.sync()
          _ = try await laptop.account.rekey()

          // The server stores an edit the lost keys sealed and authenticated, stamped after
          // the re-keying (and past the margin it leaves for clocks).
          let later = UInt64(Date().timeIntervalSince1970 * 1000) + 30 * 60 * 1000
          let forged = try EventSealer(keys: lostKeys).seal(
            Event(
              stamp: Stamp(
                time: HybridTime(milliseconds: later, counter: 0),
                replica: ReplicaID(Identifier(high: 0xBAD, low: 3))),
              change: .textSet(note, text: "ForgedText")),
            objectKey: { _ in noteKey })
          _ = try await server.store.sync(
            account: account, pushing: [forged], after: 0, limit: 1, maximumBytes: 1 << 20,
            retention: (nil, 0))
          let report = try await laptop.account.sync()
          #expect(report.quarantined == 1 && report.inSync, "\(report)")
          #expect(try laptop.store.note(note)?.text == "CanaryKept")
          // A new device checks every event made before the re-keying with the retired key,
          // and sets the forgery aside.
          let phone = try EncryptedSyncTests.device("phone", root: root, baseURL: baseURL)
          try await phone.account.signIn()
          let first = try await phone.account.sync()
          #expect(first.quarantined == 1 && first.inSync, "\(first)")
          let seen = try phone.store.note(note)
          #expect(seen?.text == "CanaryKept", "\(String(describing: seen)) \(first)")
        }
      }
    }
  }
}
