import Crypto
import Foundation
import ServerTestSupport
import Synchronization
import Testing
import VLog
import VLogSync
import VLogTesting
import VLogWire

@testable import VLogServer

/// A transport that hands every answer of a real server to `tamper` before the device reads
/// it, and keeps every request the device sent: a server, or whoever controls its answers,
/// that lies.
final class TamperingTransport: Transport, Sendable {
  private let inner: HTTPTransport
  private let tamper: @Sendable (TransportRequest, TransportResponse) -> TransportResponse
  private let sent = Mutex<[TransportRequest]>([])

  init(
    baseURL: String,
    tamper: @escaping @Sendable (TransportRequest, TransportResponse) -> TransportResponse
  ) {
    inner = HTTPTransport(baseURL: baseURL)
    self.tamper = tamper
  }

  var server: String { inner.server }
  var requests: [TransportRequest] { sent.withLock { $0 } }

  func send(_ request: TransportRequest) async throws -> TransportResponse {
    sent.withLock { $0.append(request) }
    return tamper(request, try await inner.send(request))
  }
}

@Suite("An encrypted account against a lying server")
struct LyingServerTests {
  static let encryption = EncryptionOptions(cost: .testing, random: systemRandomBytes)

  /// A server on `backend`, live on loopback for `body`.
  static func withServer<R: Sendable>(
    _ backend: Backend, root: String,
    _ body: @escaping @Sendable (SyncServer, String) async throws -> R
  ) async throws -> R {
    let server: SyncServer
    switch backend {
    case .lmdb:
      server = try SyncServer.open(dataDirectory: root + "/server", configuration: .testing)
    case .postgres:
      server = try await SyncServer.open(
        database: try await TestCluster.shared.newDatabase(), configuration: .testing)
    }
    defer { server.close() }
    return try await withLiveServer(server) { baseURL in try await body(server, baseURL) }
  }

  /// A device of the account `ann` with a store of its own, reaching the server through
  /// `transport`.
  static func device(
    _ name: String, root: String, transport: any Transport, required: Bool = true,
    encoding: SyncEncoding = .binary
  ) throws -> (store: NoteStore, account: SyncAccount) {
    let store = try NoteStore.open(
      at: root + "/" + name, options: NoteStore.Options(durability: .noSync))
    let account = try SyncAccount(
      store: store, transport: transport,
      credentials: Credentials(username: "ann", password: EncryptedSyncTests.password),
      stateFile: SyncAccount.stateFile(for: store), encoding: encoding,
      encryption: required
        ? encryption
        : EncryptionOptions(cost: .testing, random: systemRandomBytes, isRequired: false))
    return (store, account)
  }

