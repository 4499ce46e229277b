internal import VLog
internal import VLogWire

extension SyncAccount {
  /// Re-keys an end-to-end encrypted account, so that keys a lost or signed-out device kept
  /// open nothing written from now on: a new content key that no link leads to, a new key for
  /// every note and attachment for what is sealed from now on, and a new recovery key in
  /// place of the account's.
  ///
  /// It needs the password (the account signed in with it): the new keys are sealed to the
  /// public key drawn from it here, never to one the server names, and the server takes a
  /// re-keying only with it. The account's other devices open the new keys with the password
  /// at their next sync; one that does not know it (it kept its keys, and was not signed in
  /// with the password) is told to sign in (``APIError/Code/signedOut``). Done by default
  /// with a password change (``changePassword(from:to:rekeying:)``) and a recovery
  /// (``recover(recoveryKey:newPassword:rekeying:)``), and offered with a session's
  /// revocation (``revokeSession(id:rekeying:)``).
  ///
  /// - Returns: The new recovery key, to show the user once (also in ``recoveryKey``).
  /// - Throws: ``APIError`` `invalidRequest` for an account that is not encrypted,
  ///   `signedOut` without the password; ``AccountKeyError`` or ``APIError`` when the keys
  ///   cannot be opened or replaced.
  @discardableResult
  public func rekey() async throws -> RecoveryKey {
    // One at a time with syncs: a sync running now ends first, and none starts until the
    // re-keying has: nothing is sealed with keys it is replacing.
    await waitForSyncAndRekeying()
    let task = Task {
      defer { rekeying = nil }
      return try await rekeyNow()
    }
    rekeying = task
    return try await task.value
  }

  func rekeyNow() async throws -> RecoveryKey {
    guard let keyring = try await openKeys() else {
      throw APIError(.invalidRequest, "only an end-to-end encrypted account has keys to replace")
    }
    let passwordKeys = try await passwordKeys(
      for: try knownPassword(), derivation: try await currentDerivation())
    let recoveryKey = try RecoveryKey(random: encryption?.random ?? systemRandomBytes)
    try await keyring.rekey(
      username: username, passwordKeys: passwordKeys, recoveryKey: recoveryKey,
      retiringBefore: RetiredEventKey.cutoff(
        deviceTime: now(), serverSkewMilliseconds: state.clockSkewMilliseconds ?? 0))
    try await keepKeys()
    try saveState()
    self.recoveryKey = recoveryKey
    return recoveryKey
  }

  /// Opens the account's keys again with the password, after another device re-keyed it: the
  /// keys this device held lead to them no more.
  ///
  /// - Throws: ``APIError/Code/signedOut`` when this device does not know the password;
  ///   ``AccountKeyError`` when the server names keys older than those this device held.
  func reopenReplacedKeys() async throws {
    let held = await keyring?.keys ?? restoredKeys
    // The keys kept stay kept until the new ones open, and are newer: an answer that merely
    // claims a re-keying does not erase them, nor replace them with older keys.
    forgetKeysInMemory()
    do {
      try await openKeys(replacing: held)
    } catch {
      // Held still: the next sync is told the same again, and asks the same.
      if keyring == nil { restoredKeys = held }
      if let error = error as? APIError, error.code == .signedOut {
        throw APIError(
          .signedOut,
          "the end-to-end encrypted account '\(username)' was re-keyed on another device: "
            + "sign in with the password to open its new keys")
      }
      throw error
    }
  }

  /// Brings the server's record of the account's keys forward to those this device holds,
  /// when it is of an older epoch: the server was restored from a backup taken before the keys
  /// last rotated (``AccountKeyring/bringForward(from:username:isDeleted:)``). The record's keys open
  /// with the password only: a device that does not know it is told to sign in.
  ///
  /// - Throws: ``APIError/Code/signedOut`` when this device does not know the password;
  ///   ``AccountKeyError`` when the record's keys are not the held keys before rotations.
  func bringKeysForward() async throws {
    guard let keyring = try await openKeys() else { return }
    guard let password else {
      throw APIError(
        .signedOut,
        "the server's record of the keys of the end-to-end encrypted account '\(username)' is "
          + "older than the keys this device holds: the server was restored from a backup "
          + "taken before they last changed. Sign in with the password to bring it forward")
    }
    let body = try await call { caller, token in await caller.accountKeys(token: token) }
    let derived = try await passwordKeys(for: password, derivation: try await currentDerivation())
    let restored = try AccountKeys(opening: body, with: derived, username: username)
    // What this device knows was deleted: its tombstones, and the attachments of deleted notes.
    let store = self.store
    let tombstones = Set(try store.deletedObjects().map(\.id))
    try await keyring.bringForward(
      from: restored, username: username,
      isDeleted: { object in
        if tombstones.contains(object) { return true }
        guard let attachment = try store.attachment(AttachmentID(object)) else { return false }
        return tombstones.contains(attachment.noteID.identifier)
      })
    try await keepKeys()
    try saveState()
  }

  /// The newest epoch and re-keying of the keys this device has held, in the state file.
  var seenKeys: (epoch: UInt64, rekeyedAt: UInt64) {
    (state.keysEpoch ?? 0, state.keysRekeyedAt ?? 0)
  }

  /// Remembers, in the state, the epoch and the re-keying of `keys`, which this device holds.
  func rememberSeen(_ keys: AccountKeys) {
    state.keysEpoch = max(state.keysEpoch ?? 0, keys.epoch)
    state.keysRekeyedAt = max(state.keysRekeyedAt ?? 0, keys.rekeyedAt)
  }

  /// Checks that `keys`, opened with the password or the recovery key, are not older than
  /// keys this device held or saw: of a later epoch and a later re-keying than `held`, keys
  /// a re-keying replaced, and of no earlier epoch nor re-keying than `seen`. Keys from
  /// before a re-keying open with the password too, and a server with a lost device's keys
  /// can make such keys up (their anchor is one it kept); only keys a re-keying made since
  /// carry a vouching key it never saw.
  ///
  /// - Throws: ``AccountKeyError`` for older keys.
  static func check(
    _ keys: AccountKeys, replacing held: AccountKeys?, seen: (epoch: UInt64, rekeyedAt: UInt64)
  ) throws(AccountKeyError) {
    if let held, keys.epoch <= held.epoch {
      throw AccountKeyError(
        "the server names keys of epoch \(keys.epoch), not newer than epoch \(held.epoch) this "
          + "device held")
    }
    // Later keys of the same re-keying are a rotation the held keys' links do not lead to:
    // a restored record brought forward past them.
    if let held, keys.rekeyedAt <= held.rekeyedAt, !held.isRotation(to: keys) {
      throw AccountKeyError(
        "the server names keys of the re-keying at epoch \(keys.rekeyedAt) in place of keys "
          + "this device held, of the re-keying at epoch \(held.rekeyedAt): no re-keying since "
          + "made them, and they are refused")
    }
    if keys.rekeyedAt < seen.rekeyedAt {
      throw AccountKeyError(
        "the server names keys of the re-keying at epoch \(keys.rekeyedAt), older than the "
          + "re-keying at epoch \(seen.rekeyedAt) whose keys this device opened: they are refused")
    }
    if keys.epoch < seen.epoch {
      throw AccountKeyError(
        "the server names keys of epoch \(keys.epoch), older than epoch \(seen.epoch) this "
          + "device has opened: they are refused")
    }
  }
}
