internal import Foundation
public import VLog
internal import VLogWire

/// Rotations of the account's content key: after an erasure, a re-keying, and bringing a
/// server restored from an older backup forward.
extension AccountKeyring {
  /// Rotates the content key if the server says a key was erased since the last rotation:
  /// every note's key the account holds is re-wrapped by a new content key, and the old one
  /// is forgotten. Another device's rotation at the same time wins; this one follows it.
  ///
  /// - Parameter username: The account's user name, which the new keys' seals are bound to.
  /// - Returns: Whether this call rotated.
  @discardableResult
  public func rotateIfDue(username: String) async throws -> Bool {
    for _ in 0..<3 {
      let body = try await refresh()
      guard body.rotationDue else { return false }
      let (next, link) = try keys.rotated(random: random)
      if try await rotate(from: body, holding: keys, to: next, link: link, username: username)
        != nil
      {
        keys = next
        return true
      }
    }
    throw AccountKeyError("the account's keys kept changing during three rotations")
  }

  /// Re-keys the account: a new content key that no link leads to, a new key for every note
  /// and attachment for what is sealed from now on (each keeps the keys it had, to open what
  /// they sealed), and `recoveryKey` in place of the account's recovery key.
  ///
  /// Nothing the server names feeds the new keys' seals: they are sealed to the public key of
  /// `passwordKeys`, drawn from the password here (and refused if the server's record names
  /// another), and to the new recovery key's. The server takes a re-keying only with the
  /// password.
  ///
  /// Keys a device held before (a lost phone's, kept in its credential store) then open
  /// nothing sealed later, even with every byte the server holds: no link leads from them to
  /// the new content key, and no key they unwrap seals anything new. The account's other
  /// devices open the new keys with the password at their next sync. The tag key stays: tags
  /// keep their names. Events keep their authenticators: the key they were made with is
  /// retired, good for events stamped before `cutoff` only (see the article on end-to-end
  /// encryption for what that leaves a lost device's holder).
  ///
  /// - Parameters:
  ///   - username: The account's user name, which the new keys' seals are bound to.
  ///   - passwordKeys: The keys drawn from the account's password.
  ///   - recoveryKey: The recovery key from now on.
  ///   - cutoff: When the key events were authenticated with until now stops vouching for
  ///     them, in milliseconds since 1970: events stamped from then on that it authenticated
  ///     are set aside (`RetiredEventKey.cutoff(deviceTime:serverSkewMilliseconds:)`).
  public func rekey(
    username: String, passwordKeys: PasswordKeys, recoveryKey: RecoveryKey,
    retiringBefore cutoff: UInt64
  ) async throws {
    for _ in 0..<3 {
      let body = try await refresh()
      let next = try keys.rekeyed(random: random, retiringBefore: cutoff)
      let rekeying = Rekeying(password: passwordKeys, recovery: recoveryKey)
      if let renewed = try await rotate(
        from: body, holding: keys, to: next, link: nil, username: username, rekeying: rekeying)
      {
        keys = next
        // What this device seals from now on, it seals with the renewed keys; a key the
        // listing left out (its object deleted meanwhile, or withheld) is looked up again,
        // never kept.
        for object in objectKeys.keys { objectKeys[object] = renewed[object] }
        return
      }
    }
    throw AccountKeyError("the account's keys kept changing during three re-keyings")
  }

  /// Brings the server's record of the account's keys forward to the keys this keyring holds,
  /// when the record is of an older epoch: the server was restored from a backup taken
  /// before the keys last rotated. The keyring never goes back to the record's keys — they
  /// were forgotten so that copies made before cannot open what was erased since — but it
  /// cannot follow the record without them either: `restored`, the record's keys opened
  /// with the password, unwrap the notes' and attachments' keys the server holds, and one
  /// rotation, straight from the record's epoch to this keyring's, re-wraps them, as the
  /// rotations the restore lost did. (Straight: keys made up for the epochs between would
  /// not be the keys other devices hold of them.)
  ///
  /// The keys of notes and attachments `isDeleted` says this device knows were deleted are not
  /// re-wrapped: a record from before a deletion still holds the deleted note's key, and
  /// re-wrapped by keys every device holds it would open the note again. They get new random
  /// keys, which open nothing. (A device at the record's epoch or later pulled every deletion
  /// the rotations since were made for; one it has not pulled yet — a note it does not know —
  /// is re-wrapped, as its events may be live ones this device has yet to pull.) Only rotations are brought forward: keys a re-keying replaced may
  /// be a lost device's, and a server that names them is refused, whatever the password
  /// opens.
  ///
  /// - Parameters:
  ///   - restored: The keys of the server's record, opened with the password.
  ///   - username: The account's user name, which the seals are bound to.
  ///   - isDeleted: Whether this device knows the note or attachment of that id was deleted.
  /// - Throws: ``AccountKeyError`` when `restored` are not the keys held here before
  ///   rotations (the account was re-keyed since, or they are not this account's), or the
  ///   account's keys changed meanwhile; ``APIError`` when the server does not take it; what
  ///   `isDeleted` throws (then nothing is sent).
  public func bringForward(
    from restored: AccountKeys, username: String, isDeleted: @Sendable (Identifier) throws -> Bool
  ) async throws {
    guard restored.epoch < keys.epoch else { return }
    guard restored.isRotation(to: keys) else {
      throw AccountKeyError(
        "the server's record of the account's keys is of epoch \(restored.epoch), from before "
          + "the re-keying at epoch \(keys.rekeyedAt) whose keys this device holds: keys a "
          + "re-keying replaced may be a lost device's, and are refused. The server was "
          + "restored from a backup taken before the re-keying (its operator can restore a "
          + "later one), or it lies")
    }
    let body = try await caller.accountKeys(since: restored.epoch, token: token()).get()
    guard body.epoch == restored.epoch,
      try await rotate(
        from: body, holding: restored, to: keys, link: try restored.link(to: keys),
        username: username, rewrapping: { try !isDeleted($0) }) != nil
    else {
      throw AccountKeyError(
        "the account's keys changed while they were brought forward; sync again",
        changedMeanwhile: true)
    }
  }

