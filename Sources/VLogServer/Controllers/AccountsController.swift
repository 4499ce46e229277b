internal import Hummingbird
internal import Logging
internal import VLog
internal import VLogWire

/// An account's life: `POST /v1/accounts` creates one, `PUT …/current/password` changes its
/// password, `DELETE …/current` deletes it and everything of it.
struct AccountsController: ServerController {
  let accounts: any AccountStorage
  let keys: any KeyStorage
  let passwords: PasswordChecks
  let auth: Authenticator
  let reader: RequestReader

  var routes: [Route] {
    [
      Route("v1/accounts", .post) { try await createAccount($0, $1) },
      Route("v1/accounts/current", .delete) { try await deleteAccount($0, $1) },
      Route("v1/accounts/current/password", .put) { try await changePassword($0, $1) },
    ]
  }

  func createAccount(_ request: Request, _ context: ServerContext) async throws -> Response {
    let body = try await reader.decode(NewAccount.self, from: request)
    let account = try checked { () throws(WireError) in try body.validated() }
    let valid = account.credentials
    try await passwords.throttle.admitSignUp(from: context.clientAddress)
    // The hash of the secret a device drew from the password, and for a clear account how it
    // drew it; from a device of an earlier version, of a clear account's password itself.
    let hash = try await passwords.hash(valid.password, derivation: account.keyDerivation)
    var encryption: EncryptionRecord?
    if let keys = account.keys {
      let recoverySecret = passwords.hashRecoverySecret(keys.recoverySecret)
      encryption = try checked { () throws(WireError) in
        try EncryptionRecord(keys, recoverySecret: recoverySecret)
      }
    }
    try await accounts.createAccount(
      named: valid.username, password: hash, encryption: encryption)
    context.logger.info(
      "account created",
      metadata: ["username": "\(valid.username)", "encrypted": "\(encryption != nil)"])
    return try json(AccountBody(username: valid.username), status: .created)
  }

  func changePassword(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, tokenHash) = try await auth.authenticate(request)
    let body = try await reader.decode(PasswordChange.self, from: request)
    let change = try checked { () throws(WireError) in try body.validated() }
    let seal = try await passwordSeal(change.keys, of: account)
    try await passwords.confirm(change.currentPassword, of: account, context)
    let hash = try await passwords.hash(change.newPassword, derivation: change.keyDerivation)
    try await accounts.setPassword(
      account: account, password: hash, keeping: tokenHash, seal: seal)
    context.logger.info("password changed", metadata: ["account": "\(account)"])
    return Response(status: .noContent)
  }

  func deleteAccount(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, _) = try await auth.authenticate(request)
    let body = try await reader.decode(AccountDeletion.self, from: request)
    let deletion = try checked { () throws(WireError) in try body.validated() }
    try await passwords.confirm(deletion.password, of: account, context)
    try await accounts.deleteAccount(account)
    context.logger.notice("account deleted", metadata: ["account": "\(account)"])
    return Response(status: .noContent)
  }

  /// A password change's seal of the keys, checked: required for an encrypted account, refused
  /// for another.
  ///
  /// - Throws: ``ServerError`` 400 naming `keys`.
  private func passwordSeal(_ seal: PasswordSeal?, of account: UInt64) async throws
    -> PasswordSeal.Checked?
  {
    let encrypted = try await keys.encryption(of: account) != nil
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
}
