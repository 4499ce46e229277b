internal import CoreMetrics
internal import Foundation
internal import Hummingbird
internal import LMDB
internal import Logging
internal import NIOCore
internal import NIOPosix
internal import VLog
internal import VLogWire

extension SyncServer {
  // MARK: - Accounts

  func createAccount(_ request: Request, _ context: ServerContext) async throws -> Response {
    let body = try await decode(NewAccount.self, from: request)
    let account = try checked { () throws(WireError) in try body.validated() }
    let valid = account.credentials
    try await throttle.admitSignUp(from: context.channel.remoteAddress?.ipAddress)
    let hash = try await hashSecret(valid.password)
    var encryption: EncryptionRecord?
    if let keys = account.keys {
      let recoverySecret = try await hashSecret(keys.recoverySecret)
      encryption = try checked { () throws(WireError) in
        try EncryptionRecord(keys, recoverySecret: recoverySecret)
      }
    }
    try await store.createAccount(named: valid.username, password: hash, encryption: encryption)
    context.logger.info(
      "account created",
      metadata: ["username": "\(valid.username)", "encrypted": "\(encryption != nil)"])
    return try json(AccountBody(username: valid.username), status: .created)
  }

  /// The scrypt hash of a password (or a sign-in secret), under a new salt, at the server's
  /// cost: one of the password checks the throttle allows at once.
  func hashSecret(_ secret: String) async throws -> PasswordHash {
    let salt = dependencies.randomBytes(PasswordHash.saltCount)
    let cost = configuration.passwordCost
    return try await throttle.hash(for: []) {
      try await offLoop { try PasswordHash(hashing: secret, cost: cost, salt: salt) }
    }
  }

