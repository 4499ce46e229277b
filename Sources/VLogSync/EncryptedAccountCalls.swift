internal import Foundation
internal import VLogWire

/// The calls that manage an end-to-end encrypted account without a store: what ``SyncAccount``
/// does for an app, for a tool that manages accounts (`vlog account`).
extension APICaller {
  /// Creates an end-to-end encrypted account: its keys made here, sealed to the password's
  /// and a new recovery key's public keys.
  ///
  /// - Returns: The new account: its keys, and the recovery key to show the user once.
  /// - Throws: ``APIError`` `weakPassword` for a password below the floor
  ///   (`PasswordStrength/check(_:username:field:)`), before anything is sent; from the
  ///   server (`accountExists`, `invalidField`);
  ///   ``AccountKeyError`` when the keys cannot be made.
  public func createEncryptedAccount(
    username: String, password: String, options: EncryptionOptions = .standard
  ) async throws -> NewEncryptedAccount {
    try PasswordStrength.checkNew(password, username: username, field: "password")
    let account = try NewEncryptedAccount(
      username: username,
      passwordKeys: try await PasswordKeys.stretching(
        username: username, password: password,
        derivation: .new(cost: options.cost, random: options.random)),
      random: options.random)
    _ = try await createAccount(account.credentials, keys: account.serverKeys).get()
    return account
  }

  /// Recovers an end-to-end encrypted account whose password is lost, with its recovery key:
  /// opens the account's keys with it, seals them to `newPassword`, which becomes the
  /// account's password; every session is signed out.
  ///
  /// - Parameters:
  ///   - username: The account's user name.
  ///   - recoveryKey: The recovery key, as the user typed it.
  ///   - newPassword: The account's password from now on.
  ///   - cost: What the new password is stretched at, at least.
  ///   - pinned: The key derivation this device signed in with, if it did: the new password
  ///     keeps its salt (`KeyDerivation/forNewPassword(current:cost:random:)`), and the
  ///     server's answer is checked against it.
  ///   - accepting: Checks the keys the recovery key opened before anything is sealed to the
  ///     new password: a device that held keys refuses older ones here.
  /// - Returns: The account's keys.
  /// - Throws: ``AccountKeyError`` for a recovery key that is not one (its checksum fails);
  ///   ``APIError`` `weakPassword` for a new password below the floor, `invalidCredentials`
  ///   (401) for a recovery key that is not the account's; what `accepting` throws.
  @discardableResult
  public func recoverEncryptedAccount(
    username: String, recoveryKey: String, newPassword: String,
    cost: KeyDerivationCost = .standard, pinned: KeyDerivation? = nil,
    accepting: (AccountKeys) throws -> Void = { _ in }
  ) async throws -> AccountKeys {
    try await recoverEncryptedAccountKeepingSalt(
      username: username, recoveryKey: recoveryKey, newPassword: newPassword, cost: cost,
      pinned: pinned, accepting: accepting
    ).keys
  }

  /// ``recoverEncryptedAccount(username:recoveryKey:newPassword:cost:pinned:accepting:)``,
  /// answering the new password's key derivation too.
  func recoverEncryptedAccountKeepingSalt(
    username: String, recoveryKey: String, newPassword: String, cost: KeyDerivationCost,
    pinned: KeyDerivation?, accepting: (AccountKeys) throws -> Void
  ) async throws -> (keys: AccountKeys, derivation: KeyDerivation) {
    let name = Credentials(username: username, password: "").normalizedUsername
    try PasswordStrength.checkNew(newPassword, username: name, field: "newPassword")
    let recovery = try RecoveryKey(recoveryKey).keys()
    let credentials = RecoveryCredentials(username: name, recoverySecret: recovery.signInSecret)
    let sealed = try await recoveryKeys(credentials).get()
    let keys = try AccountKeys(opening: sealed, with: recovery, username: name)
    try accepting(keys)
    // One salt per account: the one the server names, checked as a sign-in's would be (only
    // its salt is used: the lost password is not stretched with it).
    let named = try await signInParameters(
      of: name, floor: cost, pinned: pinned, allowingVersionOne: true
    ).keyDerivation
    let newKeys = try await PasswordKeys.stretching(
      username: name, password: newPassword,
      derivation: .forNewPassword(current: named, cost: cost, random: systemRandomBytes))
    _ = try await recover(
      AccountRecovery(
        credentials: credentials, newPassword: newKeys.signInSecret,
        keys: try keys.passwordSeal(
          to: newKeys, recoveryPublicKey: recovery.publicKey, username: name))
    ).get()
    return (keys, newKeys.derivation)
  }

