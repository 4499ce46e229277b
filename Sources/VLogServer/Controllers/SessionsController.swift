internal import CoreMetrics
internal import Crypto
internal import Foundation
internal import Hummingbird
internal import Logging
internal import VLog
internal import VLogWire

/// Signing in and out: `/v1/sessions`, its parameters, and the account's sessions.
struct SessionsController: ServerController {
  let accounts: any AccountStorage
  let sessions: any SessionStorage
  let keys: any KeyStorage
  let passwords: PasswordChecks
  let secret: ServerSecret
  let auth: Authenticator
  let reader: RequestReader
  /// How long a token works.
  let tokenLifetime: Duration
  let dependencies: SyncServer.Dependencies

  var routes: [Route] {
    [
      Route("v1/sessions", .get) { try await listSessions($0, $1) },
      Route("v1/sessions", .post) { try await signIn($0, $1) },
      Route("v1/sessions/parameters", .post) { try await signInParameters($0, $1) },
      Route("v1/sessions/current", .delete) { try await signOut($0, $1) },
      Route("v1/sessions/:id", .delete) { try await revokeSession($0, $1) },
    ]
  }

  /// `POST /v1/sessions/parameters`: whether an account is end-to-end encrypted and how its
  /// devices stretch its password, asked before signing in.
  ///
  /// The answer for a name no account has is of the same kind as for one that has: drawn from
  /// the server's secret and the name, the same every time — encrypted or not, a salt, the
  /// cost devices use for new passwords. A clear account's is the derivation its devices made
  /// (version 2), or for one made before devices stretched passwords, the one that reproduces
  /// the server's hash of its password (version 3). Nothing here tells whether a name made by
  /// a device of this version exists; the sign-up limit guards the one place that must (a
  /// name taken).
  func signInParameters(_ request: Request, _ context: ServerContext) async throws -> Response {
    let body = try await reader.decode(SignInParametersRequest.self, from: request)
    let name = try checked { () throws(WireError) in
      try Credentials(username: body.username, password: "").validated(checkingPassword: false)
        .username
    }
    let account = try await accounts.account(named: name)
    if let account, let record = try await keys.encryption(of: account.number) {
      return try json(
        SignInParameters(encrypted: true, keyDerivation: record.keyDerivation), status: .ok)
    }
    if let account {
      // A clear account: the derivation its devices made, or the one that reproduces the
      // hash of its password the server kept before devices stretched passwords.
      let derivation = account.password.derivation ?? account.password.passwordDerivation
      return try json(
        SignInParameters(encrypted: false, keyDerivation: derivation), status: .ok)
    }
    return try json(
      Self.drawnParameters(for: name, secret: try await secret.value()), status: .ok)
  }

  /// What a name no account has is answered with: whether encrypted (one bit) and a salt,
  /// drawn by HMAC-SHA-256 from the server's secret and the name.
  static func drawnParameters(for name: String, secret: [UInt8]) -> SignInParameters {
    let code = Array(
      HMAC<SHA256>.authenticationCode(
        for: Array("vlog sign-in parameters\u{0}\(name)".utf8), using: SymmetricKey(data: secret)
      ))
    return SignInParameters(
      encrypted: code[0] & 1 == 1,
      keyDerivation: KeyDerivation(
        version: KeyDerivation.currentVersion, logRounds: KeyDerivation.standardLogRounds,
        blockSize: 8, parallelism: 1, salt: Array(code[1...KeyDerivation.saltBytes])))
  }

