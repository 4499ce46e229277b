internal import CoreMetrics
internal import Crypto
internal import Foundation
internal import Hummingbird
internal import LMDB
internal import Logging
internal import NIOCore
internal import VLog
internal import VLogWire

extension SyncServer {
  /// `POST /v1/sessions/parameters`: whether an account is end-to-end encrypted and how its
  /// devices stretch its password, asked before signing in.
  ///
  /// The answer for a name no account has is of the same kind as for one that has: drawn from
  /// the server's secret and the name, the same every time — encrypted or not, a salt, the
  /// cost devices use for new passwords. A clear account's is drawn the same way, marked
  /// clear. Nothing here tells whether a name exists; the sign-up limit guards the one place
  /// that must (a name taken).
  func signInParameters(_ request: Request, _ context: ServerContext) async throws -> Response {
    let body = try await decode(SignInParametersRequest.self, from: request)
    let name = try checked { () throws(WireError) in
      try Credentials(username: body.username, password: "").validated(checkingPassword: false)
        .username
    }
    let account = try await store.account(named: name)
    if let account, let record = try await store.encryption(of: account.number) {
      return try json(
        SignInParameters(encrypted: true, keyDerivation: record.keyDerivation), status: .ok)
    }
    let drawn = Self.drawnParameters(for: name, secret: try await secret.value())
    let parameters = SignInParameters(
      encrypted: account == nil ? drawn.encrypted : false, keyDerivation: drawn.keyDerivation)
    return try json(parameters, status: .ok)
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
}

extension SyncServer {
  /// `POST /v1/sessions`: a token for the right name and password, and a device credential.
  ///
  /// A sign-in that presents a device credential this server's storage made for the account is
  /// throttled by that device's failures and the address's, not the name's; any other, by the
  /// name's and the address's.
  func signIn(_ request: Request, _ context: ServerContext) async throws -> Response {
    let decoded = try await decode(Credentials.self, from: request)
    let credentials: Credentials
    // A name or password no account can have is refused by its shape, before any lookup.
    do { credentials = try decoded.validated(checkingPassword: true) } catch {
      throw ServerError.invalid(error)
    }
    let name = credentials.username
    let secret = try await secret.value()
    let account = try await store.account(named: name)
    let device = account.flatMap { account in
      credentials.device.flatMap {
        DeviceCredential(
          $0, name: name, account: account.number, passwordSalt: account.password.salt,
          secret: secret)
      }
    }
    let subjects: [PasswordThrottle.Subject] =
      (device.map { [($0.throttleKey, .device)] }
        ?? [(ThrottleKey(kind: .name, value: name), .name)]) + addressSubject(context, .address)
    // An unknown name costs the same work as a wrong password, so the answer's timing does not
    // tell them apart.
    let stored = account?.password ?? decoy
    let password = credentials.password
    let matches = try await throttle.hash(for: subjects) {
      try await offLoop { try stored.matches(password) }
    }
    try await throttle.record(
      subjects, succeeded: account != nil && matches, clearing: [subjects[0].key])
    guard let account, matches else {
      metrics.signInFailures.increment()
      throw ServerError.invalidCredentials
    }
    // A password hashed again has a new salt: device credentials are made under it.
    let salt =
      try await rehashIfWeaker(account, password: password, context)?.salt
      ?? account.password.salt
    let token = Self.base64URL(dependencies.randomBytes(32))
    let expiry = Date(
      milliseconds: Int64(
        clamping: Milliseconds(dependencies.now()).adding(configuration.tokenLifetime).rawValue))
    try await store.storeToken(
      hash: sha256(Array(token.utf8)), account: account.number,
      expiresAt: expiry.milliseconds)
    // The account's expired tokens go now, so its sessions stay as many as are alive.
    let now = dependencies.now().milliseconds
    for expired in try await store.tokens(of: account.number) where expired.expiresAt <= now {
      try await store.deleteToken(hash: expired.hash)
    }
    context.logger.info("signed in", metadata: ["account": "\(account.number)"])
    let issued =
      (salt == account.password.salt ? device : nil)
      ?? DeviceCredential(
        name: name, account: account.number, passwordSalt: salt,
        nonce: dependencies.randomBytes(16), secret: secret)
    return try json(
      SessionBody(token: token, expiresAt: expiry, device: issued.text), status: .ok)
  }

  /// The request's address as a throttle subject judged by `budget`, or none for a
  /// connection without an IP address.
  func addressSubject(_ context: ServerContext, _ budget: ThrottleBudget)
    -> [PasswordThrottle.Subject]
  {
    guard let address = context.channel.remoteAddress?.ipAddress else { return [] }
    let kind: ThrottleKey.Kind = budget == .address ? .address : .recoveryAddress
    return [(ThrottleKey(kind: kind, value: ThrottleKey.addressPrefix(address)), budget)]
  }

  /// Hashes a password that just signed in again at the server's cost, when it is stored at a
  /// cost of less work (an account made under an older default, or a lower `--password-cost`).
  ///
  /// - Returns: The new hash, if it was stored.
  private func rehashIfWeaker(
    _ account: AccountRecord, password: String, _ context: ServerContext
  ) async throws -> PasswordHash? {
    guard account.password.cost.work < configuration.passwordCost.work else { return nil }
    let rehashed = try await hashSecret(password)
    guard
      try await store.rehashPassword(
        account: account.number, from: account.password, to: rehashed)
    else { return nil }
    context.logger.info(
      "password hashed again at the server's cost",
      metadata: [
        "account": "\(account.number)", "from": "N=2^\(account.password.cost.logRounds)",
        "to": "N=2^\(configuration.passwordCost.logRounds)",
      ])
    return rehashed
  }

  /// Checks an account's password again before a change that needs it (the caller holds a
  /// token of it), throttled by the account's own failed checks and the address's: not by the
  /// name's, which anyone can make fail, so that nobody keeps the account's holder from
  /// changing the password or re-keying.
  ///
  /// - Throws: ``ServerError`` `wrongPassword` (403) if it does not match.
  func confirmPassword(_ password: String, of account: UInt64, _ context: ServerContext)
    async throws
  {
    guard let stored = try await store.account(number: account) else {
      throw ServerError.unauthorized
    }
    let subjects =
      [(ThrottleKey(kind: .account, value: String(account)), ThrottleBudget.name)]
      + addressSubject(context, .address)
    let matches = try await throttle.hash(for: subjects) {
      try await offLoop { try stored.password.matches(password) }
    }
    try await throttle.record(subjects, succeeded: matches, clearing: [subjects[0].key])
    guard matches else {
      metrics.signInFailures.increment()
      throw ServerError.wrongPassword
    }
  }
}

/// The storage's secret (``ServerStorage/serverSecret()``), read once and kept.
final class ServerSecret: Sendable {
  private let store: any ServerStorage
  private let cache = Locked<[UInt8]?>(nil)

  init(_ store: any ServerStorage) { self.store = store }

  /// The secret.
  func value() async throws -> [UInt8] {
    if let secret = cache.withLock({ $0 }) { return secret }
    let secret = try await store.serverSecret()
    cache.withLock { $0 = secret }
    return secret
  }
}
