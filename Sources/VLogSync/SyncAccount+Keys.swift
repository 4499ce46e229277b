internal import Foundation
internal import VLog
internal import VLogWire

/// An end-to-end encrypted account's keys on this device: drawn from the password, opened,
/// kept in the credential store, forgotten.
extension SyncAccount {
  /// What the server knows as `password`: the sign-in secret drawn from it as the account's
  /// password is stretched (``currentDerivation()``), for every account, clear or encrypted —
  /// the server never receives the password.
  func serverPassword(_ password: String) async throws(APIError) -> String {
    try await passwordKeys(for: password, derivation: try await currentDerivation())
      .signInSecret
  }

  /// How the account's password is stretched: the derivation this device signed in with (it
  /// asks the server nothing then), or the server's answer (``signInParameters()``), asked
  /// once per account object until a sign-in pins it.
  func currentDerivation() async throws(APIError) -> KeyDerivation {
    if let pinned = state.keyDerivation { return pinned }
    if let askedDerivation { return askedDerivation }
    let asked = try await signInParameters().keyDerivation
    askedDerivation = asked
    return asked
  }

  /// Signs in with the secret drawn from `password`. When the server refuses a secret drawn
  /// with a derivation it did not name just now (the pinned one, or an earlier answer), it is
  /// asked again once — another device may have raised the cost — and a new derivation it
  /// names, checked as any (against the pin too: the same salt, no less memory or work), is
  /// tried once.
  func signIn(withPassword password: String) async -> APIResult<SessionBody> {
    let request = TransportRequest(method: "POST", path: "/v1/sessions")
    do throws(APIError) {
      let askedNow = state.keyDerivation == nil && askedDerivation == nil
      let used = try await currentDerivation()
      let result = try await signIn(withPassword: password, derivation: used)
      guard !askedNow, result.error?.body?.code == .invalidCredentials else { return result }
      askedDerivation = nil
      let asked = try await signInParameters().keyDerivation
      askedDerivation = asked
      guard asked != used else { return result }
      return try await signIn(withPassword: password, derivation: asked)
    } catch {
      return APIResult(request: request, response: nil, error: error, value: nil)
    }
  }

  /// One sign-in with the secret `derivation` draws from `password`; a derivation of version
  /// 3 (a clear account whose server kept the hash of the password itself) moves the account
  /// to a new version 2 derivation in the same call, which the device then pins.
  private func signIn(withPassword password: String, derivation: KeyDerivation)
    async throws(APIError) -> APIResult<SessionBody>
  {
    let keys = try await passwordKeys(for: password, derivation: derivation)
    guard derivation.version == KeyDerivation.serverHashVersion else {
      return await signInCall(Credentials(username: username, password: keys.signInSecret))
    }
    let upgraded = try await passwordKeys(for: password, derivation: derivationForNewPassword())
    let result = await signInCall(
      Credentials(
        username: username, password: keys.signInSecret,
        upgrade: SecretUpgrade(
          secret: upgraded.signInSecret, keyDerivation: upgraded.derivation)))
    if result.value != nil {
      pin(upgraded.derivation)
      askedDerivation = nil
    }
    return result
  }

  /// Asks the server whether the account is encrypted and how its password is stretched, and
  /// checks the answer against what this device knows
  /// (`KeyDerivation/checked(own:encrypted:pinned:seenVersion:allowingVersionOne:)`): a device that knows
  /// the account is encrypted refuses to be told it is not, one made without encryption
  /// options refuses an encrypted account, and a derivation outside the device's bounds, or
  /// other than the one it signed in with, is refused.
  func signInParameters() async throws(APIError) -> SignInParameters {
    let parameters: SignInParameters
    do {
      parameters = try await caller.signInParameters(
        of: username, floor: encryptionCost ?? .standard, pinned: state.keyDerivation,
        seenVersion: state.keyDerivationVersion,
        allowingVersionOne: encryption?.migratesVersionOne == true)
    } catch let error as APIError {
      throw error
    } catch {
      throw APIError(.invalidResponse, "\(error)")
    }
    guard parameters.encrypted || !isEncrypted else {
      throw APIError(
        .invalidResponse,
        "the server says '\(username)' is not an end-to-end encrypted account, but this device "
          + "knows it is (or there is no such account): nothing is sent")
    }
    guard !parameters.encrypted || encryption != nil else {
      throw APIError(
        .invalidRequest,
        "'\(username)' is an end-to-end encrypted account, and this account object was made "
          + "without encryption options: make it with `EncryptionOptions` to open its keys")
    }
    if encryption != nil { isEncrypted = parameters.encrypted }
    return parameters
  }

  /// How a new password of the account is stretched
  /// (`KeyDerivation/forNewPassword(current:cost:random:)`): under the salt the device signed
  /// in with, if of version 2.
  func derivationForNewPassword() -> KeyDerivation {
    .forNewPassword(
      current: state.keyDerivation, cost: encryptionCost ?? .standard,
      random: encryption?.random ?? systemRandomBytes)
  }

  /// Remembers the derivation the server accepted a secret drawn with: the device takes no
  /// other salt for the account, nor less memory or work, from now on.
  func pin(_ derivation: KeyDerivation?) {
    guard let derivation else { return }
    state.keyDerivation = derivation
  }

