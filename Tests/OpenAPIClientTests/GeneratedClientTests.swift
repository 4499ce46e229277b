import Crypto
import Foundation
import HTTPTypes
import OpenAPIAsyncHTTPClient
import OpenAPIRuntime
import ServerTestSupport
import Testing
import VLogServer
import VLogTesting

/// A client generated from `GET /v1/openapi.json` by swift-openapi-generator, as a developer
/// of another app would generate one, used as it comes against a live server on loopback.
@Suite("A client generated from the OpenAPI document")
struct GeneratedClientTests {
  @Test("The committed client is what the document as it is generates")
  func generatedFromThisDocument() throws {
    let digest = SHA256.hash(data: SyncServer.openAPIDocument)
      .map { String(format: "%02x", $0) }.joined()
    let generated = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
      .appendingPathComponent("Generated")
    let files = try FileManager.default.contentsOfDirectory(atPath: generated.path)
      .filter { $0.hasSuffix(".swift") }
    #expect(files.count == 9)
    for file in files {
      let text = try String(contentsOf: generated.appendingPathComponent(file), encoding: .utf8)
      #expect(
        text.contains("(SHA-256 \(digest))"),
        "\(file) was generated from another document: run tools/generate-openapi-client")
    }
  }

  @Test(
    "Signs up and in, pushes every kind of event with offset times, pulls them back, moves a blob, signs out, and reads every error it is answered as an Error",
    arguments: Backend.allCases)
  func wholeExchange(backend: Backend) async throws {
    try await withGeneratedClient(backend: backend) { api in
      try await api.exchange()
    }
  }

  @Test("Answers a body that stops arriving with 408", arguments: Backend.allCases)
  func stalledBody(backend: Backend) async throws {
    try await withGeneratedClient(backend: backend, bodyTimeout: .seconds(1)) { api in
      let credentials = Components.Schemas.Credentials(username: "stalled", password: "p4ssword")
      let anonymous = api.client()
      // On a busy machine the honest calls that set up may wait past the one-second deadline
      // too: answered 408, they are sent again, as a client would.
      var created = try await anonymous.createAccount(
        body: .json(.init(username: credentials.username, password: credentials.password)))
      var signedIn = try await anonymous.signIn(body: .json(credentials))
      for _ in 0..<10 {
        if case .requestTimeout = created {
          created = try await anonymous.createAccount(
            body: .json(.init(username: credentials.username, password: credentials.password)))
          signedIn = try await anonymous.signIn(body: .json(credentials))
        } else if case .requestTimeout = signedIn {
          signedIn = try await anonymous.signIn(body: .json(credentials))
        }
      }
      _ = try created.created
      let token = try signedIn.ok.body.json.token
      let stalled = try await api.client(token: token, stallingBody: true)
        .sync(body: .json(.init(cursor: 0, events: []))).requestTimeout.body.json
      #expect(stalled.code == .requestTimeout)
    }
  }
}

// MARK: - The exchange

/// The generated client against one live server, with the server's clock in the test's hands.
struct API: Sendable {
  let url: URL
  /// The name of the server's PostgreSQL database; nil on LMDB.
  let database: String?
  let clock: ManualClock
  let sent: SentBodies

  /// A generated client; with a token, a middleware sends it as the bearer credential. Every
  /// time it sends is RFC 3339 with a `+00:00` offset and six fraction digits.
  func client(token: String? = nil, contentType: String? = nil, stallingBody: Bool = false)
    -> Client
  {
    var middlewares: [any ClientMiddleware] = [sent]
    if let token { middlewares.append(SetHeader(name: .authorization, value: "Bearer \(token)")) }
    if let contentType { middlewares.append(SetHeader(name: .contentType, value: contentType)) }
    if stallingBody { middlewares.append(StallingBody()) }
    return Client(
      serverURL: url, configuration: Configuration(dateTranscoder: OffsetTimes()),
      transport: AsyncHTTPClientTransport(), middlewares: middlewares)
  }

