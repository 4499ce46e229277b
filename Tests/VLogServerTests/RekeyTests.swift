import Crypto
import Foundation
import ServerTestSupport
import Synchronization
import Testing
import VLog
import VLogServerTesting
import VLogSync
import VLogTesting
import VLogWire

@testable import VLogServer

/// Re-keying an encrypted account, tried as the holder of a lost device's keys would: with
/// everything the server holds, and with the device itself.
@Suite("Re-keying an encrypted account")
struct RekeyTests {
  static let password = EncryptedSyncTests.password

  @Test(
    "After a re-key, a lost device's keys open nothing written later, with every byte the server holds; the account's devices read everything",
    arguments: Backend.allCases)
  func lostDevice(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      try await withServer(backend: backend, clock: ManualClock(start: Date())) { server in
        try await withLiveServer(server) { baseURL in
          let keptLost = FileCredentialStore(path: root + "/lost.json")
          let lost = try EncryptedSyncTests.device(
            "lost", root: root, baseURL: baseURL, credentialStore: keptLost)
          try await lost.account.createAccount()
          let firstRecoveryKey = try #require(await lost.account.recoveryKey)
          try await lost.account.signIn()
          let old = try await lost.store.write { $0.createNote(text: "CanaryOld") }
          try await lost.account.sync()
          let account = try await EncryptedSyncTests.number(of: server)

          // What the lost device's holder has: its kept keys, and the old note's key, which
          // the device held (or unwraps from a copy of the server's data of the time).
          let lostKeys = try AccountKeys(
            rawRepresentation: try #require(try keptLost.accountKeys(for: "ann")))
          let oldWrapped = try #require(
            try await server.store.objectKeys(of: [old.identifier], account: account)
              .keys[old.identifier])
          let oldKey = try lostKeys.unwrap(oldWrapped, of: old.identifier)

          let lostToken = try #require(await lost.account.currentToken)
          // The user re-keys from another device, then writes.
          let laptop = try EncryptedSyncTests.device("laptop", root: root, baseURL: baseURL)
          try await laptop.account.signIn()
          try await laptop.account.sync()
          let newRecoveryKey = try await laptop.account.rekey()
          #expect(newRecoveryKey != firstRecoveryKey)
          let record = try #require(try await server.store.encryption(of: account))
          #expect(record.epoch == 2)
          #expect(try await server.store.links(account: account, after: 1).isEmpty)
          // Every other session is signed out: the lost device's token opens nothing.
          let probe = APICaller(transport: HTTPTransport(baseURL: baseURL))
          #expect(await probe.sessions(token: lostToken).status == 401)
          #expect(
            await probe.sessions(token: try #require(await laptop.account.currentToken)).status
              == 200)
          let fresh = try await laptop.store.write { changes in
            changes.setText("CanaryOldEdited", of: old)
            return changes.createNote(text: "CanaryFresh")
          }
          try await laptop.account.sync()

          // With every byte the server holds, the lost keys open nothing written since.
          let keys = try await server.store.objectKeys(
            of: [old.identifier, fresh.identifier], account: account)
          #expect(keys.keys.count == 2)
          for (object, wrapped) in keys.keys {
            #expect(throws: AccountKeyError.self) { try lostKeys.unwrap(wrapped, of: object) }
          }
          let everything = try await server.store.sync(
            account: account, pushing: [], after: 0, limit: 10_000
          ).events
          let written = everything.filter {
            $0.change.noteID == fresh || $0.change.kind == .textSet
          }
          let sealer = EventSealer(keys: lostKeys)
          var opened = 0
          for event in written {
            if (try? sealer.open(event, objectKey: { _ in oldKey })) != nil { opened += 1 }
          }
          // The old text opens with the old note's key; the edit and the new note do not.
          #expect(opened == 1)

          // The re-keying signed out every other session: the lost device, which held its
          // keys and its token but not the password, is told to sign in; a device of the
          // user's that knows the password signs in again and reads everything.
          let restarted = try EncryptedSyncTests.device(
            "lost-again", root: root, baseURL: baseURL, password: nil, credentialStore: keptLost)
          let refused = await #expect(throws: APIError.self) {
            try await restarted.account.sync()
          }
          #expect(refused?.code == .signedOut, "\(String(describing: refused))")
          try await lost.account.sync()
          #expect(try lost.store.note(fresh)?.text == "CanaryFresh")
          #expect(try lost.store.note(old)?.text == "CanaryOldEdited")

          // A new device reads the whole history; the new recovery key opens the keys, the
          // first one no longer signs in.
          let phone = try EncryptedSyncTests.device("phone", root: root, baseURL: baseURL)
          try await phone.account.signIn()
          #expect(try await phone.account.sync().inSync)
          #expect(try phone.store.note(old)?.text == "CanaryOldEdited")
          #expect(try phone.store.note(fresh)?.text == "CanaryFresh")
          let caller = APICaller(transport: HTTPTransport(baseURL: baseURL))
          let oldSecret = try firstRecoveryKey.keys().signInSecret
          #expect(
            await caller.recoveryKeys(
              RecoveryCredentials(username: "ann", recoverySecret: oldSecret)
            )
            .status == 401)
          _ = try await caller.recoveryKeys(
            RecoveryCredentials(
              username: "ann", recoverySecret: try newRecoveryKey.keys().signInSecret)
          ).get()
        }
      }
    }
  }

  @Test(
    "After a re-key, a server holding a lost device's keys can neither vouch for public keys of its own nor make up a re-keying: the account's devices refuse both, and seal nothing to it",
    arguments: Backend.allCases)
  func lostDeviceAndLyingServer(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      try await LyingServerTests.withServer(backend, root: root) { server, baseURL in
        let lie = Mutex<(@Sendable (inout [String: Any]) -> Void)?>(nil)
        let recoveryAnswer = Mutex<[UInt8]?>(nil)
        let transport = TamperingTransport(baseURL: baseURL) { request, response in
          if request.path == "/v1/accounts/recovery-keys",
            let body = recoveryAnswer.withLock({ $0 })
          {
            return TransportResponse(
              status: 200, headers: ["content-type": "application/json"], body: body)
          }
          guard request.method == "GET", request.path.hasPrefix("/v1/accounts/current/keys"),
            let forge = lie.withLock({ $0 })
          else { return response }
          var response = response
          response.body = LyingServerTests.rewritten(response.body) { forge(&$0) }
          return response
        }
        // The lost device: its holder keeps its keys, and the server its record of the time.
        let keptLost = FileCredentialStore(path: root + "/lost.json")
        let lost = try EncryptedSyncTests.device(
          "lost", root: root, baseURL: baseURL, credentialStore: keptLost)
        try await lost.account.createAccount()
        let firstRecoveryKey = try #require(await lost.account.recoveryKey)
        try await lost.account.signIn()
        let before = try await lost.store.write { $0.createNote(text: "CanaryBefore") }
        try await lost.account.sync()
        let lostKeys = try AccountKeys(
          rawRepresentation: try #require(try keptLost.accountKeys(for: "ann")))
        let account = try await EncryptedSyncTests.number(of: server)
        let oldRecord = try #require(try await server.store.encryption(of: account))
        let oldAnchor = oldRecord.passwordAnchor

        // The user re-keys on the laptop, which then meets the lying server.
        let laptop = try LyingServerTests.device("laptop", root: root, transport: transport)
        try await laptop.account.signIn()
        try await laptop.account.sync()
        try await laptop.account.rekey()
        let record = try #require(try await server.store.encryption(of: account))
        #expect(record.epoch == 2)

        // 1. Public keys of the server's own, vouched for with the lost device's keys, and a
        //    rotation due: nothing is sealed to them.
        let attacker = Curve25519.KeyAgreement.PrivateKey().publicKey.rawRepresentation
        let vouched = Data(
          lostKeys.keysAuthenticator(
            epoch: record.epoch, passwordPublicKey: Array(attacker),
            recoveryPublicKey: record.recoveryPublicKey, username: "ann")
        ).base64EncodedString()
        let sentBefore = transport.requests.count
        lie.withLock {
          $0 = { body in
            body["passwordPublicKey"] = attacker.base64EncodedString()
            body["rotationDue"] = true
            body["keysAuthenticator"] = vouched
          }
        }
        let during = try await laptop.store.write { $0.createNote(text: "CanaryDuringTheft") }
        let theft = await #expect(throws: AccountKeyError.self) { try await laptop.account.sync() }
        #expect(theft?.description.contains("vouched") == true, "\(String(describing: theft))")
        #expect(
          !transport.requests.dropFirst(sentBefore).contains {
            $0.method == "PUT" && $0.path.contains("keys")
          })

        // 2. A re-keying made up: keys of a content key of the server's choosing, sealed to the
        //    password's public key, with the anchor the server kept from before the real one.
        let forged = try lostKeys.rotated(random: SystemRandom.bytes).keys
          .rotated(random: SystemRandom.bytes).keys
        let forgedSeal = Data(try forged.sealed(to: record.passwordPublicKey, username: "ann"))
          .base64EncodedString()
        let forgedVouch = Data(
          forged.keysAuthenticator(
            epoch: forged.epoch, passwordPublicKey: record.passwordPublicKey,
            recoveryPublicKey: record.recoveryPublicKey, username: "ann")
        ).base64EncodedString()
        let keptAnchor = Data(oldAnchor).base64EncodedString()
        lie.withLock {
          $0 = { body in
            body["epoch"] = forged.epoch
            body["links"] = [String]()
            body["sealedForPassword"] = forgedSeal
            body["passwordAnchor"] = keptAnchor
            body["keysAuthenticator"] = forgedVouch
          }
        }
        let made = await #expect(throws: AccountKeyError.self) { try await laptop.account.sync() }
        #expect(made?.description.contains("re-keying") == true, "\(String(describing: made))")
        // Refused again at the next sync: the keys the laptop held are held still.
        await #expect(throws: AccountKeyError.self) { try await laptop.account.sync() }

        // 3. A recovery with the recovery key from before, which the server answers with the
        //    keys of then: refused before anything is sealed to the new password, or the
        //    laptop's keys forgotten.
        lie.withLock { $0 = nil }
        recoveryAnswer.withLock {
          $0 = Array(try! JSONEncoder().encode(oldRecord.body()))
        }
        let recovered = await #expect(throws: AccountKeyError.self) {
          try await laptop.account.recover(
            recoveryKey: firstRecoveryKey.description, newPassword: "another horse battery")
        }
        #expect(
          recovered?.description.contains("re-keying") == true, "\(String(describing: recovered))")
        #expect(!transport.requests.contains { $0.path == "/v1/accounts/recover" })
        recoveryAnswer.withLock { $0 = nil }

        // The honest answers again: everything syncs, and neither the lost keys nor the forged
        // ones open any key the laptop stored.
        lie.withLock { $0 = nil }
        #expect(try await laptop.account.sync().inSync)
        #expect(try await server.store.encryption(of: account)?.epoch == 2)
        let everyKey = try await server.store.objectKeys(
          account: account, after: nil, limit: 1000)
        #expect(everyKey.keys.count == 2)
        for (object, wrapped) in everyKey.keys {
          #expect(throws: AccountKeyError.self) { try lostKeys.unwrap(wrapped, of: object) }
          #expect(throws: AccountKeyError.self) { try forged.unwrap(wrapped, of: object) }
        }
        let phone = try EncryptedSyncTests.device("phone", root: root, baseURL: baseURL)
        try await phone.account.signIn()
        #expect(try await phone.account.sync().inSync)
        #expect(try phone.store.note(before)?.text == "CanaryBefore")
        #expect(try phone.store.note(during)?.text == "CanaryDuringTheft")
      }
    }
  }

  @Test(
    "A password change, a recovery and a session's revocation each offer a re-key; a deletion's rotation after it keeps the renewed keys"
  )
  func offered() async throws {
    try await withTemporaryDirectory { root in
      try await withServer(clock: ManualClock(start: Date())) { server in
        try await withLiveServer(server) { baseURL in
          let a = try EncryptedSyncTests.device("a", root: root, baseURL: baseURL)
          try await a.account.createAccount()
          try await a.account.signIn()
          let (kept, doomed) = try await a.store.write { changes in
            (changes.createNote(text: "CanaryKept"), changes.createNote(text: "CanaryDoomed"))
          }
          try await a.account.sync()
          let account = try await EncryptedSyncTests.number(of: server)
          func epoch() async throws -> UInt64 {
            try #require(try await server.store.encryption(of: account)).epoch
          }
          let changed = try await a.account.changePassword(
            from: Self.password, to: "a second horse battery", rekeying: true)
          #expect(changed != nil)
          #expect(try await epoch() == 2)
          let other = try EncryptedSyncTests.device(
            "other", root: root, baseURL: baseURL, password: "a second horse battery")
          try await other.account.signIn()
          try await other.account.sync()
          let session = try #require(
            try await a.account.sessions().first { !$0.current }?.id)
          let revoked = try await a.account.revokeSession(id: session, rekeying: true)
          #expect(revoked != nil)
          #expect(try await epoch() == 3)
          let recovered = try await a.account.recover(
            recoveryKey: try #require(revoked).description, newPassword: "a third horse battery",
            rekeying: true)
          #expect(recovered != nil && recovered != revoked)
          #expect(try await epoch() == 4)
          // A deletion's rotation (with a link) re-wraps the renewed keys as they are.
          try await a.store.write { $0.deleteNote(doomed) }
          try await a.account.sync()
          #expect(try await epoch() == 5)
          let wrapped = try #require(
            try await server.store.objectKeys(of: [kept.identifier], account: account)
              .keys[kept.identifier])
          // One key, and three kept from before each re-keying.
          #expect(wrapped.count == ObjectKeys.wrappedBytes + 3 * 32)
          let fresh = try EncryptedSyncTests.device(
            "fresh", root: root, baseURL: baseURL, password: "a third horse battery")
          try await fresh.account.signIn()
          try await fresh.account.sync()
          #expect(try fresh.store.note(kept)?.text == "CanaryKept")
          #expect(try fresh.store.note(doomed) == nil)
        }
      }
    }
  }

  @Test(
    "A token alone can neither re-key nor replace the recovery key: the password is checked, and its failures count for the account, not the name",
    arguments: Backend.allCases)
  func tokenAlone(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      let account = try NewEncryptedAccount(
        username: "ann", password: Self.password, cost: .testing, random: SystemRandom.bytes)
      // A lost device's holder: the token and the keys, which sign; not the password.
      let caller = APICaller(transport: InProcessTransport(server: server))
        .signingWrites(with: account.keys.requestSigningKey)
      _ = try await caller.createAccount(account.credentials, keys: account.serverKeys).get()
      let token = try await caller.signIn(account.credentials).get().token
      let bytes = { (count: Int) in [UInt8](repeating: 7, count: count) }
      let recovery = NewRecoveryKey(
        recoveryPublicKey: bytes(32), recoveryAnchor: bytes(32), recoverySecret: "a made-up secret")
      func rotation(link: [UInt8]?, recovery: NewRecoveryKey?, password: String?) -> KeyRotation {
        KeyRotation(
          epoch: 1, sealedForPassword: bytes(160), sealedForRecovery: bytes(160), link: link,
          recovery: recovery, password: password, keys: [:], keysAuthenticator: bytes(32))
      }
      for body in [
        rotation(link: nil, recovery: nil, password: nil),
        rotation(link: bytes(60), recovery: recovery, password: nil),
      ] {
        let refused = await caller.rotateKeys(body, token: token)
        #expect(refused.status == 400, "\(refused)")
        #expect(refused.error?.body?.field == "password")
      }
      let wrong = await caller.rotateKeys(
        rotation(link: nil, recovery: recovery, password: "not the password"), token: token)
      #expect(wrong.status == 403, "\(wrong)")
      #expect(try #require(try await server.store.encryption(of: 1)).epoch == 1)
      // Someone failing at the name does not keep the account's holder from its password.
      for _ in 0..<6 {
        _ = await caller.signIn(Credentials(username: "ann", password: "a wrong password"))
      }
      #expect(await caller.signIn(account.credentials).status == 429)
      let newKeys = try PasswordKeys(
        username: "ann", password: "a new horse battery",
        derivation: .new(cost: .testing, random: SystemRandom.bytes))
      let change = await caller.changePassword(
        PasswordChange(
          currentPassword: account.credentials.password, newPassword: newKeys.signInSecret,
          keys: try account.keys.passwordSeal(
            to: newKeys,
            recoveryPublicKey: try NewAccountKeys.bytes(
              account.serverKeys.recoveryPublicKey, "", count: 32),
            username: "ann")),
        token: token)
      #expect(change.status == 204, "\(change)")
    }
  }
}
