internal import CoreMetrics
internal import Hummingbird
internal import Logging
internal import VLog
internal import VLogWire

/// The keys of an end-to-end encrypted account: the record of its keys and their rotation,
/// recovery with the recovery key, and its notes' and attachments' keys. Each answers 404 for
/// an account that is not encrypted.
struct KeysController: ServerController {
  let accounts: any AccountStorage
  let keys: any KeyStorage
  let passwords: PasswordChecks
  let auth: Authenticator
  let reader: RequestReader
  /// The most object keys one request stores or looks up.
  let maximumObjects: Int
  /// The keys a listing's page holds unless asked for another number, and at most.
  let defaultPageSize: Int
  let maximumPageSize: Int

  var routes: [Route] {
    [
      Route("v1/accounts/recovery-keys", .post) { try await recoveryKeys($0, $1) },
      Route("v1/accounts/recover", .post) { try await recover($0, $1) },
      Route("v1/accounts/current/keys", .get) { try await accountKeys($0, $1) },
      Route("v1/accounts/current/keys", .put) { try await rotateKeys($0, $1) },
      Route("v1/object-keys", .get) { try await listObjectKeys($0, $1) },
      Route("v1/object-keys", .post) { try await storeObjectKeys($0, $1) },
      Route("v1/object-keys/lookup", .post) { try await lookUpObjectKeys($0, $1) },
    ]
  }

  /// The account of the request's token, and its record of keys.
  ///
  /// - Throws: ``ServerError`` `notEncrypted` for an account that is not encrypted.
  private func encryptedAccount(_ request: Request) async throws -> (
    account: UInt64, record: EncryptionRecord
  ) {
    let (account, _) = try await auth.authenticate(request)
    guard let record = try await keys.encryption(of: account) else {
      throw ServerError.notEncrypted
    }
    return (account, record)
  }

  /// The JSON body of a write to the account's keys, checked by `check`, once its signature
  /// shows that a device of the account made it
  /// (``EncryptionRecord/admits(signature:method:route:body:)``): a token alone changes none
  /// of an encrypted account's keys.
  private func signedBody<T: Decodable, Checked>(
    _ type: T.Type, of request: Request, route: String, record: EncryptionRecord,
    checking check: (T) throws(WireError) -> Checked
  ) async throws -> Checked {
    let bytes = try await reader.collect(request, upTo: reader.maximumBodyBytes)
    let body = try reader.decode(type, from: bytes)
    let checked = try checked { () throws(WireError) in try check(body) }
    guard
      record.admits(
        signature: request.headers[.requestSignature], method: request.method.rawValue,
        route: route, body: bytes)
    else { throw ServerError.unsignedWrite }
    return checked
  }

