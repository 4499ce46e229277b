internal import Crypto
internal import Foundation
internal import Hummingbird
internal import LMDB
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
    let drawn = Self.drawnParameters(for: name, secret: try await serverSecret())
    let parameters = SignInParameters(
      encrypted: account == nil ? drawn.encrypted : false, keyDerivation: drawn.keyDerivation)
    return try json(parameters, status: .ok)
  }

  /// The server's secret, read once.
  private func serverSecret() async throws -> [UInt8] {
    if let secret = secretCache.withLock({ $0 }) { return secret }
    let secret = try await store.serverSecret()
    secretCache.withLock { $0 = secret }
    return secret
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