  /// `POST /v1/sessions`: a token for the right name and password, and a device credential.
  ///
  /// A sign-in that presents a device credential this server's storage made for the account is
  /// throttled by that device's failures, not the name's nor the address's (its failures
  /// count for the address all the same); any other, by the name's and the address's.
  func signIn(_ request: Request, _ context: ServerContext) async throws -> Response {
    let decoded = try await reader.decode(Credentials.self, from: request)
    let credentials: Credentials
    // A name or password no account can have is refused by its shape, before any lookup.
    do { credentials = try decoded.validated(checkingPassword: true) } catch {
      throw ServerError.invalid(error)
    }
    let name = credentials.username
    let secret = try await secret.value()
    let account = try await accounts.account(named: name)
    let device = account.flatMap { account in
      credentials.device.flatMap {
        DeviceCredential(
          $0, name: name, account: account.number, passwordSalt: account.password.salt,
          secret: secret)
      }
    }
    let subjects: [PasswordThrottle.Subject] =
      (device.map { [($0.throttleKey, .device)] }
        ?? [(ThrottleKey(kind: .name, value: name), .name)])
      + PasswordChecks.addressSubject(context, device == nil ? .address : .addressOfKnownDevice)
    // An unknown name costs the same work as a wrong password, so the answer's timing does not
    // tell them apart.
    let password = credentials.password
    guard
      let stored = try await passwords.signIn(
        password, to: account, upgrade: credentials.upgrade, subjects: subjects),
      var account
    else {
      throw ServerError.invalidCredentials
    }
    // A record replaced at this sign-in (a clear account's password hash moved to the hash of
    // its secret) has a new salt: the credential presented was made under the old one.
    let presented = stored.salt == account.password.salt ? device : nil
    account.password = stored
    // A password hashed again has a new salt: device credentials are made under it.
    let salt =
      try await rehashIfWeaker(account, password: password, context)?.salt
      ?? account.password.salt
    let token = base64URL(dependencies.randomBytes(32))
    let expiry = Milliseconds(dependencies.now()).adding(tokenLifetime)
    try await sessions.storeToken(
      hash: sha256(Array(token.utf8)), account: account.number,
      expiresAt: Int64(clamping: expiry.rawValue))
    // The account's expired tokens go now, so its sessions stay as many as are alive.
    let now = dependencies.now().milliseconds
    for expired in try await sessions.tokens(of: account.number) where expired.expiresAt <= now {
      try await sessions.deleteToken(hash: expired.hash)
    }
    context.logger.info("signed in", metadata: ["account": "\(account.number)"])
    let issued =
      (salt == account.password.salt ? presented : nil)
      ?? DeviceCredential(
        name: name, account: account.number, passwordSalt: salt,
        nonce: dependencies.randomBytes(16), secret: secret)
    return try json(
      SessionBody(
        token: token, expiresAt: Date(milliseconds: Int64(clamping: expiry.rawValue)),
        device: issued.text),
      status: .ok)
  }

  /// Hashes a password that just signed in again at the server's cost, when it is stored at a
  /// cost of less work (an account made under an older default, or a lower `--password-cost`).
  ///
  /// - Returns: The new hash, if it was stored.
  private func rehashIfWeaker(
    _ account: AccountRecord, password: String, _ context: ServerContext
  ) async throws -> PasswordHash? {
    guard account.password.cost.work < passwords.cost.work else { return nil }
    let rehashed = try await passwords.hash(password, derivation: account.password.derivation)
    guard
      try await accounts.rehashPassword(
        account: account.number, from: account.password, to: rehashed)
    else { return nil }
    context.logger.info(
      "password hashed again at the server's cost",
      metadata: [
        "account": "\(account.number)", "from": "N=2^\(account.password.cost.logRounds)",
        "to": "N=2^\(passwords.cost.logRounds)",
      ])
    return rehashed
  }

  /// `DELETE /v1/sessions/current`: signs the request's session out.
  func signOut(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, tokenHash) = try await auth.authenticate(request)
    try await sessions.deleteToken(hash: tokenHash)
    context.logger.info("signed out", metadata: ["account": "\(account)"])
    return Response(status: .noContent)
  }

  /// `GET /v1/sessions`: the account's sessions that have not expired.
  func listSessions(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, tokenHash) = try await auth.authenticate(request)
    let now = dependencies.now().milliseconds
    let list = try await sessions.tokens(of: account)
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
    return try json(SessionList(sessions: list), status: .ok)
  }

  /// `DELETE /v1/sessions/{id}`: signs out one of the account's sessions.
  func revokeSession(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, _) = try await auth.authenticate(request)
    let id = context.parameters.get("id") ?? ""
    guard id.utf8.count == 16, id.utf8.allSatisfy({ Self.lowercaseHex.contains($0) }) else {
      throw ServerError.invalid(
        WireError("id", "'\(id)' is not a session id of 16 lowercase hexadecimal digits"))
    }
    var revoked = 0
    for token in try await sessions.tokens(of: account) where Self.sessionID(token.hash) == id {
      if try await sessions.deleteToken(hash: token.hash) { revoked += 1 }
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
}