  func exchange() async throws {
    let anonymous = client()
    let credentials = Components.Schemas.Credentials(
      username: "generated", password: "correct horse")

    // Accounts and sessions.
    let newAccount = Components.Schemas.NewAccount(
      username: credentials.username, password: credentials.password)
    _ = try await anonymous.createAccount(body: .json(newAccount)).created
    let taken = try await anonymous.createAccount(body: .json(newAccount)).conflict
    #expect(try taken.body.json.code == .accountExists)
    let wrong = try await anonymous.signIn(
      body: .json(.init(username: "generated", password: "wrong password"))
    ).unauthorized
    #expect(try wrong.body.json.code == .invalidCredentials)
    let session = try await anonymous.signIn(body: .json(credentials)).ok.body.json
    #expect(session.expiresAt > clock.now.addingTimeInterval(29 * 86400))
    let api = client(token: session.token)
    let sessions = try await api.listSessions().ok.body.json.sessions
    #expect(sessions.count == 1 && sessions.first?.current == true)
    // Not end-to-end encrypted: the account has no keys on the server.
    #expect(try await api.getAccountKeys().notFound.body.json.code == .notFound)

    // One event of every kind, pushed; then pulled back by a second session.
    let events = Self.everyKind()
    let pushed = try await api.sync(body: .json(.init(cursor: 0, events: events))).ok.body.json
    #expect(pushed.stored == events.count && pushed.events.isEmpty)
    #expect(pushed.cursor == events.count)
    let times = try sent.times()
    #expect(times.count >= events.count)
    #expect(times.allSatisfy { $0.hasSuffix("000+00:00") }, "\(times.prefix(3))")
    let other = try await anonymous.signIn(body: .json(credentials)).ok.body.json
    let pulled = try await client(token: other.token)
      .sync(headers: .init(vLogProtocol: "3"), body: .json(.init(cursor: 0, events: [])))
      .ok.body.json
    #expect(!pulled.more && pulled.cursor == events.count)
    #expect(pulled.eventSetDigest == pushed.eventSetDigest)
    #expect(abs(pulled.serverTime.timeIntervalSince(clock.now)) < 1)
    try Self.expectPulled(pulled.events, pushed: events)
    // A client of version 1 (no header) gets what a text change replaced as a field it does
    // not know, in `extra`; a malformed version is refused.
    let older = try await client(token: other.token)
      .sync(body: .json(.init(cursor: 0, events: []))).ok.body.json
    let edits = older.events.compactMap { event -> Components.Schemas.TextSetEvent? in
      if case .textSet(let edit) = event { edit } else { nil }
    }
    #expect(edits.count == 2 && edits.allSatisfy { $0.replaces == nil })
    #expect(edits.filter { $0.extra != nil }.count == 1)
    let refused = try await client(token: other.token)
      .sync(headers: .init(vLogProtocol: "two"), body: .json(.init(cursor: 0, events: [])))
      .badRequest.body.json
    #expect(refused.code == .invalidField && refused.message.contains("VLog-Protocol"))

    // A blob: uploaded, uploaded again, read back, its length, and a wrong one refused.
    let bytes: [UInt8] = Array("the bytes of an attachment".utf8)
    let hash = SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
    let absent = String(repeating: "cd", count: 32)
    let unheld = try await api.missingBlobs(body: .json(.init(hashes: [hash, absent]))).ok
    #expect(try unheld.body.json.missing == [hash, absent])
    _ = try await api.putBlob(path: .init(hash: hash), body: .binary(HTTPBody(bytes))).created
    let held = try await api.missingBlobs(body: .json(.init(hashes: [hash, absent]))).ok
    #expect(try held.body.json.missing == [absent])
    _ = try await api.putBlob(path: .init(hash: hash), body: .binary(HTTPBody(bytes))).ok
    let downloaded = try await api.getBlob(path: .init(hash: hash)).ok.body.binary
    #expect(try await [UInt8](collecting: downloaded, upTo: 1 << 20) == bytes)
    let head = try await api.headBlob(path: .init(hash: hash)).ok.headers
    #expect(head.contentLength == bytes.count && head.contentType == "application/octet-stream")
    _ = try await api.headBlob(path: .init(hash: String(repeating: "cd", count: 32))).notFound
    let mismatch = try await api.putBlob(
      path: .init(hash: String(repeating: "ab", count: 32)), body: .binary(HTTPBody(bytes))
    ).badRequest
    #expect(try mismatch.body.json.code == .blobMismatch)

    try await errors(api: api, token: session.token)

    // Signing out revokes the token at once.
    _ = try await api.signOut().noContent
    let after = try await api.sync(body: .json(.init(cursor: 0, events: []))).unauthorized
    #expect(try after.body.json.code == .unauthorized)

    // 503: a database the server cannot reach, with the time to wait.
    if let database {
      try await TestCluster.shared.execute("ALTER DATABASE \(database) ALLOW_CONNECTIONS false")
      try await TestCluster.shared.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '\(database)'")
      let health = try await anonymous.health().serviceUnavailable.body.json
      #expect(health.status == .unavailable && health.ready == false)
      let down = try await client(token: other.token)
        .sync(body: .json(.init(cursor: 0, events: []))).serviceUnavailable
      #expect(try down.body.json.code == .unavailable && down.headers.retryAfter == 1)
    }
  }