  /// Changes an end-to-end encrypted account's password with a token of it: opens the
  /// account's keys with `current` and seals them to `new` in the same change. Every other
  /// session is signed out.
  ///
  /// - Throws: ``AccountKeyError`` when `current` does not open the keys; ``APIError``
  ///   `weakPassword` for a new password below the floor, or from the server
  ///   (`invalidCredentials` 403 for a wrong `current`).
  public func changeEncryptedPassword(
    username: String, from current: String, to new: String, cost: KeyDerivationCost = .standard,
    token: String
  ) async throws {
    let name = Credentials(username: username, password: "").normalizedUsername
    try PasswordStrength.checkNew(new, username: name, field: "newPassword")
    let currentKeys = try await PasswordKeys.stretching(
      username: name, password: current,
      derivation: try await signInParameters(of: name, floor: cost).keyDerivation)
    let newKeys = try await PasswordKeys.stretching(
      username: name, password: new,
      derivation: .forNewPassword(
        current: currentKeys.derivation, cost: cost, random: systemRandomBytes))
    // Sealed at the account's epoch; a rotation in between is read again, once.
    for attempt in 0..<2 {
      let body = try await accountKeys(token: token).get()
      let keys = try AccountKeys(opening: body, with: currentKeys, username: name)
      // The recovery key's public key as the devices vouched for it: never one the server
      // names alone.
      let recovery = try keys.vouchedPublicKeys(of: body, username: name).recovery
      let result = await changePassword(
        PasswordChange(
          currentPassword: currentKeys.signInSecret, newPassword: newKeys.signInSecret,
          keys: try keys.passwordSeal(
            to: newKeys, recoveryPublicKey: recovery, username: name)),
        token: token)
      if result.error?.body?.code == .keysChanged, attempt == 0 { continue }
      _ = try result.get()
      return
    }
  }
}

extension APICaller {
  /// Re-keys an end-to-end encrypted account with a token of it
  /// (``AccountKeyring/rekey(username:passwordKeys:recoveryKey:retiringBefore:)``): opens the account's keys
  /// with `password`, then replaces them with keys no link leads to, every note's and
  /// attachment's key renewed, and a new recovery key. Keys a lost device kept open nothing
  /// written afterwards; the account's devices open the new ones with the password.
  ///
  /// - Returns: The new recovery key, to show the user once.
  /// - Throws: ``AccountKeyError`` when `password` does not open the keys; ``APIError`` from
  ///   the server.
  public func rekeyEncryptedAccount(
    username: String, password: String, cost: KeyDerivationCost = .standard, token: String,
    random: @escaping @Sendable (Int) -> [UInt8] = systemRandomBytes
  ) async throws -> RecoveryKey {
    let name = Credentials(username: username, password: "").normalizedUsername
    let passwordKeys = try await PasswordKeys.stretching(
      username: name, password: password,
      derivation: try await signInParameters(of: name, floor: cost).keyDerivation)
    let answer = await accountKeys(token: token)
    let keys = try AccountKeys(opening: try answer.get(), with: passwordKeys, username: name)
    let keyring = AccountKeyring(keys: keys, caller: self, token: { token }, random: random)
    let recoveryKey = try RecoveryKey(random: random)
    // The retired key's cutoff by the server's clock, as its answer's Date says (bounded by the
    // cutoff's own clamp, as every answer of a server is untrusted).
    let now = Date()
    try await keyring.rekey(
      username: name, passwordKeys: passwordKeys, recoveryKey: recoveryKey,
      retiringBefore: RetiredEventKey.cutoff(
        deviceTime: now,
        serverSkewMilliseconds: Self.clockSkew(of: answer.response, at: now) ?? 0))
    return recoveryKey
  }