  /// `body`'s JSON object with `change` made to it; a body that is not a JSON object (an
  /// error page, a binary answer) goes through untouched, as the lie is about keys' JSON.
  static func rewritten(_ body: [UInt8], _ change: (inout [String: Any]) -> Void) -> [UInt8] {
    guard var object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any]
    else { return body }
    change(&object)
    return Array((try? JSONSerialization.data(withJSONObject: object)) ?? Data(body))
  }

  @Test(
    "A server that says an encrypted account is clear, or names a weaker, older, costlier or other key derivation, never gets the password; a device refuses every derivation outside its bounds before it stretches, and one that signed in refuses every lie",
    arguments: Backend.allCases)
  func signInParameters(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      try await Self.withServer(backend, root: root) { _, baseURL in
        let lie = Mutex<String?>(nil)
        let transport = TamperingTransport(baseURL: baseURL) { request, response in
          guard request.path == "/v1/sessions/parameters", let mode = lie.withLock({ $0 })
          else { return response }
          var response = response
          response.body = Self.rewritten(response.body) { body in
            var derivation = body["keyDerivation"] as? [String: Any] ?? [:]
            switch mode {
            case "clear": body["encrypted"] = false
            case "weaker": derivation["logRounds"] = 1
            // The same N × r × p as the tests' cost (2⁴ × 8 × 1) in a quarter of the memory.
            case "less memory":
              derivation["logRounds"] = 2
              derivation["parallelism"] = 4
            case "older":
              derivation["version"] = 1
              derivation["salt"] = ""
            // Version 3 is a clear account's: the server's hash of the password reproduced.
            case "server hash": derivation["version"] = 3
            case "other salt":
              derivation["salt"] = Data(repeating: 9, count: 16).base64EncodedString()
            // Memory 8 times the device's own (within the wire's 1 GiB).
            case "costlier": derivation["logRounds"] = 7
            case "parallel": derivation["parallelism"] = 16
            default: derivation["logRounds"] = 30
            }
            body["keyDerivation"] = derivation
          }
          return response
        }
        let a = try Self.device("a", root: root, transport: transport)
        try await a.account.createAccount()
        try await a.account.signIn()
        try await a.store.write { _ = $0.createNote(text: "CanaryParameters") }
        try await a.account.sync()
        let password = Array(EncryptedSyncTests.password.utf8)
        func sentPassword() -> Bool {
          transport.requests.contains { $0.body.firstRange(of: password) != nil }
        }
        func signedIn() -> Int { transport.requests.filter { $0.path == "/v1/sessions" }.count }
        func asked() -> Int {
          transport.requests.filter { $0.path == "/v1/sessions/parameters" }.count
        }

        let modes = [
          "clear", "weaker", "less memory", "older", "server hash", "other salt", "costlier",
          "parallel", "malformed",
        ]
        for mode in modes {
          lie.withLock { $0 = mode }
          // The device that signed in (its state file pins the derivation it used) does not ask:
          // it signs in with the pinned derivation, whatever the server would say.
          let askedBefore = asked()
          try await a.account.signIn()
          #expect(asked() == askedBefore, "\(mode)")
          let before = signedIn()
          // A new device that knows only the name and the password.
          let fresh = try Self.device(
            "new-\(mode)", root: root, transport: transport, required: false)
          defer { fresh.store.close() }
          switch mode {
          case "clear":
            // A lie it cannot catch — but what it sends is the secret, as for the truth: the
            // server learns nothing it would not have learnt, and the notes stay sealed.
            try await fresh.account.signIn()
            #expect(try fresh.store.search("CanaryParameters").isEmpty)
          case "other salt":
            // Stretched at the device's own bounds under a salt the server chose: the server
            // gets a secret it cannot use (it is not the account's), at full cost per guess.
            await #expect(throws: APIError.self) { try await fresh.account.signIn() }
            #expect(signedIn() == before + 1)
          default:
            // Refused before anything is stretched or sent.
            await #expect(throws: (any Error).self, "\(mode)") {
              try await fresh.account.signIn()
            }
            #expect(signedIn() == before, "\(mode)")
          }
        }
        // Whatever the lie, no request carried the password.
        #expect(!sentPassword())
        lie.withLock { $0 = nil }
        try await a.account.signIn()
        #expect(try await a.account.sync().inSync)
      }
    }
  }

  @Test(
    "A server that names a public key of its own and a rotation due gets nothing sealed to it: the device checks what its devices vouched for before it seals, refuses an older epoch than it has seen, and its notes stay readable to the account only",
    arguments: Backend.allCases)
  func keyTheft(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      try await Self.withServer(backend, root: root) { server, baseURL in
        let attacker = Curve25519.KeyAgreement.PrivateKey()
        let attackerKey = attacker.publicKey.rawRepresentation.base64EncodedString()
        let lie = Mutex<String?>(nil)
        let transport = TamperingTransport(baseURL: baseURL) { request, response in
          guard request.method == "GET", request.path.hasPrefix("/v1/accounts/current/keys"),
            let mode = lie.withLock({ $0 })
          else { return response }
          var response = response
          response.body = Self.rewritten(response.body) { body in
            switch mode {
            case "publicKey":
              body["passwordPublicKey"] = attackerKey
              body["rotationDue"] = true
            case "unvouched":
              body["passwordPublicKey"] = attackerKey
              body["rotationDue"] = true
              body.removeValue(forKey: "keysAuthenticator")
            default:
              body["epoch"] = 1
              body["links"] = [String]()
            }
          }
          return response
        }
        let a = try Self.device("a", root: root, transport: transport)
        try await a.account.createAccount()
        try await a.account.signIn()
        let note = try await a.store.write { $0.createNote(text: "CanarySecret") }
        try await a.account.sync()

        // The server names its own public key and says a rotation is due.
        lie.withLock { $0 = "publicKey" }
        await #expect(throws: AccountKeyError.self) { try await a.account.sync() }
        lie.withLock { $0 = "unvouched" }
        await #expect(throws: AccountKeyError.self) { try await a.account.sync() }
        // Nothing was sealed to any key: no rotation left the device.
        #expect(!transport.requests.contains { $0.method == "PUT" && $0.path.contains("keys") })

        // An honest rotation moves the account to epoch 2; a server that then says epoch 1
        // is refused.
        lie.withLock { $0 = nil }
        try await a.store.write { $0.deleteNote(note) }
        try await a.account.sync()
        let number = try #require(try await server.store.account(named: "ann")).number
        #expect(try await server.store.encryption(of: number)?.epoch == 2)
        lie.withLock { $0 = "olderEpoch" }
        await #expect(throws: AccountKeyError.self) {
          try await a.store.write { _ = $0.createNote(text: "after") }
          try await a.account.sync()
        }
        lie.withLock { $0 = nil }
        #expect(try await a.account.sync().inSync)
      }
    }
  }

  @Test(
    "A deletion or an attachment list that no device made is set aside by every device, which syncs on, whether it carries no authenticator, one copied from another event, or one of its own; the note stays on every device, a new device stores none of it, and an honest server refuses such an event outright",
    arguments: Backend.allCases)
  func forgedEvents(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      try await Self.withServer(backend, root: root) { server, baseURL in
        let a = try Self.device("a", root: root, transport: HTTPTransport(baseURL: baseURL))
        try await a.account.createAccount()
        try await a.account.signIn()
        let note = try await a.store.write {
          $0.createNote(text: "CanaryKept", tags: ["Paris"])
        }
        try await a.account.sync()
        let b = try Self.device("b", root: root, transport: HTTPTransport(baseURL: baseURL))
        try await b.account.signIn()
        try await b.account.sync()
        #expect(try b.store.note(note)?.text == "CanaryKept")

        let number = try #require(try await server.store.account(named: "ann")).number
        let intruder = ReplicaID(Identifier(high: 0xBAD, low: 0xBAD))
        var clock: UInt64 = 1
        func stamp() -> Stamp {
          clock += 1
          return Stamp(
            time: HybridTime(
              milliseconds: UInt64(Date().timeIntervalSince1970 * 1000), counter: UInt16(clock)),
            replica: intruder)
        }
        // A device's own authenticator, lifted from the note's creation as the server holds it.
        let page = try await server.store.sync(
          account: number, pushing: [], after: 0, limit: 100, maximumBytes: 1 << 20,
          retention: (nil, 0))
        let lifted = try #require(
          page.events.first { $0.change.kind == .noteCreated }?.authenticator)
        let forgeries: [(String, Event)] = [
          ("no authenticator", Event(stamp: stamp(), change: .noteDeleted(note))),
          (
            "a lifted authenticator",
            Event(stamp: stamp(), change: .noteDeleted(note)).withAuthenticator(lifted)
          ),
          (
            "one of its own",
            Event(stamp: stamp(), change: .noteDeleted(note))
              .withAuthenticator([UInt8](repeating: 7, count: 16))
          ),
          (
            "an attachment list",
            Event(stamp: stamp(), change: .attachmentsSet(note, attachments: []))
          ),
        ]
        for (what, forged) in forgeries {
          // The honest server refuses it from any client…
          let caller = APICaller(transport: HTTPTransport(baseURL: baseURL))
          let token = try await caller.signIn(
            Credentials(
              username: "ann",
              password: try await caller.passwordKeys(
                username: "ann", password: EncryptedSyncTests.password
              ).signInSecret)
          ).get().token
          let pushed = await caller.sync(
            SyncPush(cursor: 0, events: [forged]), token: token)
          // Without an authenticator it is no sealed event; with one, the push lacks the
          // devices' signature.
          if forged.authenticator == nil {
            #expect(pushed.status == 400, "\(what): \(pushed)")
          } else {
            #expect(pushed.status == 403 && pushed.error?.body?.code == .unsignedWrite, "\(what)")
          }
          // …and a lying one stores it anyway: every device sets it aside, applies none of it,
          // and syncs on, in sync with the server's event set.
          _ = try await server.store.sync(
            account: number, pushing: [forged], after: 0, limit: 1, maximumBytes: 1 << 20,
            retention: (nil, 0))
          for device in [a, b] {
            let report = try await device.account.sync()
            #expect(report.quarantined == 1 && report.inSync, "\(what): \(report)")
            #expect(try device.store.note(note)?.text == "CanaryKept", "\(what)")
          }
        }
        // Set aside once: the next sync fetches none of them again, and is in sync.
        for device in [a, b] {
          let again = try await device.account.sync()
          #expect(again.quarantined == 0 && again.inSync && again.fetched == 0, "\(again)")
          let kept = try #require(await device.account.state.quarantined)
          #expect(kept.map(\.id).sorted() == forgeries.map(\.1.stamp.hex).sorted())
          #expect(try await device.account.checkSync().inSync)
        }
        // A new device sets them aside too, and stores nothing of the forgeries — nor the
        // note's events, which the lying server erased for a deletion no device made and
        // serves redacted: it has no evidence of the deletion, and reports them.
        let noteEvents = try a.store.events(after: 0).filter {
          $0.event.change.noteID == note && $0.event.stamp.replica != intruder
        }
        let c = try Self.device("c", root: root, transport: HTTPTransport(baseURL: baseURL))
        try await c.account.signIn()
        let report = try await c.account.sync()
        #expect(
          report.quarantined == forgeries.count + noteEvents.count && report.inSync, "\(report)")
        #expect(try c.store.events(after: 0).allSatisfy { $0.event.stamp.replica != intruder })
      }
    }
  }
}