  /// Every error the server can be led to answer through the generated client, each read as
  /// the document's `Error` through the operation's own response type.
  func errors(api: Client, token: String) async throws {
    let note = "00000000-0000-4000-8000-00000000000a"
    let replica = "00000000-0000-4000-8000-0000000000ff"
    let event = { (time: Date, note: String) in
      Components.Schemas.Event.textSet(
        .init(
          time: time, counter: 0, replica: replica, kind: .textSet, note: note, text: "x"))
    }
    // 400: a field the server refuses, named.
    let invalid = try await api.sync(
      body: .json(.init(cursor: 0, events: [event(Self.base, "not a note id")]))
    ).badRequest.body.json
    #expect(invalid.code == .invalidField && invalid.field == "events[0].note")
    // 400: a time further ahead than the skew bound, answered with the server's time.
    let skew = try await api.sync(
      body: .json(.init(cursor: 0, events: [event(clock.now.addingTimeInterval(86400), note)]))
    ).badRequest.body.json
    #expect(skew.code == .clockSkew)
    #expect(abs((skew.serverTime ?? .distantPast).timeIntervalSince(clock.now)) < 1)
    // 400: a cursor past the end of the log.
    let cursor = try await api.sync(body: .json(.init(cursor: 1_000_000, events: [])))
      .badRequest.body.json
    #expect(cursor.code == .invalidCursor)
    // 413: a body over the limit.
    let big = try await api.sync(
      body: .json(
        .init(
          cursor: 0,
          events: [
            .textSet(
              .init(
                time: Self.base, counter: 1, replica: replica, kind: .textSet, note: note,
                text: String(repeating: "x", count: 100 << 10)))
          ]))
    ).contentTooLarge.body.json
    #expect(big.code == .bodyTooLarge)
    // 415: a body that is not of a media type the operation takes.
    let media = try await client(token: token, contentType: "text/plain")
      .sync(body: .json(.init(cursor: 0, events: []))).unsupportedMediaType.body.json
    #expect(media.code == .unsupportedMediaType)
    // 404: a blob the account does not hold, a session it does not have.
    let blob = try await api.getBlob(path: .init(hash: String(repeating: "cd", count: 32)))
      .notFound.body.json
    #expect(blob.code == .blobNotFound)
    let session = try await api.revokeSession(path: .init(id: "0123456789abcdef"))
      .notFound.body.json
    #expect(session.code == .notFound)
    // 400: a malformed path parameter.
    let hash = try await api.getBlob(path: .init(hash: "nothex")).badRequest.body.json
    #expect(hash.code == .invalidField)
    // 403: the wrong current password; after five wrong ones in a row, 429.
    for attempt in 1...5 {
      let refused = try await api.changePassword(
        body: .json(.init(currentPassword: "wrong password", newPassword: "a new password")))
      #expect(
        try refused.forbidden.body.json.code == .invalidCredentials, "attempt \(attempt)")
    }
    let throttled = try await api.changePassword(
      body: .json(.init(currentPassword: "correct horse", newPassword: "a new password"))
    ).tooManyRequests
    #expect(try throttled.body.json.code == .tooManyRequests)
    // 401: no token, an unknown one, an expired one.
    let none = try await client().listSessions().unauthorized.body.json
    #expect(none.code == .unauthorized)
    let unknown = try await client(token: "not-a-token").listSessions().unauthorized.body.json
    #expect(unknown.code == .unauthorized)
    let anonymous = client()
    // A sign-in is judged by the name's failures, not the account's own checks above: five
    // wrong passwords, then the right one waits too.
    for _ in 1...5 {
      _ = try await anonymous.signIn(
        body: .json(.init(username: "generated", password: "wrong password")))
    }
    let waiting = try await anonymous.signIn(
      body: .json(.init(username: "generated", password: "correct horse"))
    ).tooManyRequests
    #expect(try waiting.body.json.code == .tooManyRequests)
    clock.advance(by: 31 * 86400)
    let expired = try await api.listSessions().unauthorized.body.json
    #expect(expired.code == .tokenExpired)
    clock.advance(by: -31 * 86400)
  }

  // MARK: - Events

  /// 2025-11-23T18:56:55.477Z: a whole millisecond in the past.
  static let base = milliseconds(1_763_924_215_477)

  /// A time of whole milliseconds, made as `OffsetTimes` makes the times it reads.
  static func milliseconds(_ count: Int64) -> Date {
    Date(timeIntervalSince1970: Double(count) / 1000)
  }

  static let replica = "1b4e28ba-2fa1-4d3b-a3f5-ef19b5a7633b"
  static let note = "6f1c1f3e-58a2-4d36-9f6e-0c2b7f1d2a11"
  static let gone = "9d3a5b6c-1e2f-4a3b-8c4d-5e6f7a8b9c0d"
  static let attachment = "c0ffee00-1234-4abc-8def-0123456789ab"
  static let removed = "deadbeef-1234-4abc-8def-0123456789ab"

  /// One event of every kind the document names, at successive milliseconds.
  static func everyKind() -> [Components.Schemas.Event] {
    var counter: Int64 = 0
    func time() -> Date {
      counter += 1
      return milliseconds(1_763_924_215_477 + counter)
    }
    let date = Date(timeIntervalSince1970: 1_767_225_600)  // 2026-01-01
    let metadata = { (id: String) in
      Components.Schemas.Attachment(
        id: id, mimeType: "image/png", width: 640, height: 480,
        sha256: String(repeating: "ab", count: 32), byteCount: 1234)
    }
    return [
      .noteCreated(
        .init(
          time: time(), counter: 0, replica: replica, kind: .noteCreated, note: note, date: date)
      ),
      .textSet(
        .init(time: time(), counter: 0, replica: replica, kind: .textSet, note: note, text: "Hi")),
      // An edit that names the text it replaced (any event id older than itself).
      .textSet(
        .init(
          time: time(), counter: 0, replica: replica, kind: .textSet, note: note, text: "Hi!",
          replaces: ["0000000000000001" + String(repeating: "ab", count: 16)])),
      .archivedSet(
        .init(
          time: time(), counter: 0, replica: replica, kind: .archivedSet, note: note,
          archived: true)),
      .sortDateSet(
        .init(
          time: time(), counter: 0, replica: replica, kind: .sortDateSet, note: note,
          date: date.addingTimeInterval(86400))),
      .tagsSet(
        .init(
          time: time(), counter: 0, replica: replica, kind: .tagsSet, note: note,
          tags: ["work", "Paris"])),
      .attachmentAdded(
        .init(
          time: time(), counter: 0, replica: replica, kind: .attachmentAdded, note: note,
          attachment: .Attachment(metadata(attachment)))),
      .attachmentAdded(
        .init(
          time: time(), counter: 0, replica: replica, kind: .attachmentAdded, note: note,
          attachment: .Attachment(metadata(removed)))),
      .attachmentsSet(
        .init(
          time: time(), counter: 0, replica: replica, kind: .attachmentsSet, note: note,
          attachments: [attachment])),
      .attachmentDeleted(
        .init(
          time: time(), counter: 0, replica: replica, kind: .attachmentDeleted,
          attachment: .init(id: removed))),
      .tagRenamed(
        .init(time: time(), counter: 0, replica: replica, kind: .tagRenamed, name: "Travel")),
      .tagDeleted(
        .init(time: time(), counter: 0, replica: replica, kind: .tagDeleted, name: "old")),
      .tagAdded(
        .init(
          time: time(), counter: 0, replica: replica, kind: .tagAdded, note: note, name: "Rome")),
      .tagRemoved(
        .init(
          time: time(), counter: 0, replica: replica, kind: .tagRemoved, note: note,
          tag: tagKey("WORK"))),
      .tagErased(
        .init(time: time(), counter: 0, replica: replica, kind: .tagErased, tag: tagKey("x"))),
      .noteCreated(
        .init(
          time: time(), counter: 0, replica: replica, kind: .noteCreated, note: gone, date: date)
      ),
      .noteDeleted(
        .init(time: time(), counter: 0, replica: replica, kind: .noteDeleted, note: gone)),
      .unknown(.init(time: time(), counter: 0, replica: replica, kind: .unknown, kindNumber: 42)),
    ]
  }

  /// A tag's key as the document defines it: the first 16 bytes of the SHA-256 of `tag`, a zero
  /// byte and the lowercased name, in hexadecimal.
  static func tagKey(_ name: String) -> String {
    let digest = SHA256.hash(data: Array("tag".utf8) + [0] + Array(name.lowercased().utf8))
    return digest.prefix(16).map { String(format: "%02x", $0) }.joined()
  }

  /// What the second session pulls: the events pushed, in their order, with the values erased
  /// where a deletion pushed with them erases them (and an older client's deletion of a tag by
  /// name as the deletion by key it means).
  static func expectPulled(
    _ pulled: [Components.Schemas.Event], pushed: [Components.Schemas.Event]
  ) throws {
    try #require(pulled.count == pushed.count)
    var redacted = 0
    for (index, (got, sent)) in zip(pulled, pushed).enumerated() {
      switch (got, sent) {
      case (.attachmentAdded(let got), .attachmentAdded(var sent)) where got.redacted != nil:
        // The deleted attachment: its id alone.
        #expect(got.redacted == .deleted, "event \(index)")
        guard case .Attachment(let metadata) = sent.attachment else {
          Issue.record("event \(index): sent without metadata")
          continue
        }
        sent.attachment = .AttachmentReference(.init(id: metadata.id))
        sent.redacted = .deleted
        redacted += 1
        #expect(got == sent, "event \(index)")
      case (.noteCreated(let got), .noteCreated(var sent)) where got.redacted != nil:
        // The deleted note: its ids alone.
        #expect(got.redacted == .deleted && got.date == nil, "event \(index)")
        sent.date = nil
        sent.redacted = .deleted
        redacted += 1
        #expect(got == sent, "event \(index)")
      case (.tagErased(let got), .tagDeleted(let sent)):
        #expect(got.tag == tagKey(sent.name), "event \(index)")
        #expect(got.time == sent.time && got.replica == sent.replica, "event \(index)")
      default:
        #expect(got == sent, "event \(index)")
      }
    }
    // The removed attachment's addition and the deleted note's creation.
    #expect(redacted == 2)
  }
}