  /// The server's clock minus this device's, in milliseconds, from a response's `Date` header
  /// (a second's precision); nil without one.
  static func clockSkew(of response: TransportResponse?, at now: Date) -> Int64? {
    guard let text = response?.headers["date"] else { return nil }
    let format = DateFormatter()
    format.locale = Locale(identifier: "en_US_POSIX")
    format.timeZone = TimeZone(identifier: "GMT")
    format.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
    guard let date = format.date(from: text) else { return nil }
    return Int64((date.timeIntervalSince(now) * 1000).rounded())
  }
}

extension APICaller {
  /// The sign-in parameters of `username`, with its key derivation checked against the
  /// device's own cost `floor` and what it signed in with before
  /// (`KeyDerivation/checked(own:encrypted:pinned:seenVersion:allowingVersionOne:)`).
  ///
  /// - Throws: ``APIError`` when the server cannot be asked; ``AccountKeyError`` for a
  ///   derivation the device refuses.
  public func signInParameters(
    of username: String, floor: KeyDerivationCost, pinned: KeyDerivation? = nil,
    seenVersion: Int? = nil, allowingVersionOne: Bool = false
  ) async throws -> SignInParameters {
    var parameters = try await signInParameters(username: username).get()
    parameters.keyDerivation = try parameters.keyDerivation.checked(
      own: floor, encrypted: parameters.encrypted, pinned: pinned, seenVersion: seenVersion,
      allowingVersionOne: allowingVersionOne)
    return parameters
  }

  /// The secret that signs in as `username` with `password`, stretched as the server says
  /// (``signInParameters(of:floor:pinned:seenVersion:allowingVersionOne:)``), whatever the account's kind:
  /// no password leaves the device.
  ///
  /// - Parameters:
  ///   - username: The account's user name.
  ///   - password: The password, which never leaves the device.
  ///   - floor: The device's own cost: the least it accepts, and the base of what is too
  ///     costly (`KeyDerivation.checked(own:encrypted:pinned:seenVersion:allowingVersionOne:)`).
  ///   - encrypted: Whether the caller knows the account is end-to-end encrypted: an answer
  ///     that says it is clear is then refused.
  /// - Returns: The password's keys (their ``PasswordKeys/signInSecret`` signs in) and whether
  ///   the server says the account is encrypted.
  /// - Throws: ``APIError`` when the server cannot be asked; ``AccountKeyError`` for a
  ///   derivation or an answer the device refuses.
  public func passwordKeys(
    username: String, password: String, floor: KeyDerivationCost, encrypted: Bool = false
  ) async throws -> (keys: PasswordKeys, encrypted: Bool) {
    let name = Credentials(username: username, password: "").normalizedUsername
    let parameters = try await signInParameters(of: name, floor: floor)
    guard parameters.encrypted || !encrypted else {
      throw AccountKeyError(
        "the server says '\(name)' is not an end-to-end encrypted account (or there is no "
          + "such account): nothing is stretched for it")
    }
    let keys = try await PasswordKeys.stretching(
      username: name, password: password, derivation: parameters.keyDerivation)
    return (keys, parameters.encrypted)
  }

  /// Signs in as `username` as a device of this version does: with the secret drawn from
  /// `password` as the server says (``passwordKeys(username:password:floor:encrypted:)``),
  /// never the password; a clear account whose server kept the hash of the password itself
  /// (version 3) moves to a new version 2 derivation at `floor` in the same call
  /// (``signInCredentials(username:keys:password:cost:device:random:)``).
  ///
  /// - Returns: The session (its token and this device's credential), and the keys the
  ///   account signs in with from now on (their secret confirms the password to the server).
  /// - Throws: ``APIError`` from the server (`invalidCredentials`); ``AccountKeyError`` for a
  ///   derivation the device refuses.
  public func signIn(
    username: String, password: String, floor: KeyDerivationCost = .standard,
    device: String? = nil
  ) async throws -> (session: SessionBody, keys: PasswordKeys) {
    let keys = try await passwordKeys(username: username, password: password, floor: floor).keys
    let (credentials, kept) = try await Self.signInCredentials(
      username: username, keys: keys, password: password, cost: floor, device: device)
    return (try await signIn(credentials).get(), kept)
  }

