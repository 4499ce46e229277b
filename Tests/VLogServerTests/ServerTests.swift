import Foundation
import ServerTestSupport
import Synchronization
import Testing
import VLogServerTesting
import VLogSync
import VLogTesting

@testable import VLog
@testable import VLogServer

/// Records every exchange and checks each response against the OpenAPI document.
final class CheckedTransport: Transport {
  let base: any Transport
  var server: String { base.server }
  let validator: OpenAPIValidator
  private let log = Mutex<(seen: Set<String>, problems: [String], requests: [TransportRequest])>(
    ([], [], []))

  init(_ base: any Transport) throws {
    self.base = base
    validator = try OpenAPIValidator()
  }

  func send(_ request: TransportRequest) async throws -> TransportResponse {
    let response = try await base.send(request)
    let (key, problems) = validator.check(request, response)
    log.withLock {
      $0.seen.insert(key)
      $0.problems += problems
      $0.requests.append(request)
    }
    return response
  }

  func open(_ request: TransportRequest) async throws -> TransportStream {
    let stream = try await base.open(request)
    record(request, stream.response)
    return stream
  }

  /// Checks an exchange made outside the transport (over a raw socket, say).
  func record(_ request: TransportRequest, _ response: TransportResponse) {
    let (key, problems) = validator.check(request, response)
    log.withLock {
      $0.seen.insert(key)
      $0.problems += problems
      $0.requests.append(request)
    }
  }

  var seen: Set<String> { log.withLock { $0.seen } }
  var problems: [String] { log.withLock { $0.problems } }
  func count(of path: String) -> Int {
    log.withLock { $0.requests.filter { $0.path == path }.count }
  }
}

/// Sends a request with a JSON body written by hand.
func post(
  _ transport: any Transport, _ path: String, _ json: String, token: String? = nil,
  method: String = "POST"
) async throws -> TransportResponse {
  var headers = ["content-type": "application/json"]
  if let token { headers["authorization"] = "Bearer \(token)" }
  return try await transport.send(
    TransportRequest(method: method, path: path, headers: headers, body: Array(json.utf8)))
}

/// The error body of a response.
func errorBody(_ response: TransportResponse) throws -> ErrorBody {
  try JSONDecoder().decode(ErrorBody.self, from: Data(response.body))
}

/// Creates an account and signs in; returns the token.
func signUp(_ caller: APICaller, _ name: String, password: String = "correct horse battery")
  async throws
  -> String
{
  let credentials = Credentials(username: name, password: password)
  _ = try await caller.createAccount(credentials).get()
  return try await caller.signIn(credentials).get().token
}

/// Sends `request`'s head announcing ten bytes more than its body holds, sends the body, and
/// reads the answer the server gives while it waits for the rest, over a raw socket.
func stalledExchange(port: Int, _ request: TransportRequest) async throws -> TransportResponse {
  var head = "\(request.method) \(request.path) HTTP/1.1\r\nHost: localhost\r\n"
  for (name, value) in request.headers { head += "\(name): \(value)\r\n" }
  head += "Content-Length: \(request.body.count + 10)\r\n\r\n"
  return try await rawExchange(port: port, head + String(decoding: request.body, as: UTF8.self))
}

/// Sends `text` on a new connection and reads the answer as a response.
func rawExchange(port: Int, _ text: String) async throws -> TransportResponse {
  let connection = try RawConnection(port: port)
  connection.send(text)
  let raw = await offPool { connection.receive(waiting: 10) }
  guard let split = raw.range(of: "\r\n\r\n") else {
    return TransportResponse(status: 0, body: Array(raw.utf8))
  }
  let lines = raw[..<split.lowerBound].split(separator: "\r\n")
  let status = lines.first.flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") } ?? 0
  var headers: [String: String] = [:]
  for line in lines.dropFirst() {
    guard let colon = line.firstIndex(of: ":") else { continue }
    headers[line[..<colon].lowercased()] = line[line.index(after: colon)...]
      .trimmingCharacters(in: .whitespaces)
  }
  return TransportResponse(
    status: status, headers: headers, body: Array(raw[split.upperBound...].utf8))
}