  /// Remembers, in the state file, that the account is encrypted and the highest key
  /// derivation version seen for it.
  func remember(_ version: Int?) {
    state.encrypted = true
    if let version { state.keyDerivationVersion = max(state.keyDerivationVersion ?? 0, version) }
  }

  /// The keys drawn from `password` as `derivation` says, drawn once, off the cooperative pool
  /// (``PasswordKeys/stretching(username:password:derivation:)``).
  func passwordKeys(for password: String, derivation: KeyDerivation)
    async throws(APIError) -> PasswordKeys
  {
    if let passwordKeys, passwordKeys.password == password,
      passwordKeys.keys.derivation == derivation
    {
      return passwordKeys.keys
    }
    do {
      let keys = try await PasswordKeys.stretching(
        username: username, password: password, derivation: derivation)
      passwordKeys = (password, keys)
      return keys
    } catch {
      throw APIError(.invalidRequest, "the password's keys cannot be drawn: \(error)")
    }
  }

  /// Opens an encrypted account's keys, if they are not open: those the credential store
  /// kept, or those the server keeps sealed, with the password. Keeps them in the credential
  /// store.
  ///
  /// - Parameter held: Keys this device held, which a re-keying replaced: the keys opened
  ///   must be of a later re-keying, or nothing is kept.
  /// - Returns: The keyring; nil for an account that is not encrypted.
  @discardableResult
  func openKeys(replacing held: AccountKeys? = nil) async throws -> AccountKeyring? {
    guard isEncrypted else { return nil }
    if let keyring { return keyring }
    let keys: AccountKeys
    if let restoredKeys {
      keys = restoredKeys
    } else {
      guard let password else {
        throw APIError(
          .signedOut,
          "the keys of the end-to-end encrypted account '\(username)' are not on this device: "
            + "sign in with the password")
      }
      let body = try await call { caller, token in await caller.accountKeys(token: token) }
      let derived: PasswordKeys
      if let cached = passwordKeys, cached.password == password {
        derived = cached.keys
      } else {
        derived = try await passwordKeys(for: password, derivation: try await currentDerivation())
      }
      keys = try AccountKeys(opening: body, with: derived, username: username)
      try Self.check(keys, replacing: held, seen: seenKeys)
      remember(derived.derivation.version)
    }
    let keyring = installKeyring(keys)
    try await keepKeys()
    if state.encrypted != true { remember(nil) }
    try saveState()
    return keyring
  }

  /// Makes the keyring of `keys`, which calls the server with this account's token.
  @discardableResult
  func installKeyring(_ keys: AccountKeys) -> AccountKeyring {
    let keyring = AccountKeyring(
      keys: keys, caller: caller,
      token: { [weak self] in
        guard let self else { throw CancellationError() }
        return try await self.currentOrNewToken()
      }, random: encryption?.random ?? systemRandomBytes)
    self.keyring = keyring
    restoredKeys = nil
    return keyring
  }

  /// The token, signing in first if there is none.
  func currentOrNewToken() async throws -> String {
    if let token { return token }
    let token = try await signIn(withPassword: try knownPassword()).get().token
    self.token = token
    return token
  }

  /// Signs in with `credentials` and this device's credential, and keeps the device
  /// credential the server answers with.
  func signInCall(_ credentials: Credentials) async -> APIResult<SessionBody> {
    var credentials = credentials
    credentials.device = state.deviceCredential
    let result = await caller.signIn(credentials)
    if let device = result.value?.device { state.deviceCredential = device }
    if result.value != nil, let keys = passwordKeys?.keys,
      keys.signInSecret == credentials.password
    {
      pin(keys.derivation)
    }
    return result
  }

  /// Writes the keyring's keys to the credential store when their epoch is not the one kept,
  /// and remembers their re-keying in the state.
  func keepKeys() async throws {
    guard let keyring else { return }
    let keys = await keyring.keys
    rememberSeen(keys)
    guard let credentialStore, keys.epoch != keptEpoch else { return }
    try credentialStore.setAccountKeys(keys.rawRepresentation, for: username)
    keptEpoch = keys.epoch
  }

  /// Forgets an encrypted account's keys, here and in the credential store.
  /// Forgets the keyring and the restored keys, but not those in the credential store: the
  /// next ``openKeys()`` opens them with the password.
  func forgetKeysInMemory() {
    keyring = nil
    restoredKeys = nil
  }

  /// Waits until no sync and no re-keying runs: they run one at a time, so that an outbox is
  /// never pushed twice and nothing is sealed with keys a re-keying is replacing.
  ///
  /// Their outcomes are their callers' to handle; this only waits for them to end. Each task
  /// clears its own variable before it ends, so this loop always finds it gone (waiting on a
  /// finished task does not suspend: a loop that relied on the task's caller to clear it
  /// would spin on the actor, and the caller could never run).
  func waitForSyncAndRekeying() async {
    while true {
      if let running {
        _ = await running.result
      } else if let rekeying {
        _ = await rekeying.result
      } else {
        return
      }
    }
  }

  func forgetKeys() throws {
    guard isEncrypted else { return }
    keyring = nil
    restoredKeys = nil
    keptEpoch = nil
    try credentialStore?.setAccountKeys(nil, for: username)
  }
}
