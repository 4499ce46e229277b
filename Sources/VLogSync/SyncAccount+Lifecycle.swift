internal import Foundation
internal import VLog
public import VLogWire

/// The account's life: its password, its recovery, its sessions, its deletion.
extension SyncAccount {
  /// Changes the account's password. Every other session is signed out (their tokens
  /// revoked); this one stays signed in, and later sign-ins use the new password.
  ///
  /// - Throws: ``APIError``: `invalidCredentials` (403) if `current` is wrong, `invalidField`
  ///   (400) for a new password of the wrong length; `weakPassword` for a new password below
  ///   the floor, before anything is sent.
  ///
  /// For an encrypted account, the account's keys are sealed to the new password in the same
  /// change: the old password opens them no more, and no note is encrypted again.
  ///
  /// Unless `rekeying` is false, an encrypted account is then re-keyed (``rekey()``): a
  /// password is changed most often because it, or a device, was lost, so by default keys a
  /// lost device kept open nothing written from now on and make no event the account's
  /// devices apply, and a new recovery key replaces the account's. A clear account has no
  /// keys: `rekeying` changes nothing for it.
  ///
  /// - Returns: For an encrypted account re-keyed, the new recovery key, to show the user
  ///   once; else nil.
  @discardableResult
  public func changePassword(from current: String, to new: String, rekeying: Bool = true)
    async throws -> RecoveryKey?
  {
    // Secrets drawn from both passwords, never the passwords; the new one under the account's
    // salt.
    try PasswordStrength.checkNew(new, username: username, field: "newPassword")
    let currentSecret = try await serverPassword(current)
    let newKeys = try await passwordKeys(for: new, derivation: derivationForNewPassword())
    for attempt in 0..<2 {
      let change: PasswordChange
      if let keyring = try await openKeys() {
        // Sealed at the account's current epoch: a rotation elsewhere is followed first.
        let body = try await keyring.refresh()
        let keys = await keyring.keys
        let recovery = try keys.vouchedPublicKeys(of: body, username: username).recovery
        change = PasswordChange(
          currentPassword: currentSecret, newPassword: newKeys.signInSecret,
          keys: try keys.passwordSeal(
            to: newKeys, recoveryPublicKey: recovery, username: username))
      } else {
        change = PasswordChange(
          currentPassword: currentSecret, newPassword: newKeys.signInSecret,
          keyDerivation: newKeys.derivation)
      }
      do {
        _ = try await call { caller, token in await caller.changePassword(change, token: token) }
        break
      } catch {
        // A rotation between the refresh and the change: sealed again at the new epoch.
        guard error.body?.code == .keysChanged, attempt == 0 else { throw error }
      }
    }
    password = new
    // The derivation the server took the new secret with, not the cache's (another task may
    // have drawn keys meanwhile).
    if isEncrypted { remember(newKeys.derivation.version) }
    pin(newKeys.derivation)
    try saveToken()
    return rekeying && isEncrypted ? try await rekey() : nil
  }

  /// Recovers an end-to-end encrypted account whose password is lost, with its recovery key:
  /// opens the account's keys with it, seals them to `newPassword`, which becomes the
  /// account's password (every session is signed out), then signs in with it.
  ///
  /// - Parameters:
  ///   - recoveryKey: The recovery key as shown at sign-up (dashes and case do not matter).
  ///   - newPassword: The account's password from now on.
  ///   - rekeying: Whether to re-key the account once recovered (``rekey()``), as it is by
  ///     default: keys a lost device kept open nothing written from now on and make no event
  ///     the account's devices apply, and a new recovery key replaces the one used.
  /// - Returns: With `rekeying`, the new recovery key, to show the user once; else nil.
  /// - Throws: ``AccountKeyError`` for a recovery key that is not one (a typo: its checksum
  ///   fails); ``APIError`` `invalidCredentials` (401) for one that is not the account's, or
  ///   `invalidRequest` for an account that is not encrypted.
  @discardableResult
  public func recover(recoveryKey: String, newPassword: String, rekeying: Bool = true)
    async throws -> RecoveryKey?
  {
    guard encryption != nil else {
      throw APIError(.invalidRequest, "only an end-to-end encrypted account has a recovery key")
    }
    try store.checkAccount(binding)
    var seen = seenKeys
    if let held = await keyring?.keys ?? restoredKeys {
      seen = (max(seen.epoch, held.epoch), max(seen.rekeyedAt, held.rekeyedAt))
    }
    let recovered = try await caller.recoverEncryptedAccountKeepingSalt(
      username: username, recoveryKey: recoveryKey, newPassword: newPassword,
      cost: encryptionCost ?? .standard, pinned: state.keyDerivation,
      accepting: { [seen] keys in try Self.check(keys, replacing: nil, seen: seen) })
    pin(recovered.derivation)
    // Opened again with the new password, as any device will.
    isEncrypted = true
    try forgetKeys()
    try await signIn(password: newPassword)
    return rekeying ? try await rekey() : nil
  }

  /// Deletes the account on the server: every event, blob, token and record of it is erased
  /// there. This store keeps its notes (as a store that never synced, with nothing
  /// acknowledged) and stays bound to the account's name on that server; the account forgets
  /// its token, cursor and status.
  ///
  /// - Throws: ``APIError``: `invalidCredentials` (403) if `password` is wrong.
  public func deleteAccount(password: String) async throws {
    let confirmed = try await serverPassword(password)
    _ = try await call { caller, token in
      await caller.deleteAccount(password: confirmed, token: token)
    }
    try forgetKeys()
    token = nil
    self.password = nil
    state = SyncState(username: username, server: state.server)
    try saveToken()
    try saveState()
  }

  /// The account's sessions whose tokens have not expired; `SessionInfo/current` marks this
  /// one.
  public func sessions() async throws(APIError) -> [SessionInfo] {
    try await call { caller, token in await caller.sessions(token: token) }.sessions
  }

  /// Signs out one session of the account (another device, say) by its id from
  /// ``sessions()``.
  ///
  /// - Throws: ``APIError``: `notFound` (404) for an id the account has no session with.
  public func revokeSession(id: String) async throws(APIError) {
    _ = try await call { caller, token in await caller.revokeSession(id: id, token: token) }
  }

  /// Signs out one session of the account, then, with `rekeying`, re-keys the account
  /// (``rekey()``): what the signed-out device kept of the keys opens
  /// nothing written from now on.
  ///
  /// - Returns: With `rekeying`, the new recovery key, to show the user once; else nil.
  @discardableResult
  public func revokeSession(id: String, rekeying: Bool) async throws -> RecoveryKey? {
    try await revokeSession(id: id)
    return rekeying ? try await rekey() : nil
  }
}