  func signOut(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, tokenHash) = try await authenticate(request)
    try await store.deleteToken(hash: tokenHash)
    context.logger.info("signed out", metadata: ["account": "\(account)"])
    return Response(status: .noContent)
  }

  // MARK: - Account lifecycle

  func changePassword(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, tokenHash) = try await authenticate(request)
    let body = try await decode(PasswordChange.self, from: request)
    let change = try checked { () throws(WireError) in try body.validated() }
    let seal = try await passwordSeal(change.keys, of: account)
    try await confirmPassword(change.currentPassword, of: account, context)
    let hash = try await hashSecret(change.newPassword)
    try await store.setPassword(account: account, password: hash, keeping: tokenHash, seal: seal)
    context.logger.info("password changed", metadata: ["account": "\(account)"])
    return Response(status: .noContent)
  }

  func deleteAccount(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, _) = try await authenticate(request)
    let body = try await decode(AccountDeletion.self, from: request)
    let deletion = try checked { () throws(WireError) in try body.validated() }
    try await confirmPassword(deletion.password, of: account, context)
    try await store.deleteAccount(account)
    context.logger.notice("account deleted", metadata: ["account": "\(account)"])
    return Response(status: .noContent)
  }

  func sessions(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, tokenHash) = try await authenticate(request)
    let now = dependencies.now().milliseconds
    let sessions = try await store.tokens(of: account)
      .filter { $0.expiresAt > now }
      .sorted {
        $0.expiresAt != $1.expiresAt
          ? $0.expiresAt < $1.expiresAt : $0.hash.lexicographicallyPrecedes($1.hash)
      }
      .map { token in
        SessionInfo(
          id: Self.sessionID(token.hash),
          expiresAt: ISO8601.format(milliseconds: token.expiresAt),
          current: token.hash == tokenHash)
      }
    return try json(SessionList(sessions: sessions), status: .ok)
  }

  func revokeSession(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, _) = try await authenticate(request)
    let id = context.parameters.get("id") ?? ""
    guard id.utf8.count == 16, id.utf8.allSatisfy({ Self.lowercaseHex.contains($0) }) else {
      throw ServerError.invalid(
        WireError("id", "'\(id)' is not a session id of 16 lowercase hexadecimal digits"))
    }
    var revoked = 0
    for token in try await store.tokens(of: account) where Self.sessionID(token.hash) == id {
      if try await store.deleteToken(hash: token.hash) { revoked += 1 }
    }
    guard revoked > 0 else { throw ServerError.sessionNotFound(id) }
    context.logger.info("session revoked", metadata: ["account": "\(account)", "session": "\(id)"])
    return Response(status: .noContent)
  }

  private static let lowercaseHex = Set("0123456789abcdef".utf8)

  /// A session's public id: the first 8 bytes of its token's SHA-256, in hex. It names the
  /// session without revealing the token.
  static func sessionID(_ tokenHash: [UInt8]) -> String {
    Hex.string(Array(tokenHash.prefix(8)))
  }

  /// A password change's seal of the keys, checked: required for an encrypted account, refused
  /// for another.
  ///
  /// - Throws: ``ServerError`` 400 naming `keys`.
  private func passwordSeal(_ seal: PasswordSeal?, of account: UInt64) async throws
    -> PasswordSeal.Checked?
  {
    let encrypted = try await store.encryption(of: account) != nil
    switch (seal, encrypted) {
    case (nil, true):
      throw ServerError.invalid(
        WireError(
          "keys",
          "this account is end-to-end encrypted: a new password needs the account's keys "
            + "sealed to it"))
    case (.some, false):
      throw ServerError.invalid(
        WireError("keys", "this account is not end-to-end encrypted: it has no keys to seal"))
    case (let seal?, true):
      return try checked { () throws(WireError) in try seal.validated() }
    case (nil, false):
      return nil
    }
  }

  // MARK: - Sync

  /// The protocol version a request's client reads (its `VLog-Protocol` header).
  private func wireProtocol(of request: Request) throws -> WireProtocol {
    try checked { () throws(WireError) in
      try WireProtocol(header: request.headers[.wireProtocol])
    }
  }

  func sync(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, _) = try await authenticate(request)
    let version = try wireProtocol(of: request)
    // A body must say what it is: JSON or the binary encoding, as the document says.
    let contentType = request.headers[.contentType]
    guard let encoding = contentType.flatMap(SyncEncoding.init(contentType:)) else {
      throw ServerError.unsupportedMediaType(contentType)
    }
    let bytes = try await collect(request, upTo: configuration.maximumBodyBytes)
    let push: SyncPush
    do throws(WireError) {
      switch encoding {
      case .json:
        push = try WireJSON.decode(SyncRequest.self, from: bytes).validated(
          maximumEvents: configuration.maximumEventsPerPush)
      case .binary:
        push = try SyncPush(binary: bytes, maximumEvents: configuration.maximumEventsPerPush)
      }
    } catch {
      throw ServerError.invalid(error)
    }
    if !push.events.isEmpty, try await isEncrypted(account) {
      for (index, event) in push.events.enumerated() {
        do { try event.checkSealed() } catch {
          throw ServerError.invalid(WireError("events[\(index)]", error.message))
        }
      }
    }
    let wall = Milliseconds(dependencies.now())
    let now = Int64(clamping: wall.rawValue)
    let bound = Int64(clamping: Milliseconds(configuration.maximumClockSkew).rawValue)
    let latest = wall.adding(configuration.maximumClockSkew)
    for (index, event) in push.events.enumerated()
    where Milliseconds(rawValue: event.stamp.time.milliseconds) > latest {
      throw ServerError.clockSkew(
        field: "events[\(index)].time", eventTime: Int64(event.stamp.time.milliseconds),
        serverTime: now, bound: bound)
    }
    let limit = min(push.limit ?? configuration.defaultPageSize, configuration.maximumPageSize)
    let outcome = try await store.sync(
      account: account, pushing: push.events, after: push.cursor, limit: limit,
      maximumBytes: configuration.maximumPageBytes,
      retention: (configuration.retention, wall.rawValue))
    context.logger.info(
      "sync",
      metadata: [
        "account": "\(account)", "pushed": "\(push.events.count)",
        "stored": "\(outcome.stored)", "cursor": "\(push.cursor)",
        "returned": "\(outcome.events.count)", "newCursor": "\(outcome.cursor)",
        "more": "\(outcome.more)", "encoding": "\(encoding)",
      ])
    metrics.eventsStored.increment(by: outcome.stored)
    metrics.pagesServed.increment()
    metrics.eventsServed.increment(by: outcome.events.count)
    let page = SyncPage(
      events: outcome.events.map(version.form), cursor: outcome.cursor, more: outcome.more,
      serverTime: dependencies.now(), stored: outcome.stored,
      eventSetDigest: outcome.head.digest)
    switch SyncEncoding(accept: request.headers[.accept]) {
    case .json:
      return try json(SyncResponse(page), status: .ok)
    case .binary:
      var headers = HTTPFields()
      headers[.contentType] = SyncEncoding.binary.mediaType
      return Response(
        status: .ok, headers: headers,
        body: .init(byteBuffer: ByteBuffer(bytes: page.binaryEncoded())))
    }
  }

  /// Whether `account` is end-to-end encrypted: its pushed events must then carry their values
  /// sealed.
  private func isEncrypted(_ account: UInt64) async throws -> Bool {
    if let known = encryptedAccounts.withLock({ $0[account] }) { return known }
    let encrypted = try await store.encryption(of: account) != nil
    encryptedAccounts.withLock { $0[account] = encrypted }
    return encrypted
  }

  // MARK: - Repair

  func compare(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, _) = try await authenticate(request)
    let body = try await decode(CompareRequest.self, from: request)
    let buckets = try checked { () throws(WireError) in try body.validated() }
    let comparison = try await store.compare(
      account: account, with: buckets, limit: configuration.maximumComparedIDs)
    context.logger.info(
      "compare",
      metadata: [
        "account": "\(account)", "buckets": "\(comparison.ids.count)",
        "ids": "\(comparison.ids.values.reduce(0) { $0 + $1.count })",
        "complete": "\(comparison.complete)",
      ])
    return try json(CompareResponse(comparison), status: .ok)
  }

  func fetch(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, _) = try await authenticate(request)
    let version = try wireProtocol(of: request)
    let body = try await decode(FetchRequest.self, from: request)
    let maximum = configuration.maximumEventsPerPush
    let ids = try checked { () throws(WireError) in try body.validated(maximum: maximum) }
    let events = try await store.events(
      account: account, ids: ids, maximumBytes: configuration.maximumPageBytes)
    context.logger.info(
      "fetch",
      metadata: ["account": "\(account)", "asked": "\(ids.count)", "returned": "\(events.count)"])
    return try json(FetchResponse(events: events.map(version.form)), status: .ok)
  }

  // MARK: - Blobs

  func missingBlobs(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, _) = try await authenticate(request)
    let body = try await decode(MissingBlobsRequest.self, from: request)
    let maximum = configuration.maximumEventsPerPush
    let hashes = try checked { () throws(WireError) in try body.validated(maximum: maximum) }
    // Bytes released more than half the grace period ago count as missing: the client then
    // sends them again (which keeps them a whole period), rather than push an attachment whose
    // bytes a sweep removes before the push arrives.
    let missing = try await store.missingBlobs(
      hashes, account: account, releasedBefore: releasedBefore(configuration.blobGracePeriod / 2))
    context.logger.info(
      "missing blobs",
      metadata: [
        "account": "\(account)", "asked": "\(hashes.count)", "missing": "\(missing.count)",
      ])
    return try json(MissingBlobsResponse(missing: missing), status: .ok)
  }

  func putBlob(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, _) = try await authenticate(request)
    let hash = try blobHash(context)
    let bytes = try await collect(request, upTo: configuration.maximumBlobBytes)
    let actual = sha256(bytes)
    guard actual == hash.bytes else {
      throw ServerError.blobMismatch(expected: hash, actual: actual)
    }
    let now = Milliseconds(dependencies.now()).rawValue
    let stored = try await store.storeBlob(bytes, hash: hash, account: account, now: now)
    context.logger.info(
      "blob", metadata: ["account": "\(account)", "bytes": "\(bytes.count)", "new": "\(stored)"])
    return Response(status: stored ? .created : .ok)
  }

  func blob(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, _) = try await authenticate(request)
    let hash = try blobHash(context)
    guard let bytes = try await store.blob(hash, account: account) else {
      throw ServerError.blobNotFound(hash)
    }
    var headers = HTTPFields()
    headers[.contentType] = "application/octet-stream"
    return Response(
      status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
  }

  // MARK: - Operations

  /// `GET /v1/health`: 200 while the storage answers, 503 while it does not (a database that
  /// cannot be reached): for load balancers, which should send requests elsewhere then.
  func health() async throws -> Response {
    let ready = await store.isReady()
    return try json(
      HealthBody(
        status: ready ? "ready" : "unavailable", live: true, ready: ready,
        storage: store.backend),
      status: ready ? .ok : .serviceUnavailable)
  }

  /// `GET /v1/health/live`: 200 while the process serves requests, whatever the storage does.
  func liveness() throws -> Response {
    try json(
      HealthBody(status: "live", live: true, ready: nil, storage: store.backend), status: .ok)
  }

  /// `GET /metrics`: the metrics in Prometheus's text format.
  func metricsResponse() -> Response {
    var headers = HTTPFields()
    headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
    return Response(
      status: .ok, headers: headers,
      body: .init(
        byteBuffer: ByteBuffer(
          bytes: metrics.exposition(
            openConnections: connections.openCount, liveChannels: live.count))))
  }

  // MARK: - Helpers

  /// Runs slow work (password hashing) on NIO's thread pool, off the event loops.
  func offLoop<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await NIOThreadPool.singleton.runIfActive(work)
  }

  /// The account of the request's bearer token, and the token's hash.
  func authenticate(_ request: Request) async throws -> (
    account: UInt64, tokenHash: [UInt8]
  ) {
    let session = try await session(of: request)
    return (session.account, session.hash)
  }

  /// The stored token of the request's bearer token, unexpired.
  ///
  /// - Throws: ``ServerError`` `unauthorized` without one or for an unknown one,
  ///   `tokenExpired` for an expired one.
  func session(of request: Request) async throws -> TokenRecord {
    guard let header = request.headers[.authorization], let token = Self.bearerToken(header)
    else {
      throw ServerError.unauthorized
    }
    guard let session = try await store.token(hash: sha256(Array(token.utf8))) else {
      throw ServerError.unauthorized
    }
    guard session.expiresAt > dependencies.now().milliseconds else {
      throw ServerError.tokenExpired
    }
    return session
  }

  /// The token of an `Authorization` header's `Bearer` credentials: the scheme in any case
  /// (RFC 9110 §11.1), then one or more spaces; nil for another scheme or no token.
  static func bearerToken(_ header: String) -> Substring? {
    guard let space = header.firstIndex(of: " "),
      header[..<space].lowercased() == "bearer"
    else { return nil }
    let token = header[space...].drop(while: { $0 == " " })
    return token.isEmpty ? nil : token
  }

  private func blobHash(_ context: ServerContext) throws -> BlobHash {
    let text = context.parameters.get("hash") ?? ""
    guard let hash = BlobHash(hex: text) else {
      throw ServerError.invalid(
        WireError("hash", "'\(text)' is not a SHA-256 of 64 hexadecimal digits"))
    }
    return hash
  }

  /// The request's body, at most `limit` bytes, arriving within the body timeout.
  ///
  /// A body announced larger than the limit is refused before any of it is read; one that
  /// trickles in too slowly is answered 408 and its connection closed, so no client holds a
  /// connection and a buffer by sending a byte now and then.
  private func collect(_ request: Request, upTo limit: Int) async throws -> [UInt8] {
    if let announced = request.headers[.contentLength].flatMap({ Int($0) }), announced > limit {
      throw ServerError.bodyTooLarge(limit)
    }
    // The body's deadline is the connection guard's: past it, reading fails with
    // `BodyTimedOut`.
    var request = request
    let buffer: ByteBuffer
    do {
      buffer = try await request.collectBody(upTo: limit)
    } catch is NIOTooManyBytesError {
      throw ServerError.bodyTooLarge(limit)
    } catch is BodyTimedOut {
      throw ServerError.requestTimeout(configuration.bodyTimeout)
    }
    return Array(buffer.readableBytesView)
  }

  func decode<T: Decodable>(_ type: T.Type, from request: Request) async throws -> T {
    let bytes = try await collect(request, upTo: configuration.maximumBodyBytes)
    do throws(WireError) {
      return try WireJSON.decode(type, from: bytes)
    } catch {
      throw ServerError.invalid(error)
    }
  }

  /// Runs a check of a decoded body, answering 400 naming the field it finds at fault.
  func checked<T>(_ check: () throws(WireError) -> T) throws(ServerError) -> T {
    do { return try check() } catch { throw ServerError.invalid(error) }
  }

  func json(_ value: some Encodable, status: HTTPResponse.Status) throws -> Response {
    var headers = HTTPFields()
    headers[.contentType] = "application/json"
    return Response(
      status: status, headers: headers,
      body: .init(byteBuffer: ByteBuffer(bytes: try JSONEncoder().encode(value))))
  }

  static func base64URL(_ bytes: [UInt8]) -> String {
    Data(bytes).base64EncodedString()
      .replacingOccurrences(of: "+", with: "-")
      .replacingOccurrences(of: "/", with: "_")
      .replacingOccurrences(of: "=", with: "")
  }
}

/// The answer of `GET /v1/health` and `GET /v1/health/live`.
struct HealthBody: Encodable {
  /// `ready`, `unavailable` or `live`.
  let status: String
  let live: Bool
  /// Whether the storage answers (not reported by the liveness check).
  let ready: Bool?
  /// `lmdb` or `postgres`.
  let storage: String
}