  /// The credentials that sign in as `username` with `keys`, drawn from `password`: their
  /// secret — and for keys of version 3 (the server's hash of a clear account's password,
  /// reproduced), the upgrade to a new version 2 derivation at `cost`, which the server then
  /// keeps in place of the hash it held (`Credentials.upgrade`).
  ///
  /// - Returns: The credentials, and the keys the account signs in with once they are taken.
  public static func signInCredentials(
    username: String, keys: PasswordKeys, password: String, cost: KeyDerivationCost,
    device: String? = nil, random: @escaping @Sendable (Int) -> [UInt8] = systemRandomBytes
  ) async throws -> (credentials: Credentials, keys: PasswordKeys) {
    guard keys.derivation.version == KeyDerivation.serverHashVersion else {
      return (Credentials(username: username, password: keys.signInSecret, device: device), keys)
    }
    let upgraded = try await PasswordKeys.stretching(
      username: username, password: password, derivation: .new(cost: cost, random: random))
    let upgrade = SecretUpgrade(secret: upgraded.signInSecret, keyDerivation: upgraded.derivation)
    return (
      Credentials(
        username: username, password: keys.signInSecret, device: device, upgrade: upgrade),
      upgraded
    )
  }

  /// Changes the password of an account whose notes the server reads, with a token of it: a
  /// secret drawn from each password, the new one under the account's salt (one salt per
  /// account) when it is of version 2 at no less than `floor`, else a new one. Every other
  /// session is signed out.
  ///
  /// - Throws: ``APIError`` `weakPassword` for a new password below the floor, before anything
  ///   is sent, or from the server (`wrongPassword` 403 for a wrong `current`);
  ///   ``AccountKeyError`` for a derivation the device refuses.
  public func changeClearPassword(
    username: String, from current: String, to new: String,
    floor: KeyDerivationCost = .standard, token: String
  ) async throws {
    let name = Credentials(username: username, password: "").normalizedUsername
    try PasswordStrength.checkNew(new, username: name, field: "newPassword")
    let (currentKeys, _) = try await passwordKeys(
      username: name, password: current, floor: floor)
    let newKeys = try await PasswordKeys.stretching(
      username: name, password: new,
      derivation: .forNewPassword(
        current: currentKeys.derivation, cost: floor, random: systemRandomBytes))
    _ = try await changePassword(
      PasswordChange(
        currentPassword: currentKeys.signInSecret, newPassword: newKeys.signInSecret,
        keyDerivation: newKeys.derivation),
      token: token
    ).get()
  }

  /// Creates an account whose notes the server reads: its password stretched here under a
  /// new salt at `cost` (the server keeps only the hash of the secret drawn from it), after
  /// the same strength check an encrypted account's password passes.
  ///
  /// - Throws: ``APIError`` `weakPassword` for a password below the floor, before anything is
  ///   sent; from the server (`accountExists`, `invalidField`).
  @discardableResult
  public func createClearAccount(
    username: String, password: String, cost: KeyDerivationCost = .standard,
    random: @escaping @Sendable (Int) -> [UInt8] = systemRandomBytes
  ) async throws -> AccountBody {
    let name = Credentials(username: username, password: "").normalizedUsername
    try PasswordStrength.checkNew(password, username: name, field: "password")
    let keys = try await PasswordKeys.stretching(
      username: name, password: password, derivation: .new(cost: cost, random: random))
    return try await createAccount(
      NewAccount(
        credentials: Credentials(username: username, password: keys.signInSecret),
        keyDerivation: keys.derivation)
    ).get()
  }
}

extension PasswordStrength {
  /// Checks a new password of an account on the device, before anything is sent.
  ///
  /// - Throws: ``APIError`` `weakPassword`, saying which field and why.
  static func checkNew(_ password: String, username: String, field: String) throws(APIError) {
    do {
      try check(password, username: username, field: field)
    } catch {
      throw APIError(.weakPassword, error.description)
    }
  }
}