  /// What a device of an encrypted account needs to open its keys, and with `since`, the
  /// links from that epoch to the current one.
  func accountKeys(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, record) = try await encryptedAccount(request)
    var links: [[UInt8]] = []
    if let since = try number("since", of: request), since < record.epoch {
      links = try await keys.links(account: account, after: since)
    }
    return try json(record.body(links: links), status: .ok)
  }

  /// An encrypted account's sealed keys, for a device that proves it holds the recovery key:
  /// 401 for a wrong name or secret, as a sign-in, with recovery's own throttle.
  func recoveryKeys(_ request: Request, _ context: ServerContext) async throws -> Response {
    let body = try await reader.decode(RecoveryCredentials.self, from: request)
    let credentials = try checked { () throws(WireError) in try body.validated() }
    let (_, record) = try await checkRecovery(credentials, context)
    return try json(record.body(), status: .ok)
  }

  /// Recovers an encrypted account with its recovery key: a new password, the keys sealed to
  /// it, every session signed out.
  func recover(_ request: Request, _ context: ServerContext) async throws -> Response {
    let body = try await reader.decode(AccountRecovery.self, from: request)
    let (credentials, newPassword, seal) = try checked { () throws(WireError) in
      let credentials = try body.credentials.validated()
      guard Credentials.passwordLengths.contains(body.newPassword.unicodeScalars.count) else {
        throw WireError("newPassword", "a password is 8 to 1024 characters long")
      }
      return (credentials, body.newPassword, try body.keys.validated())
    }
    let (account, _) = try await checkRecovery(credentials, context)
    let hash = try await passwords.hash(newPassword)
    try await accounts.setPassword(account: account, password: hash, keeping: nil, seal: seal)
    context.logger.notice("account recovered", metadata: ["account": "\(account)"])
    return Response(status: .noContent)
  }

  /// The encrypted account `credentials` name, if its recovery secret matches: checked against
  /// a decoy for an unknown name or a clear account, so the answer's timing tells none of them
  /// apart.
  ///
  /// A recovery key's secret is 256 random bits, kept as a plain hash
  /// (``PasswordChecks/hashRecoverySecret(_:)``): no number of guesses reaches it, so recovery
  /// is limited by the address's failures only. Counting the name's as well let anyone lock the
  /// owner out of recovery with three wrong secrets. A record made before kept a scrypt hash,
  /// which is checked as it is until the account's recovery key is replaced.
  ///
  /// - Throws: ``ServerError`` 401 `invalidCredentials`, or 429 from the throttle.
  private func checkRecovery(_ credentials: RecoveryCredentials, _ context: ServerContext)
    async throws -> (UInt64, EncryptionRecord)
  {
    let name = credentials.username
    let account = try await accounts.account(named: name)
    var record: EncryptionRecord?
    if let account { record = try await keys.encryption(of: account.number) }
    // Recovery has its own budget per address, apart from sign-ins'.
    let subjects = PasswordChecks.addressSubject(context, .recoveryAddress)
    guard
      try await passwords.check(
        credentials.recoverySecret, against: record?.recoverySecret,
        decoy: PasswordChecks.recoveryDecoy, subjects: subjects),
      let account, let record
    else {
      throw ServerError.wrongRecoveryKey
    }
    return (account.number, record)
  }

  /// Rotates the account's content key: 409 `keysChanged` if it is no longer at the
  /// rotation's epoch, or the rotation lacks a key the account holds. A re-keying (no link)
  /// needs the password, and signs out every other session.
  func rotateKeys(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, tokenHash) = try await auth.authenticate(request)
    guard let current = try await keys.encryption(of: account) else {
      throw ServerError.notEncrypted
    }
    let rotation = try await signedBody(
      KeyRotation.self, of: request, route: "/v1/accounts/current/keys", record: current
    ) { body throws(WireError) in try body.validated() }
    // A re-keying, or a new recovery key, is the account holder's act, not a token's: the
    // password is checked again, as for a password change.
    if let password = rotation.password {
      try await passwords.confirm(password, of: account, context)
    }
    // A new recovery key's secret is kept as a plain hash.
    var recoverySecret: PasswordHash?
    if let recovery = rotation.recovery {
      recoverySecret = passwords.hashRecoverySecret(recovery.recoverySecret)
    }
    // A re-keying signs out every other session: a lost device's token must not outlive it.
    let record = try await keys.rotateKeys(
      account: account, by: rotation, recoverySecret: recoverySecret, keeping: tokenHash)
    context.logger.info(
      rotation.link == nil ? "account re-keyed" : "content key rotated",
      metadata: [
        "account": "\(account)", "epoch": "\(record.epoch)", "keys": "\(rotation.keys.count)",
        "linked": "\(rotation.link != nil)", "new recovery key": "\(rotation.recovery != nil)",
      ])
    return try json(record.body(), status: .ok)
  }

  /// Stores keys of notes and attachments: 409 `keysChanged` if they are not wrapped by the
  /// current epoch's content key.
  func storeObjectKeys(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, record) = try await encryptedAccount(request)
    let (epoch, objectKeys) = try await signedBody(
      ObjectKeys.self, of: request, route: "/v1/object-keys", record: record
    ) { body throws(WireError) in (body.epoch, try body.validated(maximum: maximumObjects)) }
    let stored = try await keys.storeObjectKeys(objectKeys, account: account, epoch: epoch)
    return try json(StoredObjectKeys(stored: stored), status: .ok)
  }

  /// The keys of the objects asked for that the account holds.
  // Not optimized: Swift 6.3.1's release build crashed splitting this handler's coroutine
  // (LLVM's `emitSetAndGetSwiftErrorValueAround`). It awaits storage; optimizing it saves
  // nothing measurable.
  @_optimize(none)
  func lookUpObjectKeys(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, _) = try await encryptedAccount(request)
    let body = try await reader.decode(ObjectKeysLookup.self, from: request)
    let objects = try checked { () throws(WireError) in
      try body.validated(maximum: maximumObjects)
    }
    let page = try await keys.objectKeys(of: objects, account: account)
    return try json(ObjectKeys(epoch: page.epoch, keys: page.keys), status: .ok)
  }

  /// A page of every key the account holds, after the object `after`.
  func listObjectKeys(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, _) = try await encryptedAccount(request)
    var after: Identifier?
    if let text = request.uri.queryParameters["after"] {
      guard let object = Identifier(text) else {
        throw ServerError.invalid(WireError("after", "'\(text)' is not an object id (a UUID)"))
      }
      after = object
    }
    let limit = Int(
      clamping: min(
        try number("limit", of: request) ?? UInt64(defaultPageSize),
        UInt64(maximumPageSize)))
    guard limit > 0 else { throw ServerError.invalid(WireError("limit", "0 is not positive")) }
    let page = try await keys.objectKeys(account: account, after: after, limit: limit)
    return try json(
      ObjectKeysPage(epoch: page.epoch, keys: page.keys, more: page.more), status: .ok)
  }
}