  /// What a re-keying seals to besides the new keys: the password's keys, and the new
  /// recovery key.
  struct Rekeying {
    var password: PasswordKeys
    var recovery: RecoveryKey
  }

  /// Rotates the server's record from the epoch `body` names, whose keys are `current`, to
  /// `next`: with `link` (a rotation), or re-keying without one to the password's keys and a
  /// new recovery key. Every note's and attachment's key the server holds is re-wrapped by
  /// `next`, renewed too when re-keying — or, if `rewrapping` says it is not to be, replaced
  /// by a new random key.
  ///
  /// - Returns: The renewed keys (none unless re-keying); nil when the account's keys changed
  ///   meanwhile (another device's rotation): refresh and try again.
  private func rotate(
    from body: AccountKeysBody, holding current: AccountKeys, to next: AccountKeys,
    link: [UInt8]?, username: String, rekeying: Rekeying? = nil,
    rewrapping: (Identifier) throws -> Bool = { _ in true }
  ) async throws -> [Identifier: ObjectKey]? {
    let passwordPublicKey: [UInt8]
    let recoveryPublicKey: [UInt8]
    var recovery: NewRecoveryKey?
    if let rekeying {
      // Drawn here, not named by the server: a server, with the keys a lost device kept,
      // could vouch for public keys of its own.
      passwordPublicKey = rekeying.password.publicKey
      guard Data(base64Encoded: body.passwordPublicKey).map(Array.init) == passwordPublicKey
      else {
        throw AccountKeyError(
          "the server's record of the account names another password's public key than this "
            + "password's: the account is not re-keyed")
      }
      let recoveryKeys = try rekeying.recovery.keys()
      recoveryPublicKey = recoveryKeys.publicKey
      recovery = NewRecoveryKey(
        recoveryPublicKey: recoveryKeys.publicKey, recoveryAnchor: next.anchor(for: recoveryKeys),
        recoverySecret: recoveryKeys.signInSecret)
    } else {
      // The public keys the new keys are sealed to, as the account's devices vouched for
      // them: a server that names keys of its own gets nothing sealed to them.
      let publicKeys = try current.vouchedPublicKeys(of: body, username: username)
      (passwordPublicKey, recoveryPublicKey) = (publicKeys.password, publicKeys.recovery)
    }
    var rewrapped: [Identifier: [UInt8]] = [:]
    var renewed: [Identifier: ObjectKey] = [:]
    var after: Identifier?
    while true {
      let page = try await caller.listObjectKeys(after: after, token: token()).get()
      guard page.epoch == current.epoch else { return nil }
      let wrapped = try page.validated()
      for (object, bytes) in wrapped {
        guard try rewrapping(object) else {
          rewrapped[object] = try next.wrap(try ObjectKey(random: random), of: object)
          continue
        }
        var key = try current.unwrap(bytes, of: object)
        if rekeying != nil {
          key = try key.renewed(random: random)
          renewed[object] = key
        }
        rewrapped[object] = try next.wrap(key, of: object)
      }
      guard page.more, let last = wrapped.keys.max() else { break }
      after = last
    }
    let rotation = KeyRotation(
      epoch: current.epoch, nextEpoch: next.epoch == current.epoch + 1 ? nil : next.epoch,
      sealedForPassword: try next.sealed(to: passwordPublicKey, username: username),
      sealedForRecovery: try next.sealed(to: recoveryPublicKey, username: username),
      link: link, recovery: recovery,
      passwordAnchor: rekeying.map { next.anchor(for: $0.password) },
      password: rekeying?.password.signInSecret,
      keys: rewrapped,
      keysAuthenticator: next.keysAuthenticator(
        epoch: next.epoch, passwordPublicKey: passwordPublicKey,
        recoveryPublicKey: recoveryPublicKey, username: username),
      requestKey: rekeying == nil ? nil : next.requestPublicKey)
    // Signed with the keys rotated from: the server takes it only from the account's devices.
    let result = await caller.signingWrites(with: current.requestSigningKey).rotateKeys(
      rotation, token: try await token())
    if result.error?.body?.code == .keysChanged { return nil }
    _ = try result.get()
    return renewed
  }
}
