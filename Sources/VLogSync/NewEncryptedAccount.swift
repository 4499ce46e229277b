public import VLogWire

/// A new end-to-end encrypted account, as its first device makes it: the account's keys, its
/// recovery key (to show the user once), and what the server gets — the sign-in secret in place
/// of the password, and the keys sealed to public keys it cannot open.
public struct NewEncryptedAccount: Sendable {
  /// The account's keys, which the device keeps.
  public let keys: AccountKeys
  /// The recovery key: shown once, never stored by VLog.
  public let recoveryKey: RecoveryKey
  /// The user name and the sign-in secret: what `POST /v1/accounts` and `POST /v1/sessions`
  /// send in place of the password.
  public let credentials: Credentials
  /// What the server keeps of the keys.
  public let serverKeys: NewAccountKeys

  /// Makes the keys of a new account `username` with `password`, stretched at `cost` under a
  /// new random salt, from `random` (a cryptographically secure source of bytes).
  ///
  /// - Throws: `WireError` for a password below the floor (`PasswordStrength`).
  public init(
    username: String, password: String, cost: KeyDerivationCost = .standard,
    random: (Int) -> [UInt8]
  ) throws {
    try PasswordStrength.check(password, username: username)
    try self.init(
      username: username,
      passwordKeys: try PasswordKeys(
        username: username, password: password,
        derivation: .new(cost: cost, random: random)),
      random: random)
  }

  /// Makes the keys of a new account `username` whose password's keys are `passwordKeys`.
  public init(username: String, passwordKeys: PasswordKeys, random: (Int) -> [UInt8]) throws {
    keys = try AccountKeys(random: random)
    recoveryKey = try RecoveryKey(random: random)
    let recoveryKeys = try recoveryKey.keys()
    credentials = Credentials(username: username, password: passwordKeys.signInSecret)
    serverKeys = NewAccountKeys(
      passwordPublicKey: passwordKeys.publicKey, recoveryPublicKey: recoveryKeys.publicKey,
      sealedForPassword: try keys.sealed(to: passwordKeys.publicKey, username: username),
      sealedForRecovery: try keys.sealed(to: recoveryKeys.publicKey, username: username),
      passwordAnchor: keys.anchor(for: passwordKeys),
      recoveryAnchor: keys.anchor(for: recoveryKeys),
      recoverySecret: recoveryKeys.signInSecret,
      keysAuthenticator: keys.keysAuthenticator(
        epoch: keys.epoch, passwordPublicKey: passwordKeys.publicKey,
        recoveryPublicKey: recoveryKeys.publicKey, username: username),
      keyDerivation: passwordKeys.derivation, requestKey: keys.requestPublicKey)
  }
}

extension AccountKeys {
  /// These keys sealed to a new password's keys, for a password change or a recovery, with
  /// what the devices vouch for the new public key and `recoveryPublicKey` with — one the
  /// device derived from the recovery key, or checked (``vouchedPublicKeys(of:username:)``).
  public func passwordSeal(
    to passwordKeys: PasswordKeys, recoveryPublicKey: [UInt8], username: String
  ) throws -> PasswordSeal {
    PasswordSeal(
      epoch: epoch, passwordPublicKey: passwordKeys.publicKey,
      sealedForPassword: try sealed(to: passwordKeys.publicKey, username: username),
      passwordAnchor: anchor(for: passwordKeys),
      keysAuthenticator: keysAuthenticator(
        epoch: epoch, passwordPublicKey: passwordKeys.publicKey,
        recoveryPublicKey: recoveryPublicKey, username: username),
      keyDerivation: passwordKeys.derivation)
  }

  /// Opens the account's keys the server keeps (`GET /v1/accounts/current/keys`) with the
  /// password's keys (or the recovery key's), for the account `username`.
  ///
  /// - Throws: ``AccountKeyError`` when they do not open, or are not of the sizes they must be.
  public init(opening body: AccountKeysBody, with keys: PasswordKeys, username: String)
    throws(AccountKeyError)
  {
    let sealed: [UInt8]
    let anchor: [UInt8]
    do {
      let forPassword = try NewAccountKeys.bytes(
        body.passwordPublicKey, "passwordPublicKey", count: NewAccountKeys.publicKeyBytes)
      let isPassword = keys.publicKey == forPassword
      sealed = try NewAccountKeys.sealed(
        isPassword ? body.sealedForPassword : body.sealedForRecovery,
        isPassword ? "sealedForPassword" : "sealedForRecovery")
      anchor = try NewAccountKeys.bytes(
        isPassword ? body.passwordAnchor : body.recoveryAnchor,
        isPassword ? "passwordAnchor" : "recoveryAnchor", count: NewAccountKeys.anchorBytes)
    } catch {
      throw AccountKeyError("the server's record of the account's keys is malformed: \(error)")
    }
    try self.init(opening: sealed, with: keys, username: username)
    guard epoch == body.epoch else {
      throw AccountKeyError(
        "the account's keys are of epoch \(epoch), the server says \(body.epoch)")
    }
    // Keys the server sealed to the public key itself open too: only the account's own keys
    // have the anchor the password (or the recovery key) vouches for them with.
    guard self.anchor(for: keys) == anchor else {
      throw AccountKeyError(
        "the keys the server gave are not the account's: the password does not vouch for them")
    }
    // The public keys and the epoch, once a device vouched for them (an older version's
    // account has no authenticator until it is recovered: nothing is sealed to its keys).
    if body.keysAuthenticator != nil { _ = try vouchedPublicKeys(of: body, username: username) }
  }
}