extension LyingServerTests {
  /// The authenticator's field as an event's `extra` ends with it: field 19, 16 bytes.
  static let authenticatorFieldBytes = 3 + 16

  @Test(
    "A server that swaps sealed values between events, or strips an event's authenticator, has them set aside by a new device, which stores none of it and takes the true events when they are served; one that replays or reorders a page changes nothing; one that drops an event from a page is caught by the digests and repaired",
    arguments: Backend.allCases)
  func tamperedPages(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      try await Self.withServer(backend, root: root) { _, baseURL in
        let a = try Self.device("a", root: root, transport: HTTPTransport(baseURL: baseURL))
        try await a.account.createAccount()
        try await a.account.signIn()
        let note = try await a.store.write { $0.createNote(text: "first") }
        try await a.store.write { $0.setText("second", of: note) }
        try await a.store.write { $0.setText("third", of: note) }
        try await a.account.sync()

        for mode in ["swap", "strip", "replay", "reorder", "drop"] {
          let honest = Mutex(false)
          let transport = TamperingTransport(baseURL: baseURL) { request, response in
            guard request.path == "/v1/sync", response.status == 200,
              !honest.withLock({ $0 })
            else { return response }
            var response = response
            response.body = Self.rewritten(response.body) { page in
              guard var events = page["events"] as? [[String: Any]], !events.isEmpty else {
                return
              }
              let texts = events.indices.filter { events[$0]["kind"] as? String == "textSet" }
              switch mode {
              case "swap":
                guard texts.count >= 2 else { return }
                let first = events[texts[0]]["extra"]
                events[texts[0]]["extra"] = events[texts[1]]["extra"]
                events[texts[1]]["extra"] = first
              case "strip":
                guard let index = texts.last, let extra = events[index]["extra"] as? String,
                  let bytes = Data(base64Encoded: extra)
                else { return }
                events[index]["extra"] =
                  bytes.dropLast(Self.authenticatorFieldBytes).base64EncodedString()
              case "replay": events += events
              case "reorder": events.reverse()
              default:
                guard let index = texts.last else { return }
                events.remove(at: index)
              }
              page["events"] = events
            }
            return response
          }
          let device = try Self.device(
            "c-\(mode)", root: root, transport: transport, encoding: .json)
          defer { device.store.close() }
          try await device.account.signIn()
          switch mode {
          case "swap", "strip":
            // Set aside, never stored: of the three text changes, those the server changed are
            // not in the store.
            func texts() throws -> Int {
              try device.store.events(after: 0).filter { $0.event.change.kind == .textSet }.count
            }
            let report = try await device.account.sync()
            #expect(report.quarantined == (mode == "swap" ? 2 : 1), "\(mode): \(report)")
            #expect(try texts() == 3 - report.quarantined, "\(mode)")
            #expect(report.inSync, "\(mode): \(report)")
            // Answered honestly, the next sync asks for them again and takes them.
            honest.withLock { $0 = true }
            let again = try await device.account.sync()
            #expect(again.inSync, "\(mode): \(again)")
            #expect(try texts() == 3, "\(mode)")
            #expect(try device.store.note(note)?.text == "third", "\(mode)")
            #expect(await device.account.state.quarantined?.isEmpty != false, "\(mode)")
          case "drop":
            let report = try await device.account.sync()
            #expect(report.fetched >= 1 && report.inSync, "\(mode): \(report)")
            #expect(try device.store.note(note)?.text == "third")
          default:
            let report = try await device.account.sync()
            #expect(report.inSync, "\(mode): \(report)")
            #expect(try device.store.note(note)?.text == "third")
            #expect(try Digests(device.store).state == Digests(a.store).state, "\(mode)")
          }
        }
      }
    }
  }
}