@Suite("Sync server")
struct ServerTests {
  @Test(
    "Every documented response is produced by the live server and matches the document",
    arguments: Backend.allCases)
  func openAPITour(backend: Backend) async throws {
    // One password check at a time, each slow enough to be caught in the act: a second at
    // once is refused with 429. Bodies must arrive within 300 ms.
    let configuration = SyncServer.Configuration(
      maximumBodyBytes: 64 << 10, maximumBlobBytes: 64 << 10,
      passwordCost: PasswordCost(logRounds: 14), durability: .noSync,
      concurrentPasswordChecks: 1, bodyTimeout: .milliseconds(300),
      maximumLiveChannelsPerAccount: 1)
    try await withServer(backend: backend, configuration: configuration) { server in
      let problemsAndMissing = try await withLiveServer(server) { baseURL in
        let transport = try CheckedTransport(HTTPTransport(baseURL: baseURL))
        let caller = APICaller(transport: transport)
        let big = String(repeating: "x", count: 70 << 10)
        _ = try await transport.send(TransportRequest(method: "GET", path: "/v1/openapi.json"))
        // Operations (503 of the health check: in "Readiness follows the database"). A
        // readiness probe is asked again while it says 503: the database may be refusing a
        // connection for a moment while the rest of the suite holds many.
        for _ in 0..<100 {
          let health = try await transport.send(TransportRequest(method: "GET", path: "/v1/health"))
          if health.status != 503 { break }
          try await Task.sleep(for: .milliseconds(100))
        }
        _ = try await transport.send(TransportRequest(method: "GET", path: "/v1/health/live"))
        // Accounts.
        let token = try await signUp(caller, "ann")
        _ = await caller.createAccount(Credentials(username: "ann", password: "other password"))
        _ = await caller.createAccount(
          Credentials(username: "a n", password: "correct horse battery"))
        _ = try await post(transport, "/v1/accounts", big)
        // Sessions.
        _ = await caller.signIn(Credentials(username: "ann", password: "wrong password"))
        _ = try await post(transport, "/v1/sessions", "{")
        _ = try await post(transport, "/v1/sessions", big)
        // Sync.
        // An end-to-end encrypted account's keys: 404 for an account that is not encrypted,
        // 401 without a good token, 200 for an encrypted one; its keys refused when malformed.
        #expect(await caller.accountKeys(token: token).status == 404)
        #expect(await caller.accountKeys(token: "nonsense").status == 401)
        let encrypted = try NewEncryptedAccount(
          username: "encrypted", password: "correct horse battery", cost: .testing,
          random: SystemRandom.bytes)
        _ = try await caller.createAccount(encrypted.credentials, keys: encrypted.serverKeys)
          .get()
        let encryptedToken = try await caller.signIn(encrypted.credentials).get().token
        #expect(try await caller.accountKeys(token: encryptedToken).get().epoch == 1)
        var malformed = encrypted.serverKeys
        malformed.sealedForPassword = "AAAA"
        let refused = await caller.createAccount(
          Credentials(username: "malformed", password: "correct horse battery"), keys: malformed)
        #expect(refused.status == 400 && refused.error?.body?.field == "keys.sealedForPassword")
        let nullKeys = try await post(
          transport, "/v1/accounts",
          #"{"username":"nullkeys","password":"correct horse battery","keys":null}"#)
        #expect(try nullKeys.status == 400 && errorBody(nullKeys).field == "keys")
        // A key derivation of null is not one left out: refused, as the document says.
        var keysObject = try #require(
          try JSONSerialization.jsonObject(with: JSONEncoder().encode(encrypted.serverKeys))
            as? [String: Any])
        keysObject["keyDerivation"] = NSNull()
        let nullDerivation = try await post(
          transport, "/v1/accounts",
          String(
            decoding: try JSONSerialization.data(
              withJSONObject: [
                "username": "nullderivation", "password": "correct horse battery",
                "keys": keysObject,
              ]), as: UTF8.self))
        #expect(nullDerivation.status == 400, "\(nullDerivation)")
        _ = await caller.send(
          QueryRequest<AccountKeysBody>(path: "/v1/accounts/current/keys?since=x"),
          token: encryptedToken)
        // Keys of notes: stored, looked up, listed; refused at another epoch, malformed, too
        // large, for an account that is not encrypted, without a good token.
        let keyedNote = Identifier(high: 9, low: 1)
        let wrapped = try encrypted.keys.wrap(
          try ObjectKey(random: SystemRandom.bytes), of: keyedNote)
        let objectKeys = ObjectKeys(epoch: 1, keys: [keyedNote: wrapped])
        // Unsigned by the account's devices, a write to its keys is refused.
        let unsigned = await caller.storeObjectKeys(objectKeys, token: encryptedToken)
        #expect(unsigned.status == 403 && unsigned.error?.body?.code == .unsignedWrite)
        let signed = caller.signingWrites(with: encrypted.keys.requestSigningKey)
        #expect(
          try await signed.storeObjectKeys(objectKeys, token: encryptedToken).get().stored == 1)
        #expect(
          await signed.storeObjectKeys(ObjectKeys(epoch: 2, keys: [:]), token: encryptedToken)
            .status == 409)
        for failing in [token, "nonsense"] {
          _ = await caller.storeObjectKeys(objectKeys, token: failing)
          _ = await caller.lookUpObjectKeys([keyedNote], token: failing)
          _ = await caller.listObjectKeys(token: failing)
        }
        for path in ["/v1/object-keys", "/v1/object-keys/lookup"] {
          _ = try await post(
            transport, path, #"{"epoch":1,"keys":{"x":"y"},"objects":[1]}"#,
            token: encryptedToken)
          _ = try await post(transport, path, big, token: encryptedToken)
        }
        #expect(
          try await caller.lookUpObjectKeys([keyedNote], token: encryptedToken).get().keys.count
            == 1)
        #expect(try await caller.listObjectKeys(token: encryptedToken).get().keys.count == 1)
        _ = await caller.send(
          QueryRequest<ObjectKeysPage>(path: "/v1/object-keys?after=x"), token: encryptedToken)
        // The content key's rotation: refused at another epoch, malformed, too large, for an
        // account that is not encrypted, without a good token; then taken.
        let (nextKeys, link) = try encrypted.keys.rotated(random: SystemRandom.bytes)
        func rotation(from epoch: UInt64) throws -> KeyRotation {
          KeyRotation(
            epoch: epoch,
            sealedForPassword: try nextKeys.sealed(
              to: try NewAccountKeys.bytes(encrypted.serverKeys.passwordPublicKey, "", count: 32),
              username: "encrypted"),
            sealedForRecovery: try nextKeys.sealed(
              to: try NewAccountKeys.bytes(encrypted.serverKeys.recoveryPublicKey, "", count: 32),
              username: "encrypted"),
            link: link,
            keys: [
              keyedNote: try nextKeys.wrap(
                try encrypted.keys.unwrap(wrapped, of: keyedNote), of: keyedNote)
            ], keysAuthenticator: [UInt8](repeating: 0, count: 32))
        }
        let stale = try rotation(from: 2)
        #expect(await signed.rotateKeys(stale, token: encryptedToken).status == 409)
        #expect(await caller.rotateKeys(try rotation(from: 1), token: encryptedToken).status == 403)
        _ = await caller.rotateKeys(stale, token: token)
        _ = await caller.rotateKeys(stale, token: "nonsense")
        _ = try await post(
          transport, "/v1/accounts/current/keys", #"{"epoch":1}"#, token: encryptedToken,
          method: "PUT")
        _ = try await post(
          transport, "/v1/accounts/current/keys", big, token: encryptedToken, method: "PUT")
        #expect(
          try await signed.rotateKeys(try rotation(from: 1), token: encryptedToken).get().epoch
            == 2)
        let event = Event(
          stamp: Stamp(
            time: HybridTime(milliseconds: 1_767_225_600_000, counter: 0),
            replica: ReplicaID(Identifier(high: 1, low: 2))),
          change: .textSet(NoteID(Identifier(high: 3, low: 4)), text: "hello"))
        // A sealed event pushed to the encrypted account without its devices' signature.
        let sealed = try EventSealer(keys: nextKeys).seal(
          event, objectKey: { _ in try ObjectKey(random: SystemRandom.bytes) })
        let unsignedPush = await caller.sync(
          SyncPush(cursor: 0, events: [sealed]), token: encryptedToken)
        #expect(unsignedPush.status == 403 && unsignedPush.error?.body?.code == .unsignedWrite)
        let pushed = try await caller.sync(SyncPush(cursor: 0, events: []), token: token).get()
        #expect(pushed.events.isEmpty)
        let response = try await caller.sync(SyncPush(cursor: 0, events: [event]), token: token)
          .get()
        #expect(response.stored == 1 && response.cursor == 1 && response.events.isEmpty)
        let other = try await caller.sync(SyncPush(cursor: 0, events: []), token: token).get()
        #expect(other.events == [event])
        // The same exchange in the binary encoding.
        let binary = try await caller.sync(
          SyncPush(cursor: 0, events: [event]), encoding: .binary, token: token
        ).get()
        #expect(binary.stored == 0 && binary.cursor == 1 && binary.events.isEmpty)
        let binaryOther = try await caller.sync(
          SyncPush(cursor: 0, events: []), encoding: .binary, token: token
        ).get()
        #expect(binaryOther.events == other.events && binaryOther.cursor == other.cursor)
        #expect(binaryOther.eventSetDigest == other.eventSetDigest && !binaryOther.more)
        // Another event under the id held: 409, naming it.
        let twin = Event(
          stamp: event.stamp,
          change: .archivedSet(NoteID(Identifier(high: 1, low: 1)), archived: true))
        let collision = await caller.sync(SyncPush(cursor: 0, events: [twin]), token: token)
        #expect(collision.status == 409)
        #expect(collision.error?.body?.events == [event.stamp.hex], "\(collision)")
        _ = try await transport.send(
          TransportRequest(
            method: "POST", path: "/v1/sync",
            headers: ["authorization": "Bearer \(token)", "content-type": "text/plain"],
            body: Array("cursor=0".utf8)))
        _ = try await post(transport, "/v1/sync", #"{"cursor":0}"#, token: token)
        _ = try await post(transport, "/v1/sync", #"{"cursor":0,"events":[]}"#, token: "nonsense")
        _ = try await post(transport, "/v1/sync", big, token: token)
        // Repair.
        let comparison = try await caller.compare(EventSetBuckets(), token: token).get()
        #expect(comparison.ids.values.joined().map { $0 } == [event.stamp] && comparison.complete)
        #expect(try await caller.fetch([event.stamp], token: token).get() == [event])
        // The live channel: open, saying the head (200, an event stream); refused past the
        // account's cap (429: the tour's is one) and without a good token (401).
        let live = TransportRequest(
          method: "GET", path: "/v1/live",
          headers: ["authorization": "Bearer \(token)", "accept": "text/event-stream"])
        let channel = try await transport.open(live)
        var parser = LiveStreamParser()
        var heard: [LiveMessage] = []
        for try await chunk in channel.chunks {
          heard += try parser.read(chunk)
          if !heard.isEmpty { break }
        }
        #expect(heard.first == .head(1))
        #expect(try await transport.open(live).response.status == 429)
        var stranger = live
        stranger.headers["authorization"] = "Bearer nonsense"
        #expect(try await transport.open(stranger).response.status == 401)
        // In HTTP/1.0, which has no chunks to stream in (505).
        let oldVersion = try await rawExchange(
          port: try #require(baseURL.split(separator: ":").last.flatMap { Int($0) }),
          "GET /v1/live HTTP/1.0\r\nAuthorization: Bearer \(token)\r\n\r\n")
        #expect(oldVersion.status == 505)
        transport.record(live, oldVersion)
        _ = try await post(transport, "/v1/sync/compare", #"{"buckets":["00"]}"#, token: token)
        _ = try await post(transport, "/v1/sync/compare", #"{"buckets":[]}"#, token: "nonsense")
        _ = try await post(transport, "/v1/sync/compare", big, token: token)
        _ = try await post(transport, "/v1/sync/fetch", #"{"ids":["xyz"]}"#, token: token)
        _ = try await post(transport, "/v1/sync/fetch", #"{"ids":[]}"#, token: "nonsense")
        _ = try await post(transport, "/v1/sync/fetch", big, token: token)
        // Blobs.
        let bytes: [UInt8] = Array("attachment".utf8)
        let hash = BlobHash(bytes: sha256(bytes))!
        #expect(try await caller.missingBlobs([hash], token: token).get() == [hash])
        _ = try await post(
          transport, "/v1/sync/missing-blobs", #"{"hashes":["xyz"]}"#, token: token)
        _ = try await post(
          transport, "/v1/sync/missing-blobs", #"{"hashes":[]}"#, token: "nonsense")
        _ = try await post(transport, "/v1/sync/missing-blobs", big, token: token)
        _ = try await caller.putBlob(bytes, hash: hash, token: token).get()
        #expect(try await caller.missingBlobs([hash], token: token).get() == [])
        _ = try await caller.putBlob(bytes, hash: hash, token: token).get()
        _ = await caller.putBlob(Array("other".utf8), hash: hash, token: token)
        _ = await caller.putBlob(bytes, hash: hash, token: "nonsense")
        // An encrypted account's upload without its devices' signature (403).
        let unsignedUpload = await caller.putBlob(bytes, hash: hash, token: encryptedToken)
        #expect(unsignedUpload.status == 403 && unsignedUpload.error?.body?.code == .unsignedWrite)
        _ = await caller.putBlob(Array(repeating: 1, count: 70 << 10), hash: hash, token: token)
        #expect(try await caller.blob(hash, token: token).get() == bytes)
        _ = try await transport.send(
          TransportRequest(
            method: "GET", path: "/v1/blobs/nothex", headers: ["authorization": "Bearer \(token)"]))
        _ = await caller.blob(hash, token: "nonsense")
        _ = await caller.blob(BlobHash(bytes: sha256([1]))!, token: token)
        // HEAD: GET's answers without their bodies.
        for (path, token) in [
          ("/v1/openapi.json", nil), ("/v1/blobs/\(hash)", token), ("/v1/blobs/nothex", token),
          ("/v1/blobs/\(hash)", "nonsense"), ("/v1/blobs/\(BlobHash(bytes: sha256([1]))!)", token),
        ] {
          _ = try await transport.send(
            TransportRequest(
              method: "HEAD", path: path,
              headers: token.map { ["authorization": "Bearer \($0)"] } ?? [:]))
        }
        // A method no path answers: 405 and Allow, as the document's paths say.
        for path in [
          "/v1/openapi.json", "/v1/accounts", "/v1/sessions", "/v1/sessions/current", "/v1/sync",
          "/v1/sync/compare", "/v1/sync/fetch", "/v1/sync/missing-blobs", "/v1/blobs/\(hash)",
          "/v1/accounts/current",
          "/v1/accounts/current/password", "/v1/sessions/0123456789abcdef", "/v1/live",
        ] {
          let response = try await transport.send(TransportRequest(method: "PATCH", path: path))
          #expect(response.status == 405, "\(path)")
        }
        // Bodies that stop arriving: 408 on every endpoint that takes one.
        let port = try #require(baseURL.split(separator: ":").last.flatMap { Int($0) })
        for (method, path) in [
          ("POST", "/v1/accounts"), ("POST", "/v1/sessions"), ("POST", "/v1/sync"),
          ("POST", "/v1/sync/compare"), ("POST", "/v1/sync/fetch"),
          ("POST", "/v1/sync/missing-blobs"), ("PUT", "/v1/blobs/\(hash)"),
          ("PUT", "/v1/accounts/current/password"), ("DELETE", "/v1/accounts/current"),
          ("PUT", "/v1/accounts/current/keys"), ("POST", "/v1/object-keys"),
          ("POST", "/v1/object-keys/lookup"), ("POST", "/v1/accounts/recovery-keys"),
          ("POST", "/v1/accounts/recover"), ("POST", "/v1/sessions/parameters"),
        ] {
          // The keys' endpoints read a body only for an encrypted account.
          let sender = path.contains("keys") ? encryptedToken : token
          let request = TransportRequest(
            method: method, path: path,
            headers: [
              "authorization": "Bearer \(sender)",
              "content-type": method == "PUT" ? "application/octet-stream" : "application/json",
            ],
            body: Array("{".utf8))
          let response = try await stalledExchange(port: port, request)
          #expect(response.status == 408, "\(method) \(path)")
          transport.record(request, response)
        }
        // Recovery of an encrypted account: its sealed keys for the recovery key's secret
        // (200), refused for a wrong one (401) or a malformed or too large body (400, 413);
        // the recovery refused at another epoch (409), then taken (204); both refused after
        // three failed recoveries for the name, recovery's own budget (429).
        let lost = try NewEncryptedAccount(
          username: "lost", password: "correct horse battery", cost: .testing,
          random: SystemRandom.bytes)
        _ = try await caller.createAccount(lost.credentials, keys: lost.serverKeys).get()
        let recoverySecret = try lost.recoveryKey.keys().signInSecret
        let recovery = RecoveryCredentials(username: "lost", recoverySecret: recoverySecret)
        let lostKeys = try await caller.recoveryKeys(recovery).get()
        #expect(lostKeys.epoch == 1)
        let newPasswordKeys = try PasswordKeys(
          username: "lost", password: "a new password",
          derivation: .new(cost: .testing, random: SystemRandom.bytes))
        func recoveryBody(epoch: UInt64) throws -> AccountRecovery {
          AccountRecovery(
            credentials: recovery, newPassword: newPasswordKeys.signInSecret,
            keys: PasswordSeal(
              epoch: epoch, passwordPublicKey: newPasswordKeys.publicKey,
              sealedForPassword: try lost.keys.sealed(
                to: newPasswordKeys.publicKey, username: "lost"),
              passwordAnchor: lost.keys.anchor(for: newPasswordKeys),
              keysAuthenticator: [UInt8](repeating: 0, count: 32),
              keyDerivation: newPasswordKeys.derivation))
        }
        #expect(await caller.recover(try recoveryBody(epoch: 2)).status == 409)
        _ = try await caller.recover(try recoveryBody(epoch: 1)).get()
        // The parameters of a name before signing in (200), for any name; a malformed or too
        // large body (400, 413).
        #expect(await caller.signInParameters(username: "lost").value?.encrypted == true)
        for path in [
          "/v1/accounts/recovery-keys", "/v1/accounts/recover", "/v1/sessions/parameters",
        ] {
          _ = try await post(transport, path, "{")
          _ = try await post(transport, path, big)
        }
        let wrongRecovery = RecoveryCredentials(username: "lost", recoverySecret: "not the secret")
        var wrongBody = try recoveryBody(epoch: 1)
        wrongBody.credentials = wrongRecovery
        #expect(await caller.recover(wrongBody).status == 401)
        // Recovery is limited per address: ten failures, then the next waits.
        for _ in 0..<10 { _ = await caller.recoveryKeys(wrongRecovery) }
        #expect(await caller.recoveryKeys(recovery).status == 429)
        #expect(await caller.recover(try recoveryBody(epoch: 1)).status == 429)
        // An encrypted account's password change sealed at another epoch (409).
        let encryptedPassword = try await caller.passwordKeys(
          username: "encrypted", password: "correct horse battery")
        let staleSeal = await caller.changePassword(
          PasswordChange(
            currentPassword: encryptedPassword.signInSecret, newPassword: "a new password",
            keys: try encrypted.keys.passwordSeal(
              to: newPasswordKeys,
              recoveryPublicKey: try NewAccountKeys.bytes(
                encrypted.serverKeys.recoveryPublicKey, "", count: 32),
              username: "encrypted")),
          token: encryptedToken)
        #expect(staleSeal.status == 409, "\(staleSeal)")
        // A re-keying (no link) with a wrong password (403); too many of them (429).
        var rekeying = try rotation(from: 2)
        rekeying.link = nil
        rekeying.password = "not the password"
        #expect(await signed.rotateKeys(rekeying, token: encryptedToken).status == 403)
        var tooMany = 0
        for _ in 0..<6 where await signed.rotateKeys(rekeying, token: encryptedToken).status == 429
        {
          tooMany += 1
        }
        #expect(tooMany > 0)
        // Five failed sign-ins in a row for a name: the next waits (429, Retry-After).
        _ = try await signUp(caller, "carol")
        for _ in 0..<6 {
          _ = await caller.signIn(Credentials(username: "carol", password: "wrong password"))
        }
        // Password checks past the limit at once: 429 for new accounts too.
        var refusedAtOnce = false
        for round in 0..<5 where !refusedAtOnce {
          let statuses = await withTaskGroup(of: Int?.self) { group in
            for index in 0..<4 {
              group.addTask {
                await caller.createAccount(
                  Credentials(username: "many\(round)x\(index)", password: "correct horse battery")
                ).status
              }
            }
            return await group.reduce(into: [Int?]()) { $0.append($1) }
          }
          refusedAtOnce = statuses.contains(429)
        }
        #expect(refusedAtOnce)
        // Account lifecycle: sessions listed and one revoked, a password changed, an account
        // deleted; each refused for a wrong password (403), a bad body (400), an unknown or
        // malformed session (404, 400), no token (401), a body too large (413), and after
        // five wrong passwords in a row (429).
        let dave = try await signUp(caller, "dave")
        let daveOther = try await caller.signIn(
          Credentials(username: "dave", password: "correct horse battery")
        ).get().token
        let sessions = try await caller.sessions(token: dave).get().sessions
        #expect(sessions.count == 2 && sessions.filter(\.current).count == 1)
        _ = await caller.sessions(token: "nonsense")
        let otherID = try #require(sessions.first { !$0.current }?.id)
        _ = try await caller.revokeSession(id: otherID, token: dave).get()
        _ = await caller.revokeSession(id: otherID, token: dave)
        _ = await caller.revokeSession(id: "XYZ", token: dave)
        _ = await caller.revokeSession(id: otherID, token: "nonsense")
        #expect(await caller.sessions(token: daveOther).status == 401)
        let wrongChange = PasswordChange(
          currentPassword: "wrong password", newPassword: "a new mauve ladder")
        _ = await caller.changePassword(wrongChange, token: dave)
        _ = await caller.changePassword(wrongChange, token: "nonsense")
        _ = try await post(
          transport, "/v1/accounts/current/password",
          #"{"currentPassword":"correct horse battery"}"#,
          token: dave, method: "PUT")
        _ = try await post(
          transport, "/v1/accounts/current/password", big, token: dave, method: "PUT")
        _ = try await caller.changePassword(
          PasswordChange(
            currentPassword: "correct horse battery", newPassword: "a new mauve ladder"),
          token: dave
        ).get()
        _ = await caller.deleteAccount(password: "wrong password", token: dave)
        _ = await caller.deleteAccount(password: "a new mauve ladder", token: "nonsense")
        _ = try await post(
          transport, "/v1/accounts/current", #"{"pass":"x"}"#, token: dave, method: "DELETE")
        _ = try await post(transport, "/v1/accounts/current", big, token: dave, method: "DELETE")
        for _ in 0..<4 { _ = await caller.deleteAccount(password: "wrong password", token: dave) }
        #expect(
          await caller.deleteAccount(password: "a new mauve ladder", token: dave).status == 429)
        #expect(await caller.changePassword(wrongChange, token: dave).status == 429)
        let erin = try await signUp(caller, "erin")
        _ = try await caller.deleteAccount(password: "correct horse battery", token: erin).get()
        #expect(await caller.sessions(token: erin).status == 401)
        // Sign out, then the token is refused at once.
        _ = try await caller.signOut(token: token).get()
        _ = await caller.signOut(token: token)
        // The metrics count what happened above.
        let metrics = try await transport.send(TransportRequest(method: "GET", path: "/metrics"))
        let text = String(decoding: metrics.body, as: UTF8.self)
        #expect(text.contains("vlog_http_requests_total{"))
        #expect(text.contains("path=\"/v1/sessions\""))
        let failures = text.split(separator: "\n").first {
          $0.hasPrefix("vlog_sign_in_failures_total ")
        }
        #expect(failures.flatMap { Int($0.split(separator: " ").last ?? "") } ?? 0 > 0, "\(text)")
        #expect(text.contains("vlog_http_request_duration_seconds_bucket{"))
        #expect(text.contains("vlog_events_stored_total"))
        return (
          transport.problems,
          // 503 (the database unreachable) is in "Readiness follows the database"; 500 (the
          // server or its storage failed) is what no request of a working server gets.
          transport.validator.documentedResponses.subtracting(transport.seen)
            .filter { !$0.contains(" 503 ") && !$0.contains(" 500 ") }
        )
      }
      #expect(problemsAndMissing.0.isEmpty, "\(problemsAndMissing.0)")
      #expect(problemsAndMissing.1.isEmpty, "never exercised: \(problemsAndMissing.1.sorted())")
    }
  }

  @Test("Unknown user and wrong password get the same 401", arguments: Backend.allCases)
  func wrongPassword(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      let transport = InProcessTransport(server: server)
      let caller = APICaller(transport: transport)
      _ = try await signUp(caller, "ann")
      let wrong = await caller.signIn(Credentials(username: "ann", password: "wrong password"))
      let unknown = await caller.signIn(Credentials(username: "bob", password: "wrong password"))
      #expect(wrong.status == 401 && unknown.status == 401)
      #expect(wrong.data == unknown.data)
      #expect(wrong.error?.body?.code == .invalidCredentials)
      // The right password, in another case of the user name, works.
      #expect(
        await caller.signIn(Credentials(username: "ANN", password: "correct horse battery")).status
          == 200)
    }
  }

  @Test(
    "Signing out revokes the token at once; tokens are stored only as hashes",
    arguments: Backend.allCases)
  func signOut(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      let caller = APICaller(transport: InProcessTransport(server: server))
      let token = try await signUp(caller, "ann")
      #expect(await caller.sync(SyncPush(cursor: 0, events: []), token: token).status == 200)
      _ = try await caller.signOut(token: token).get()
      let after = await caller.sync(SyncPush(cursor: 0, events: []), token: token)
      #expect(after.status == 401 && after.error?.body?.code == .unauthorized)
      // The data never holds the token itself.
      let token2 = try await caller.signIn(
        Credentials(username: "ann", password: "correct horse battery")
      )
      .get().token
      let file = try await storedBytes(of: server)
      #expect(file.range(of: Data("ann".utf8)) != nil, "the search can find what is stored")
      #expect(file.range(of: Data(token2.utf8)) == nil)
      #expect(file.range(of: Data("correct horse battery".utf8)) == nil)
    }
  }

  @Test(
    "Times in any RFC 3339 form of a whole millisecond are taken and answered canonically; finer ones are refused, saying so",
    arguments: Backend.allCases)
  func rfc3339Times(backend: Backend) async throws {
    try await withServer(
      backend: backend, clock: ManualClock(start: Date(milliseconds: 1_795_460_215_477))
    ) {
      server in
      let transport = InProcessTransport(server: server)
      let token = try await signUp(APICaller(transport: transport), "ann")
      let note = "24bd364a-c001-66ab-8fd2-03bee860ff22"
      let replica = "d7a73666-0946-1e71-5ffe-d556129c8a84"
      func push(time: String, date: String, counter: Int = 0) async throws -> TransportResponse {
        try await post(
          transport, "/v1/sync",
          #"{"cursor":0,"events":[{"counter":\#(counter),"kind":"sortDateSet","note":"\#(note)","#
            + #""replica":"\#(replica)","time":"\#(time)","date":"\#(date)"}]}"#, token: token)
      }
      // As a generated client sends them: microseconds of zeros and an offset.
      let offset = try await push(
        time: "2026-11-23T18:56:55.477000+00:00", date: "2026-03-14T10:30:00.000+01:00")
      #expect(offset.status == 200, "\(String(decoding: offset.body, as: UTF8.self))")
      #expect(try JSONDecoder().decode(SyncResponse.self, from: Data(offset.body)).stored == 1)
      // The same instant in the canonical form is the same event: not stored again.
      let canonical = try await push(
        time: "2026-11-23T18:56:55.477Z", date: "2026-03-14T09:30:00.000Z")
      #expect(try JSONDecoder().decode(SyncResponse.self, from: Data(canonical.body)).stored == 0)
      // Answered in the one canonical form.
      let page = try await post(transport, "/v1/sync", #"{"cursor":0,"events":[]}"#, token: token)
      let text = String(decoding: page.body, as: UTF8.self)
      #expect(text.contains(#""time":"2026-11-23T18:56:55.477Z""#), "\(text)")
      #expect(text.contains(#""date":"2026-03-14T09:30:00.000Z""#), "\(text)")
      #expect(!text.contains("+00:00") && !text.contains("+01:00"))
      // Finer than a millisecond would change the event's id: refused, naming the field.
      let finer = try await push(
        time: "2026-11-23T18:56:55.477001+00:00", date: "2026-03-14T09:30:00Z", counter: 1)
      #expect(finer.status == 400)
      let body = try errorBody(finer)
      #expect(body.field == "events[0].time")
      #expect(body.message.contains("finer than a millisecond"), "\(body.message)")
      let finerDate = try await push(
        time: "2026-11-23T18:56:55.478Z", date: "2026-03-14T09:30:00.0001Z", counter: 2)
      #expect(try errorBody(finerDate).field == "events[0].date")
    }
  }

  @Test(
    "An expired token makes the account sign in again once, and the sync succeeds",
    arguments: Backend.allCases)
  func expiredToken(backend: Backend) async throws {
    let serverClock = ManualClock()
    var configuration = SyncServer.Configuration.testing
    configuration.tokenLifetime = .seconds(60)
    try await withServer(backend: backend, configuration: configuration, clock: serverClock) {
      server in
      try await withTemporaryDirectory { root in
        let transport = try CheckedTransport(InProcessTransport(server: server))
        let device = try openDevice(
          0, root: root, transport: transport,
          credentials: Credentials(username: "ann", password: "correct horse battery"), seed: 1,
          clock: serverClock)
        defer { device.store.close() }
        try await device.account.createAccount()
        try await device.store.write { $0.createNote(text: "one") }
        try await device.account.sync()
        #expect(transport.count(of: "/v1/sessions") == 1)
        serverClock.advance(by: 120)
        try await device.store.write { $0.createNote(text: "two") }
        let report = try await device.account.sync()
        #expect(report.pushed > 0 && report.inSync)
        #expect(transport.count(of: "/v1/sessions") == 2)
        #expect(transport.count(of: "/v1/sync") == 3)
        #expect(transport.problems.isEmpty, "\(transport.problems)")
        // The expired token was removed at the new sign-in: one token, one session.
        #expect(try await server.store.tokens(of: 1).count == 1)
        #expect(try await device.account.sessions().count == 1)
      }
    }
  }

  @Test(
    "A wrong method answers 405 with Allow, HEAD answers like GET without a body, a sync body without a Content-Type 415",
    arguments: Backend.allCases)
  func methodsAndMediaTypes(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      let transport = InProcessTransport(server: server)
      let token = try await signUp(APICaller(transport: transport), "ann")
      let cases: [(String, String, String)] = [
        ("GET", "/v1/sync", "POST"), ("DELETE", "/v1/accounts", "POST"),
        ("PUT", "/v1/sessions/current", "DELETE"),
        ("POST", "/v1/blobs/\(String(repeating: "a", count: 64))", "GET, HEAD, PUT"),
        ("POST", "/v1/openapi.json", "GET, HEAD"),
      ]
      for (method, path, allow) in cases {
        // Before, these answered 404 as if the path did not exist.
        let response = try await transport.send(
          TransportRequest(
            method: method, path: path, headers: ["authorization": "Bearer \(token)"], body: []))
        #expect(response.status == 405, "\(method) \(path)")
        #expect(response.headers["allow"] == allow, "\(method) \(path)")
        #expect(try errorBody(response).code == .methodNotAllowed)
      }
      let missing = try await transport.send(
        TransportRequest(method: "GET", path: "/v1/nothing", headers: [:], body: []))
      #expect(missing.status == 404)

      let get = try await transport.send(
        TransportRequest(method: "GET", path: "/v1/openapi.json", headers: [:], body: []))
      let head = try await transport.send(
        TransportRequest(method: "HEAD", path: "/v1/openapi.json", headers: [:], body: []))
      #expect(head.status == 200 && head.body.isEmpty)
      #expect(head.headers["content-length"] == String(get.body.count))

      let untyped = try await transport.send(
        TransportRequest(
          method: "POST", path: "/v1/sync", headers: ["authorization": "Bearer \(token)"],
          body: Array(#"{"cursor":0,"events":[]}"#.utf8)))
      #expect(untyped.status == 415)
      #expect(try errorBody(untyped).code == .unsupportedMediaType)
    }
  }

  @Test(
    "Password checks past the concurrency limit get 429 with Retry-After, not a queue",
    arguments: Backend.allCases)
  func concurrentSignIns(backend: Backend) async throws {
    var configuration = SyncServer.Configuration.testing
    configuration.passwordCost = .standard
    configuration.concurrentPasswordChecks = 1
    try await withServer(backend: backend, configuration: configuration) { server in
      let transport = InProcessTransport(server: server)
      let statuses = try await withThrowingTaskGroup(of: (Int, String?).self) { group in
        for index in 0..<8 {
          group.addTask {
            let response = try await post(
              transport, "/v1/sessions",
              #"{"username":"user\#(index)","password":"wrong password"}"#)
            return (response.status, response.headers["retry-after"])
          }
        }
        return try await group.reduce(into: []) { $0.append($1) }
      }
      // Before, all eight hashed at once (on 2 cores, 32 of them took up to 44 s each).
      #expect(statuses.contains { $0.0 == 429 && $0.1 == "1" })
      #expect(statuses.contains { $0.0 == 401 })
      #expect(statuses.allSatisfy { $0.0 == 401 || $0.0 == 429 })
    }
  }

  @Test(
    "Repeated failed sign-ins for one name wait longer each time; a success forgets them",
    arguments: Backend.allCases)
  func failedSignInsSlowDown(backend: Backend) async throws {
    let clock = ManualClock()
    try await withServer(backend: backend, clock: clock) { server in
      let transport = InProcessTransport(server: server)
      _ = try await signUp(APICaller(transport: transport), "ann")
      let wrong = #"{"username":"ann","password":"wrong horse"}"#
      let right = #"{"username":"ann","password":"correct horse battery"}"#
      for _ in 0..<5 { #expect(try await post(transport, "/v1/sessions", wrong).status == 401) }
      let refused = try await post(transport, "/v1/sessions", right)
      #expect(refused.status == 429 && refused.headers["retry-after"] == "1")
      #expect(try errorBody(refused).code == .tooManyRequests)
      // Another name is not slowed.
      #expect(
        try await post(transport, "/v1/sessions", #"{"username":"bob","password":"whatever1"}"#)
          .status == 401)
      clock.advance(by: 1.5)
      #expect(try await post(transport, "/v1/sessions", wrong).status == 401)
      #expect(try await post(transport, "/v1/sessions", right).headers["retry-after"] == "2")
      clock.advance(by: 2.5)
      #expect(try await post(transport, "/v1/sessions", right).status == 200)
      #expect(try await post(transport, "/v1/sessions", wrong).status == 401)
      #expect(try await post(transport, "/v1/sessions", right).status == 200)
    }
  }

  @Test("Every shape of credentials gets 400 or 401, never 500", arguments: Backend.allCases)
  func credentialShapes(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      let transport = InProcessTransport(server: server)
      _ = try await signUp(APICaller(transport: transport), "ann")
      let long = String(repeating: "a", count: 600)
      let cases: [(String, Int)] = [
        (#"{"username":"","password":"correct horse battery"}"#, 400),
        (#"{"username":"   ","password":"correct horse battery"}"#, 400),
        (#"{"username":"\#(long)","password":"correct horse battery"}"#, 400),
        (#"{"username":"ann\u0000","password":"correct horse battery"}"#, 400),
        (#"{"username":"ann","password":""}"#, 400),
        (#"{"username":"ann","password":"\#(String(repeating: "p", count: 2000))"}"#, 400),
        (#"{"username":"bob","password":"correct horse battery"}"#, 401),
        (#"{"username":"ann","password":"wrong horse"}"#, 401),
      ]
      for (body, status) in cases {
        // Before, an empty name reached LMDB as an empty key and answered 500.
        let response = try await post(transport, "/v1/sessions", body)
        #expect(response.status == status, "\(body.prefix(60))")
      }
    }
  }

  @Test(
    "Malformed JSON is refused with 400 naming the field; an oversized body with 413",
    arguments: Backend.allCases)
  func malformedBodies(backend: Backend) async throws {
    var configuration = SyncServer.Configuration.testing
    configuration.maximumBodyBytes = 4096
    try await withServer(backend: backend, configuration: configuration) { server in
      let transport = InProcessTransport(server: server)
      let token = try await signUp(APICaller(transport: transport), "ann")
      let valid =
        #"{"time":"2026-01-01T00:00:00.000Z","counter":0,"replica":"d7a73666-0946-1e71-5ffe-d556129c8a84","kind":"textSet","note":"24bd364a-c001-66ab-8fd2-03bee860ff22","text":"x"}"#
      let cases: [(String, String)] = [
        (#"{"cursor":"a","events":[]}"#, "cursor"),
        (#"{"cursor":-1,"events":[]}"#, "cursor"),
        (#"{"cursor":0}"#, "events"),
        (#"{"cursor":0,"events":[],"colour":1}"#, "colour"),
        (#"{"cursor":0,"events":[\#(valid),{"kind":"textSet"}]}"#, "events[1].time"),
        (
          #"{"cursor":0,"events":[\#(valid.replacingOccurrences(of: "textSet", with: "purple"))]}"#,
          "events[0].kind"
        ),
        (
          #"{"cursor":0,"events":[\#(valid.replacingOccurrences(of: "\"x\"", with: "null"))]}"#,
          "events[0].text"
        ),
        (#"{"cursor":0,"events":[],"limit":0}"#, "limit"),
      ]
      for (body, field) in cases {
        let response = try await post(transport, "/v1/sync", body, token: token)
        #expect(response.status == 400, "\(body)")
        let error = try errorBody(response)
        #expect(error.code == .invalidField)
        #expect(error.field == field, "\(body): \(error)")
      }
      let big = try await post(
        transport, "/v1/sync",
        #"{"cursor":0,"events":[],"x":""# + String(repeating: "y", count: 5000) + "\"}",
        token: token)
      #expect(big.status == 413)
      #expect(try errorBody(big).code == .bodyTooLarge)
      // Nothing was stored by any of them.
      let page = try await APICaller(transport: transport).sync(
        SyncPush(cursor: 0, events: []), token: token
      ).get()
      #expect(page.cursor == 0 && page.events.isEmpty)
    }
  }

  @Test(
    "A device whose clock is a day ahead is told so, with the server's time, records the skew, and pushes its changes stamped again by the server's clock",
    arguments: Backend.allCases)
  func clockADayAhead(backend: Backend) async throws {
    let serverClock = ManualClock()
    try await withServer(backend: backend, clock: serverClock) { server in
      try await withTemporaryDirectory { root in
        let deviceClock = ManualClock(start: serverClock.now.addingTimeInterval(86400))
        let device = try openDevice(
          0, root: root, transport: InProcessTransport(server: server),
          credentials: Credentials(username: "ann", password: "correct horse battery"), seed: 1,
          clock: deviceClock)
        defer { device.store.close() }
        try await device.account.createAccount()
        try await device.store.write { $0.createNote(text: "from the future") }
        let report = try await device.account.sync()
        #expect(report.restamped == 2 && report.inSync)
        let state = await device.account.state
        #expect(state.clockSkewMilliseconds == -86_400_000)
        #expect(state.lastError == nil)
        #expect(try device.store.outboxCount() == 0)
        #expect(device.store.serverClockOffset == -86_400_000)
        // The state file says the same, for `vlog status`.
        let saved = try SyncAccount.loadState(from: SyncAccount.stateFile(for: device.store))
        #expect(saved?.clockSkewMilliseconds == -86_400_000)
        #expect(saved?.restamped?.events == 2)
      }
    }
  }

  @Test(
    "A device a day ahead that has synced stamps by the server's clock: its edits push at once and win over what it saw, and once its clock is set right it stamps by its own; another device agrees",
    arguments: Backend.allCases)
  func refusedOutboxRecovers(backend: Backend) async throws {
    let serverClock = ManualClock()
    try await withServer(backend: backend, clock: serverClock) { server in
      try await withTemporaryDirectory { root in
        let credentials = Credentials(username: "ann", password: "correct horse battery")
        let deviceClock = ManualClock(start: serverClock.now.addingTimeInterval(86400))
        let device = try openDevice(
          0, root: root, transport: InProcessTransport(server: server), credentials: credentials,
          seed: 1, clock: deviceClock)
        let other = try openDevice(
          1, root: root, transport: InProcessTransport(server: server), credentials: credentials,
          seed: 1, clock: serverClock)
        defer {
          device.store.close()
          other.store.close()
        }
        try await device.account.createAccount()
        // The other device writes first and syncs; the device a day ahead overwrites its text.
        let note = try await other.store.write { $0.createNote(text: "from the other device") }
        try await other.account.sync()
        try await device.account.sync()
        try await device.store.write { $0.createNote(text: "made a day ahead") }
        try await device.store.write { $0.setText("edited a day ahead", of: note) }
        let pending = try device.store.outboxCount()
        let report = try await device.account.sync()
        #expect(report.restamped == 0)
        #expect(report.pushed == pending && report.inSync)
        #expect(try device.store.outbox().isEmpty)
        // The clock is set right: the next sync measures it, and the store stamps by its own.
        deviceClock.set(serverClock.now)
        try await device.account.sync()
        #expect(device.store.serverClockOffset == 0)
        #expect(try device.store.verify().isEmpty)
        // The edit keeps its meaning: it was made after the other device's text, and wins.
        #expect(try device.store.note(note)?.text == "edited a day ahead")
        let received = try await other.account.sync()
        #expect(received.inSync)
        #expect(try Digests(other.store) == Digests(device.store))
        // Every stamp the device holds is now within a second of the server's clock.
        let latest = try device.store.events().map(\.event.stamp.time.milliseconds).max() ?? 0
        #expect(latest <= UInt64(serverClock.now.milliseconds) + 1000)
      }
    }
  }

  /// Events as JSON, each with whether the document and the server should take it.
  static let eventCases: [(String, Bool)] = {
    let head =
      #""time":"2026-01-01T00:00:00.000Z","counter":0,"replica":"00000000-0000-0000-0000-000000000001""#
    let note = #""note":"00000000-0000-0000-0000-00000000000a""#
    let attachment =
      #""attachment":{"id":"00000000-0000-0000-0000-0000000000b0","mimeType":"image/png","sha256":"\#(String(repeating: "ab", count: 32))","byteCount":3}"#
    return [
      (#"{\#(head),"kind":"textSet",\#(note),"text":"hello"}"#, true),
      (#"{\#(head),"kind":"textSet",\#(note)}"#, false),
      // Any RFC 3339 form of a whole millisecond; nothing finer.
      (
        #"{"time":"2026-01-01T01:00:00.120000+01:00","counter":1,"replica":"00000000-0000-0000-0000-000000000001","kind":"textSet",\#(note),"text":"a"}"#,
        true
      ),
      (
        #"{"time":"2026-01-01T00:00:00.0001Z","counter":2,"replica":"00000000-0000-0000-0000-000000000001","kind":"textSet",\#(note),"text":"a"}"#,
        false
      ),
      (#"{\#(head),"kind":"textSet",\#(note),"text":"a","archived":true}"#, false),
      (#"{\#(head),"kind":"archivedSet",\#(note),"archived":true}"#, true),
      (#"{\#(head),"kind":"noteCreated",\#(note),"date":"2026-01-01T00:00:00.000Z"}"#, true),
      (#"{\#(head),"kind":"noteCreated",\#(note),"date":"0000-01-01T00:00:00.000Z"}"#, false),
      (#"{\#(head),"kind":"sortDateSet",\#(note)}"#, false),
      (#"{\#(head),"kind":"tagsSet",\#(note),"tags":["work","Paris"]}"#, true),
      (#"{\#(head),"kind":"tagsSet",\#(note),"tags":["   "]}"#, false),
      (#"{\#(head),"kind":"tagsSet",\#(note),"tags":["a\u0001b"]}"#, false),
      (
        #"{\#(head),"kind":"tagsSet",\#(note),"tags":[\#(Array(repeating: "\"t\"", count: 101).joined(separator: ","))]}"#,
        false
      ),
      (
        #"{\#(head),"kind":"tagsSet",\#(note),"tags":["\#(String(repeating: "x", count: 201))"]}"#,
        false
      ),
      (#"{\#(head),"kind":"attachmentAdded",\#(note),\#(attachment)}"#, true),
      (
        #"{\#(head),"kind":"attachmentAdded",\#(note),"attachment":{"id":"00000000-0000-0000-0000-0000000000b0","sha256":"\#(String(repeating: "ab", count: 32))","byteCount":3}}"#,
        false
      ),
      (
        #"{\#(head),"kind":"attachmentAdded",\#(note),"attachment":{"id":"00000000-0000-0000-0000-0000000000b0","mimeType":"png","sha256":"\#(String(repeating: "ab", count: 32))","byteCount":3}}"#,
        false
      ),
      (
        #"{\#(head),"kind":"attachmentAdded",\#(note),"attachment":{"id":"00000000-0000-0000-0000-0000000000b0","mimeType":"image/png","sha256":"\#(String(repeating: "ab", count: 32))","byteCount":0}}"#,
        false
      ),
      (
        #"{\#(head),"kind":"attachmentDeleted","attachment":{"id":"00000000-0000-0000-0000-0000000000b0"}}"#,
        true
      ),
      (#"{\#(head),"kind":"attachmentsSet",\#(note),"attachments":[]}"#, true),
      (#"{\#(head),"kind":"noteDeleted",\#(note)}"#, true),
      (#"{\#(head),"kind":"tagRenamed","name":"PARIS"}"#, true),
      (#"{\#(head),"kind":"tagRenamed","name":""}"#, false),
      (#"{\#(head),"kind":"tagDeleted","name":"Paris"}"#, true),
      (#"{\#(head),"kind":"tagDeleted"}"#, false),
      (#"{\#(head),"kind":"tagDeleted","name":"paris","redacted":"deleted"}"#, false),
      (#"{\#(head),"kind":"unknown","kindNumber":42,"extra":"oAYB"}"#, true),
      (#"{\#(head),"kind":"unknown","kindNumber":3}"#, false),
      (#"{\#(head),"kind":"tagAdded",\#(note),"name":"Rome"}"#, true),
      (#"{\#(head),"kind":"tagAdded","name":"Rome"}"#, false),
      (#"{\#(head),"kind":"tagAdded",\#(note),"redacted":"deleted"}"#, true),
      (
        #"{\#(head),"kind":"tagRemoved",\#(note),"tag":"\#(String(repeating: "ab", count: 16))"}"#,
        true
      ),
      (#"{\#(head),"kind":"tagRemoved",\#(note),"tag":"rome"}"#, false),
      (
        #"{\#(head),"kind":"tagRemoved",\#(note),"tag":"\#(String(repeating: "ab", count: 16))","redacted":"deleted"}"#,
        false
      ),
      (#"{\#(head),"kind":"tagErased","tag":"\#(String(repeating: "cd", count: 16))"}"#, true),
      (#"{\#(head),"kind":"tagErased","name":"Rome"}"#, false),
      (#"{\#(head),"kind":"sideways",\#(note)}"#, false),
      (#"{\#(head),"kind":"textSet",\#(note),"redacted":"deleted"}"#, true),
      (#"{\#(head),"kind":"textSet",\#(note),"redacted":"superseded","text":"secret"}"#, false),
      (#"{\#(head),"kind":"textSet",\#(note),"redacted":"forgotten"}"#, false),
      // null in an optional field is the field left out; in a required one, refused.
      (#"{\#(head),"kind":"textSet",\#(note),"text":"x","redacted":null,"extra":null}"#, true),
      (#"{\#(head),"kind":"textSet","note":null,"text":"x"}"#, false),
      (#"{\#(head),"kind":"tagsSet",\#(note),"redacted":"superseded"}"#, true),
      (#"{\#(head),"kind":"noteCreated",\#(note),"redacted":"deleted"}"#, true),
      (#"{\#(head),"kind":"tagRenamed","redacted":"deleted"}"#, true),
      (#"{\#(head),"kind":"noteDeleted",\#(note),"redacted":"deleted"}"#, false),
      (
        #"{\#(head),"kind":"attachmentAdded",\#(note),"redacted":"deleted","attachment":{"id":"00000000-0000-0000-0000-0000000000b0"}}"#,
        true
      ),
      (#"{\#(head),"kind":"attachmentAdded",\#(note),"redacted":"deleted",\#(attachment)}"#, false),
      (#"{\#(head),"kind":"textSet",\#(note),"redacted":"deleted","extra":"AAE="}"#, false),
      // What redaction keeps of an encrypted account's event: its authenticator, alone.
      (
        #"{\#(head),"kind":"textSet",\#(note),"redacted":"deleted","extra":"mgEQAAAAAAAAAAAAAAAAAAAAAA=="}"#,
        true
      ),
      (#"{\#(head),"kind":"tagRemoved",\#(note),"redacted":"deleted"}"#, true),
      (
        #"{"time":"2026-01-01T00:00:00.000Z","counter":70000,"replica":"00000000-0000-0000-0000-000000000001","kind":"noteDeleted",\#(note)}"#,
        false
      ),
    ]
  }()

  @Test("The document's limits are the defaults of the server's configuration")
  func documentedLimits() throws {
    let validator = try OpenAPIValidator()
    let info = try #require(validator.document["info"] as? [String: Any])
    let limits = try #require(info["x-vlog-limits"] as? [String: Any])
    let defaults = SyncServer.Configuration()
    let expected: [String: Int] = [
      "maximumBodyBytes": defaults.maximumBodyBytes,
      "maximumBlobBytes": defaults.maximumBlobBytes,
      "maximumEventsPerPush": defaults.maximumEventsPerPush,
      "maximumPageSize": defaults.maximumPageSize,
      "defaultPageSize": defaults.defaultPageSize,
      "maximumPageBytes": defaults.maximumPageBytes,
      "maximumComparedIDs": defaults.maximumComparedIDs,
      "maximumClockSkewSeconds": Int(defaults.maximumClockSkew.components.seconds),
      "tokenLifetimeSeconds": Int(defaults.tokenLifetime.components.seconds),
      "bodyTimeoutSeconds": Int(defaults.bodyTimeout.components.seconds),
      "idleTimeoutSeconds": Int(defaults.idleTimeout.components.seconds),
      "maximumLiveChannels": defaults.maximumLiveChannels,
      "maximumLiveChannelsPerAccount": defaults.maximumLiveChannelsPerAccount,
      "liveKeepAliveSeconds": Int(defaults.liveKeepAlive.components.seconds),
    ]
    for (name, value) in expected {
      #expect(limits[name] as? Int == value, "x-vlog-limits.\(name)")
    }
    #expect(Set(limits.keys) == Set(expected.keys).union(["description"]))
    // And the schema keywords that state them.
    let schemas = try #require(
      (validator.document["components"] as? [String: Any])?["schemas"] as? [String: Any])
    let push = try #require(
      ((schemas["SyncRequest"] as? [String: Any])?["properties"] as? [String: Any])?["events"]
        as? [String: Any])
    #expect(push["maxItems"] as? Int == defaults.maximumEventsPerPush)
  }

  @Test(
    "The document's rules are the server's: what it says is valid is taken, what it says is invalid is refused with 400",
    arguments: Backend.allCases)
  func documentRulesAreEnforced(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      let transport = InProcessTransport(server: server)
      let token = try await signUp(APICaller(transport: transport), "ann")
      let validator = try OpenAPIValidator()
      for (index, (event, valid)) in Self.eventCases.enumerated() {
        // Each case under an id of its own: another event under an id held is refused (409).
        let replica = String(format: "%012x", index + 1)
        let event = event.replacingOccurrences(
          of: #"0000-000000000001""#, with: #"0000-\#(replica)""#)
        let body = #"{"cursor":0,"events":[\#(event)]}"#
        let problems = validator.requestProblems(
          method: "POST", path: "/v1/sync", body: Array(body.utf8))
        #expect(problems.isEmpty == valid, "document: \(event.suffix(120)) \(problems)")
        let response = try await post(transport, "/v1/sync", body, token: token)
        #expect(response.status == (valid ? 200 : 400), "server: \(event.suffix(120))")
      }
      let credentials: [(String, Bool)] = [
        (#"{"username":"Ann.B+1@x","password":"correct horse battery"}"#, true),
        (#"{"username":" ann","password":"correct horse battery"}"#, false),
        (#"{"username":"ann!","password":"correct horse battery"}"#, false),
        (
          #"{"username":"\#(String(repeating: "a", count: 65))","password":"correct horse battery"}"#,
          false
        ),
        (#"{"username":"eve","password":"short"}"#, false),
        (#"{"username":"eve","password":"ééééééé"}"#, false),
        (#"{"username":"eve","password":"éééééééé"}"#, true),
        (#"{"username":"eve2","password":"\#(String(repeating: "p", count: 1025))"}"#, false),
      ]
      for (body, valid) in credentials {
        let problems = validator.requestProblems(
          method: "POST", path: "/v1/accounts", body: Array(body.utf8))
        #expect(problems.isEmpty == valid, "document: \(body.prefix(80)) \(problems)")
        let response = try await post(transport, "/v1/accounts", body)
        #expect(response.status == (valid ? 201 : 400), "server: \(body.prefix(80))")
      }
    }
  }
}
