internal import Foundation
internal import VLog
internal import VLogWire

/// Creating the account, signing in and out, and the session's token.
extension SyncAccount {
  /// Creates the account on the server.
  ///
  /// - Throws: ``APIError``: `accountExists` (409), `invalidField` (400) for a bad user name;
  ///   `weakPassword` for a password below the floor
  ///   (`PasswordStrength/check(_:username:field:)`), before anything is sent.
  /// The password is stretched here under a new salt, for a clear account too: the server
  /// keeps only the hash of the secret drawn from it.
  /// For an encrypted account, the account's keys are made on this device, and the recovery
  /// key — the only other way to open them — is in ``recoveryKey`` until the account object
  /// ends: show it to the user once.
  public func createAccount() async throws(APIError) {
    guard let encryption, encryption.isRequired else {
      // A clear account: a secret drawn from the password, as for an encrypted one.
      let password = try knownPassword()
      try PasswordStrength.checkNew(password, username: username, field: "password")
      let keys = try await passwordKeys(for: password, derivation: derivationForNewPassword())
      _ = try await caller.createAccount(
        NewAccount(
          credentials: Credentials(username: username, password: keys.signInSecret),
          keyDerivation: keys.derivation)
      ).get()
      pin(keys.derivation)
      isEncrypted = false
      return
    }
    try PasswordStrength.checkNew(try knownPassword(), username: username, field: "password")
    let account: NewEncryptedAccount
    do {
      account = try NewEncryptedAccount(
        username: username,
        passwordKeys: try await passwordKeys(
          for: try knownPassword(),
          derivation: .new(cost: encryption.cost, random: encryption.random)),
        random: encryption.random)
    } catch let error as APIError {
      throw error
    } catch {
      throw APIError(.invalidRequest, "the account's keys cannot be made: \(error)")
    }
    _ = try await caller.createAccount(account.credentials, keys: account.serverKeys).get()
    recoveryKey = account.recoveryKey
    installKeyring(account.keys)
    remember(account.serverKeys.keyDerivation?.version)
    pin(account.serverKeys.keyDerivation)
  }

  /// Signs in now with the password the account was made with, replacing any token (and
  /// keeping the new one in the credential store), and binds the store to the account if it
  /// belongs to none yet.
  ///
  /// - Throws: `VLogError` `otherAccount` if the store belongs to another account or server
  ///   (nothing is sent); ``APIError`` from the server (`invalidCredentials`),
  ///   ``APIError/Code/signedOut`` if the account has no password, or ``CredentialStoreError``.
  public func signIn() async throws {
    try store.checkAccount(binding)
    token = try await signIn(withPassword: try knownPassword()).get().token
    try bindStore()
    try saveToken()
    try await openKeys()
  }

  /// Signs in with `password`, which the account then keeps in memory to sign in again when
  /// the token expires (never in the credential store), and binds the store to the account if
  /// it belongs to none yet.
  ///
  /// - Throws: `VLogError` `otherAccount` if the store belongs to another account or server
  ///   (nothing is sent); ``APIError`` from the server (`invalidCredentials`), or
  ///   ``CredentialStoreError``.
  public func signIn(password: String) async throws {
    try store.checkAccount(binding)
    let token = try await signIn(withPassword: password).get().token
    self.password = password
    self.token = token
    try bindStore()
    try saveToken()
    try await openKeys()
  }

  /// Revokes the token on the server and forgets it, here and in the credential store. The
  /// token is forgotten even if the server cannot be reached (then it stays valid until it
  /// expires).
  ///
  /// An encrypted account's keys are forgotten too: signing in again opens them with the
  /// password.
  public func signOut() async throws {
    try forgetKeys()
    guard let token else { return }
    self.token = nil
    try saveToken()
    _ = try await caller.signOut(token: token).get()
  }

  /// The current token, if signed in.
  public var currentToken: String? { token }

  /// Whether the account holds a token (which the server may still refuse as expired).
  public var isSignedIn: Bool { token != nil }

  /// The password, or ``APIError/Code/signedOut`` without one.
  func knownPassword() throws(APIError) -> String {
    guard let password else {
      throw APIError(
        .signedOut, "signed out: the session for '\(username)' ended; sign in with the password")
    }
    return password
  }

  /// Writes the token to the credential store if it changed since it was last written.
  func saveToken() throws {
    guard let credentialStore, token != storedToken else { return }
    try credentialStore.setToken(token, for: username)
    storedToken = token
  }

  /// Replaces the token (to test how the account handles a token the server no longer accepts).
  public func useToken(_ token: String?) { self.token = token }
}