@Suite("Shredding wedges no device")
struct ShreddingWedgeTests {
  @Test(
    "A note tagged, untagged and deleted on an encrypted account: every event of it is redacted on the server, a device that held it and a new device both sync on, and their own edits leave their outboxes",
    arguments: Backend.allCases)
  func untaggedThenDeleted(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      try await LyingServerTests.withServer(backend, root: root) { server, baseURL in
        try await Self.untaggedThenDeleted(server: server, baseURL: baseURL, root: root)
      }
    }
  }

  static func untaggedThenDeleted(server: SyncServer, baseURL: String, root: String)
    async throws
  {
    let a = try LyingServerTests.device(
      "a", root: root, transport: HTTPTransport(baseURL: baseURL))
    try await a.account.createAccount()
    try await a.account.signIn()
    let b = try LyingServerTests.device(
      "b", root: root, transport: HTTPTransport(baseURL: baseURL))
    try await b.account.signIn()
    let note = try await a.store.write { $0.createNote(text: "Doomed", tags: ["Paris"]) }
    try await a.account.sync()
    try await b.account.sync()
    try await a.store.write { $0.setTags([], of: note) }
    try await a.account.sync()
    try await a.store.write { $0.deleteNote(note) }
    try await a.account.sync()
    // Every event of the note is erased where the server keeps it, the removal included.
    let number = try #require(try await server.store.account(named: "ann")).number
    let page = try await server.store.sync(
      account: number, pushing: [], after: 0, limit: 100, maximumBytes: 1 << 20,
      retention: (nil, 0))
    let ofNote = page.events.filter { $0.change.noteID == note }
    #expect(ofNote.contains { $0.change.kind == .tagRemoved })
    #expect(
      ofNote.allSatisfy { $0.isRedacted || $0.change.kind == .noteDeleted }, "\(ofNote)")
    // The device that held the note, and a new one, sync on with edits of their own.
    let kept = try await b.store.write { $0.createNote(text: "from b") }
    #expect(try await b.account.sync().inSync)
    #expect(try b.store.note(note) == nil)
    let c = try LyingServerTests.device(
      "c", root: root, transport: HTTPTransport(baseURL: baseURL))
    try await c.account.signIn()
    try await c.store.write { _ = $0.createNote(text: "from c") }
    #expect(try await c.account.sync().inSync)
    #expect(try c.store.note(kept)?.text == "from b")
    #expect(try c.store.outboxCount() == 0)
    #expect(try b.store.outboxCount() == 0)
    #expect(try c.store.verify().isEmpty)
  }
}
