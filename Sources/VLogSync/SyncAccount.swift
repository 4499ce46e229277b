public import Foundation
public import VLog
public import VLogWire

/// What one ``SyncAccount/sync()`` did.
public struct SyncReport: Sendable, Hashable {
  /// Events pushed and acknowledged by the server.
  public var pushed = 0
  /// Events pulled from the server (including ones the store already had).
  public var pulled = 0
  /// Pulled events the store did not have.
  public var applied = 0
  /// Sync calls made.
  public var calls = 0
  /// Blobs uploaded.
  public var blobsUploaded = 0
  /// Events the server lacked that the sync found by comparing digests and pushed (events
  /// that were never in the outbox, such as imported ones).
  public var repaired = 0
  /// Events the store lacked that the sync found by comparing digests and fetched.
  public var fetched = 0
  /// Outbox events the server refused as stamped too far ahead of its clock, given new stamps
  /// (see ``SyncState/restamped``).
  public var restamped = 0
  /// Events the server lacks that are stamped too far ahead of its clock for it to take yet;
  /// a later sync pushes them.
  public var deferred = 0
  /// The server's event-set digest after the sync.
  public var serverEventSetDigest = EventSetDigest.empty
  /// Whether the store's event-set digest equals the server's: both hold exactly the same events.
  public var inSync = false
}

/// A store's account on a sync server: owns the credentials, the token, the cursor and the sync
/// status, and is the only thing that talks to the ``APICaller``.
///
/// A sync pushes the store's outbox in batches the server accepts, uploading the bytes of new
/// attachments first, and pulls every page after the cursor; the pushed events are acknowledged
/// only once the server has said they are stored, and the cursor moves only after the pulled
/// events are committed, so a crash or a lost message at any point costs a repeat, never a gap.
///
/// A store belongs to one account on one server: the first successful sign-in (or sync with a
/// kept token) binds it (`NoteStore.bind(to:)`), and the account refuses to sign in or sync a
/// store bound to another (``binding``), before sending anything. A failed sign-in writes
/// nothing: neither the binding, nor the state file, nor the credential store.
///
/// An actor: calls on one account run one at a time.
public actor SyncAccount {
  /// The store this account syncs.
  public let store: NoteStore
  let caller: APICaller
  /// The account's user name, normalised.
  public nonisolated let username: String
  /// The server (the transport's ``Transport/server``) and user name this account syncs the
  /// store as: what the store is bound to by the first successful sign-in.
  public nonisolated let binding: AccountBinding
  /// Whether the store is known to be bound to ``binding``.
  private var isBound = false
  /// The password, in memory only, when the app gave one: for signing in again when the token
  /// expires. Nil when the account was restored from a credential store.
  var password: String?
  private let credentialStore: (any CredentialStore)?
  /// The token as last written to the credential store.
  private var storedToken: String?
  private let stateFile: String?
  private let now: @Sendable () -> Date
  private let pageSize: Int
  private let pushSize: Int
  private let pushBytes: Int
  private var encoding: SyncEncoding
  var token: String?
  /// The sync running now, which a second call waits for before it starts its own.
  private var running: Task<SyncReport, any Error>?
  /// The re-keying in progress (``rekey()``): no sync seals or pushes while it runs.
  var rekeying: Task<RecoveryKey, any Error>?
  /// The remembered state: cursor, last sync, skew, last error.
  public internal(set) var state: SyncState
  /// How an end-to-end encrypted account draws its keys; nil for an account whose notes the
  /// server reads.
  let encryption: EncryptionOptions?
  /// The password's keys, with the password they were drawn from (scrypt is slow: drawn once
  /// per password and derivation).
  var passwordKeys: (password: String, keys: PasswordKeys)?
  /// An encrypted account's keys and its notes' keys, once opened or restored.
  var keyring: AccountKeyring?
  /// The recovery key of the encrypted account ``createAccount()`` made: shown to the user
  /// once, kept in memory only.
  public internal(set) var recoveryKey: RecoveryKey?

  /// Whether the account is end-to-end encrypted: its notes are sealed on the device, and the
  /// server stores what it cannot read. With ``EncryptionOptions/asTheServerSays``, known once
  /// the device has signed in (or kept the account's keys from an earlier sign-in).
  public internal(set) var isEncrypted: Bool
  /// The least key derivation cost this device accepts, and the one it makes passwords with.
  nonisolated let encryptionCost: KeyDerivationCost?

  /// The default place of the state file: `sync-state.json` in the store's directory.
  public static func stateFile(for store: NoteStore) -> String {
    stateFile(forStoreAt: store.path)
  }

  /// The default place of the state file of the store in directory `path`.
  public static func stateFile(forStoreAt path: String) -> String {
    path + "/sync-state.json"
  }

  /// Creates an account object for a store.
  ///
  /// - Parameters:
  ///   - store: The store to sync.
  ///   - transport: How to reach the server.
  ///   - credentials: The user name and password (kept in memory only).
  ///   - credentialStore: Where the session token is kept across launches, if anywhere; a
  ///     token kept there is used at once.
  ///   - stateFile: Where to keep the cursor and status; nil keeps them in memory.
  ///   - now: The device's clock, to measure skew; by default the clock the store stamps events
  ///     with.
  ///   - pageSize: How many events to ask for per call.
  ///   - pushSize: How many events to push per call (at most the server's limit).
  ///   - pushBytes: How many bytes of events (in the binary encoding) to push per call: half
  ///     the server's default body limit, so that even JSON fits. A server that answers 413
  ///     gets half as much on the next try, down to one event, so a sync always progresses.
  ///   - encoding: How sync calls are encoded. The compact binary encoding by default; the
  ///     account falls back to JSON for good if the server refuses it (415).
  ///   - encryption: Whether the account is end-to-end encrypted: as the server says before the
  ///     first sign-in (the default, ``EncryptionOptions/asTheServerSays``), for certain
  ///     (``EncryptionOptions/standard``), or nil for an account whose notes the server reads,
  ///     which never asks. Also how keys are drawn from the password and from randomness.
  /// A state file kept for another account or server is not used: the account starts from the
  /// beginning of its own log (and a store bound to another account is refused when it signs
  /// in or syncs). A store that synced before stores recorded their account is bound to the
  /// account its state file names.
  ///
  /// - Throws: When the state file exists but cannot be read, or the credential store refuses
  ///   to be read (``CredentialStoreError``).
  public init(
    store: NoteStore, transport: any Transport, credentials: Credentials,
    credentialStore: (any CredentialStore)? = nil,
    stateFile: String? = nil, now: (@Sendable () -> Date)? = nil,
    pageSize: Int = 1000, pushSize: Int = 1000, pushBytes: Int = 4 << 20,
    encoding: SyncEncoding = .binary,
    encryption: EncryptionOptions? = .asTheServerSays
  ) throws {
    try self.init(
      store: store, transport: transport, username: credentials.username,
      password: credentials.password, credentialStore: credentialStore, stateFile: stateFile,
      now: now, pageSize: pageSize, pushSize: pushSize, pushBytes: pushBytes, encoding: encoding,
      encryption: encryption)
  }

  /// Restores an account after a restart from the token in a credential store, without the
  /// password: ``isSignedIn`` says whether a token was found. If there is none, or the server
  /// no longer accepts it, syncs fail with ``APIError/Code/signedOut`` until
  /// ``signIn(password:)``.
  ///
  /// See ``init(store:transport:credentials:credentialStore:stateFile:now:pageSize:pushSize:pushBytes:encoding:encryption:)``
  /// for the other parameters.
  ///
  /// - Throws: When the state file exists but cannot be read, or the credential store refuses
  ///   to be read (``CredentialStoreError``).
  public init(
    store: NoteStore, transport: any Transport, username: String,
    credentialStore: any CredentialStore,
    stateFile: String? = nil, now: (@Sendable () -> Date)? = nil,
    pageSize: Int = 1000, pushSize: Int = 1000, pushBytes: Int = 4 << 20,
    encoding: SyncEncoding = .binary,
    encryption: EncryptionOptions? = .asTheServerSays
  ) throws {
    try self.init(
      store: store, transport: transport, username: username, password: nil,
      credentialStore: credentialStore, stateFile: stateFile, now: now, pageSize: pageSize,
      pushSize: pushSize, pushBytes: pushBytes, encoding: encoding, encryption: encryption)
  }

  private init(
    store: NoteStore, transport: any Transport, username: String, password: String?,
    credentialStore: (any CredentialStore)?, stateFile: String?, now: (@Sendable () -> Date)?,
    pageSize: Int, pushSize: Int, pushBytes: Int, encoding: SyncEncoding,
    encryption: EncryptionOptions?
  ) throws {
    self.store = store
    self.caller = APICaller(transport: transport)
    let normalized = Credentials(username: username, password: "").normalizedUsername
    self.username = normalized
    self.password = password
    self.credentialStore = credentialStore
    let stored = try credentialStore?.token(for: normalized)
    self.storedToken = stored
    self.token = stored
    self.stateFile = stateFile
    self.now = now ?? store.wallClock
    self.pageSize = pageSize
    self.pushSize = pushSize
    self.pushBytes = pushBytes
    self.encoding = encoding
    self.encryption = encryption
    self.encryptionCost = encryption?.cost
    self.isEncrypted = encryption?.isRequired == true
    let binding = AccountBinding(server: transport.server, username: normalized)
    self.binding = binding
    let loaded = try stateFile.flatMap { try Self.loadState(from: $0) }
    if let loaded, let named = loaded.binding, loaded.lastSync != nil || loaded.cursor > 0,
      try store.account() == nil
    {
      // Synced before stores recorded their account: the state file says which it was.
      try store.bind(to: named)
    }
    self.isBound = try store.account() == binding
    self.state =
      loaded.flatMap {
        ($0.binding.map { $0 == binding } ?? ($0.username == normalized)) ? $0 : nil
      } ?? SyncState(username: normalized, server: binding.server)
    if encryption != nil, state.encrypted == true { isEncrypted = true }
    if encryption != nil, let kept = try credentialStore?.accountKeys(for: normalized) {
      let keys = try AccountKeys(rawRepresentation: kept)
      restoredKeys = keys
      keptEpoch = keys.epoch
      state.keysEpoch = max(state.keysEpoch ?? 0, keys.epoch)
      state.keysRekeyedAt = max(state.keysRekeyedAt ?? 0, keys.rekeyedAt)
      isEncrypted = true
    }
  }

  /// An encrypted account's keys read from the credential store, until the keyring holds them.
  var restoredKeys: AccountKeys?
  /// The epoch of the keys last written to the credential store.
  private var keptEpoch: UInt64?

  /// Reads a state file, or nil if there is none.
  ///
  /// - Throws: When the file exists but is not a state file.
  public static func loadState(from path: String) throws -> SyncState? {
    try SyncState.load(from: path)
  }

  // MARK: - Account

  /// Creates the account on the server.
  ///
  /// - Throws: ``APIError``: `accountExists` (409), `invalidField` (400) for a bad user name or
  ///   password; for an encrypted account, `weakPassword` for a password below the floor
  ///   (`PasswordStrength/check(_:username:field:)`), before anything is sent.
  /// For an encrypted account, the account's keys are made on this device, and the recovery
  /// key — the only other way to open them — is in ``recoveryKey`` until the account object
  /// ends: show it to the user once.
  public func createAccount() async throws(APIError) {
    guard let encryption, encryption.isRequired else {
      // A clear account: the password itself, asking the server nothing.
      _ = try await caller.createAccount(
        Credentials(username: username, password: try knownPassword())
      ).get()
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
    token = try await signInCall(try await credentials()).get().token
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
    let token = try await signInCall(
      Credentials(username: username, password: try await serverPassword(password))
    ).get().token
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

  /// The user name and what the server knows as the password, or
  /// ``APIError/Code/signedOut`` without a password.
  private func credentials() async throws(APIError) -> Credentials {
    Credentials(username: username, password: try await serverPassword(try knownPassword()))
  }

  /// The password, or ``APIError/Code/signedOut`` without one.
  func knownPassword() throws(APIError) -> String {
    guard let password else {
      throw APIError(
        .signedOut, "signed out: the session for '\(username)' ended; sign in with the password")
    }
    return password
  }

  // MARK: - End-to-end encryption

  /// What the server knows as `password`: itself, or for an encrypted account the sign-in
  /// secret drawn from it (the server never receives the password).
  ///
  /// Unless the account is clear for certain, the server is asked first whether the account is
  /// encrypted and how its password is stretched (``signInParameters()``).
  func serverPassword(_ password: String) async throws(APIError) -> String {
    guard encryption != nil else { return password }
    let parameters = try await signInParameters()
    guard parameters.encrypted else { return password }
    return try await passwordKeys(for: password, derivation: parameters.keyDerivation)
      .signInSecret
  }

  /// Asks the server whether the account is encrypted and how its password is stretched, and
  /// checks the answer against what this device knows: a device that knows the account is
  /// encrypted refuses to be told it is not (it would send the password itself), and a
  /// derivation weaker than its floor or of a lower version than it has seen is refused.
  func signInParameters() async throws(APIError) -> SignInParameters {
    let parameters: SignInParameters
    do {
      parameters = try await caller.signInParameters(
        of: username, floor: encryptionCost ?? .standard, seenVersion: state.keyDerivationVersion)
    } catch let error as APIError {
      throw error
    } catch {
      throw APIError(.invalidResponse, "\(error)")
    }
    guard parameters.encrypted || !isEncrypted else {
      throw APIError(
        .invalidResponse,
        "the server says '\(username)' is not an end-to-end encrypted account, but this device "
          + "knows it is (or there is no such account): the password is not sent")
    }
    isEncrypted = parameters.encrypted
    return parameters
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
        derived = try await passwordKeys(
          for: password, derivation: try await signInParameters().keyDerivation)
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
  private func installKeyring(_ keys: AccountKeys) -> AccountKeyring {
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
  private func currentOrNewToken() async throws -> String {
    if let token { return token }
    let token = try await signInCall(try await credentials()).get().token
    self.token = token
    return token
  }

  /// Signs in with `credentials` and this device's credential, and keeps the device
  /// credential the server answers with.
  private func signInCall(_ credentials: Credentials) async -> APIResult<SessionBody> {
    var credentials = credentials
    credentials.device = state.deviceCredential
    let result = await caller.signIn(credentials)
    if let device = result.value?.device { state.deviceCredential = device }
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

  /// Writes the token to the credential store if it changed since it was last written.
  func saveToken() throws {
    guard let credentialStore, token != storedToken else { return }
    try credentialStore.setToken(token, for: username)
    storedToken = token
  }

  /// Replaces the token (to test how the account handles a token the server no longer accepts).
  public func useToken(_ token: String?) { self.token = token }

  // MARK: - Sync

  /// Pushes the outbox and pulls everything new, until the server has nothing more.
  ///
  /// One sync runs at a time: a call made while another runs waits for it to end, then syncs
  /// (so that what was written before the call is pushed by it). Calls never interleave, so an
  /// outbox is never pushed twice and the cursor never moves back.
  ///
  /// - Throws: ``APIError`` from the server (for example `clockSkew`, with the skew recorded in
  ///   ``state``) or the transport; `VLogError` from the store. The error is also recorded as
  ///   ``SyncState/lastError``.
  @discardableResult
  public func sync() async throws -> SyncReport {
    await waitForSyncAndRekeying()
    let task = Task {
      defer { running = nil }
      return try await self.syncOnce()
    }
    running = task
    return try await task.value
  }

  private func syncOnce() async throws -> SyncReport {
    try store.checkAccount(binding)
    do {
      let report: SyncReport
      do {
        report = try await runSync()
      } catch let error as AccountKeyError where error.keysReplaced {
        // Re-keyed on another device: the new keys open with the password, then sync again.
        try await reopenReplacedKeys()
        report = try await runSync()
      }
      state.lastError = nil
      state.lastSync = now()
      try saveState()
      try saveToken()
      return report
    } catch {
      state.lastError = "\(error)"
      // A store not bound to this account never signed in with it: a failed first sign-in
      // writes nothing. Otherwise, if the state cannot be saved either, that is the failure
      // to report: no sync can record its progress until it is fixed.
      if isBound {
        try saveState()
        try saveToken()
      }
      throw error
    }
  }

  /// The encoding sync calls use now.
  public var syncEncoding: SyncEncoding { encoding }

  /// Drives a ``SyncMachine`` through one sync: performs each action it asks for with the
  /// store and the API, and reports the outcome back, until it finishes or fails.
  private func runSync() async throws -> SyncReport {
    let keyring = try await openKeys()
    // Re-keyed elsewhere since this device last looked: found before anything is sealed with
    // keys the re-keying replaced.
    if let keyring {
      let epoch = await keyring.keys.epoch
      try await keyring.follow(
        try await call { caller, token in await caller.accountKeys(since: epoch, token: token) })
    }
    var machine = SyncMachine(
      cursor: state.cursor, encoding: encoding, pageSize: pageSize, pushSize: pushSize,
      pushBytes: pushBytes, maximumClockSkew: store.maximumClockSkew)
    // An encrypted account's outbox is sealed one push ahead.
    var sealer = keyring.map { OutboxSealer(keyring: $0, store: store) }
    // The outbox events last read: a push of them is a prefix of them.
    var outbox: [LoggedEvent] = []
    // The next page, asked (and opened) while the store ingests the one before: pages that
    // carry nothing pushed only read the server's log.
    var prefetch: (push: SyncPush, encoding: SyncEncoding, page: Task<SyncPage, any Error>)?
    var pageOpened = false
    var pushedNothing = false
    // A server that refused the binary encoding gets JSON from now on, whatever the outcome.
    defer {
      encoding = machine.encoding
      sealer?.cancel()
      prefetch?.page.cancel()
    }
    var action = machine.start()
    while true {
      switch action {
      case .readOutbox(let limit):
        outbox = try store.outbox(limit: limit)
        action = machine.outboxRead(outbox)
      case .uploadBlobs(let events):
        action = machine.blobsUploaded(try await uploadBlobs(for: events, keyring: keyring))
      case .push(let clear, let encoding):
        pushedNothing = clear.events.isEmpty
        if let asked = prefetch {
          prefetch = nil
          // A prefetch that failed is not this sync's error: the call is made again below, as
          // any call, and fails there if the failure still holds.
          if asked.push == clear && asked.encoding == encoding,
            let page = try? await asked.page.value
          {
            pageOpened = true
            action = machine.pageReceived(page)
            continue
          }
          asked.page.cancel()
        }
        var push = clear
        if var outboxSealer = sealer {
          push.events = try await outboxSealer.seal(clear.events)
          // While this push is on its way, the outbox events after it are sealed.
          let count = clear.events.count
          if count > 0, count <= outbox.count, outbox[count - 1].event == clear.events[count - 1] {
            outboxSealer.sealAhead(after: outbox[count - 1].sequence, limit: count)
          }
          sealer = outboxSealer
        }
        let sent = push
        let page: SyncPage
        do {
          page = try await call { caller, token in
            await caller.sync(sent, encoding: encoding, token: token)
          }
        } catch {
          // A refusal other than of the credentials (a clock too far ahead, say) comes from a
          // server that accepted them.
          if let status = error.status, status != 401 {
            try bindStore()
          }
          action = machine.pushRefused(error, deviceTime: now().milliseconds)
          continue
        }
        try bindStore()
        action = machine.pageReceived(page)
      case .restamp(let time):
        action = machine.restamped(try await restampOutbox(after: time))
      case .commit(var page, let sequence):
        if let keyring, !pageOpened { page.events = try await keyring.open(page.events) }
        pageOpened = false
        if page.more && pushedNothing {
          let next = SyncPush(cursor: page.cursor, events: [], limit: pageSize)
          let encoding = machine.encoding
          prefetch = (
            next, encoding,
            Task {
              var page = try await call { caller, token in
                await caller.sync(next, encoding: encoding, token: token)
              }
              if let keyring { page.events = try await keyring.open(page.events) }
              return page
            }
          )
        }
        state.clockSkewMilliseconds = page.serverTime.milliseconds - now().milliseconds
        let ingested = try await store.ingest(page.events, acknowledgingThrough: sequence)
        state.cursor = page.cursor
        state.serverEventSetDigest = page.eventSetDigest.description
        action = machine.committed(
          page: page, appended: ingested.appended, outbox: try store.outboxCount())
        // Progress survives an interruption; the last page's is saved by the caller.
        if case .readOutbox = action { try saveState() }
      case .readDigest:
        action = machine.digestRead(try store.eventSetDigest())
      case .compare:
        let local = try store.eventSetBuckets()
        let comparison = try await call { caller, token in
          await caller.compare(local, token: token)
        }
        state.serverEventSetDigest = comparison.eventSetDigest.description
        action = machine.compared(
          comparison, deviceTime: now().milliseconds, skew: state.clockSkewMilliseconds ?? 0)
      case .readIDs(let buckets):
        action = machine.idsRead(Set(try store.eventIDs(inBuckets: buckets)))
      case .readEvents(let ids):
        action = machine.eventsRead(try store.events(withIDs: ids))
      case .fetch(let ids):
        let fetched = try await call { caller, token in await caller.fetch(ids, token: token) }
        action = machine.fetched(try await keyring?.open(fetched) ?? fetched)
      case .ingest(let events):
        action = machine.ingested(events, appended: try await store.ingest(events).appended)
      case .finish(let report):
        // A deletion stored since the last rotation: the content key that wrapped the
        // deleted notes' keys is replaced, so that copies of the server's data made before
        // cannot open them.
        if let keyring {
          try await keyring.rotateIfDue(username: username)
          try await keepKeys()
        }
        return report
      case .fail(let error):
        throw error
      }
    }
  }

  /// Gives the outbox events stamped after `time` (milliseconds, the later of the server's
  /// clock and this device's) the stamps of changes made now, and records it in ``state``.
  ///
  /// - Returns: How many events were restamped.
  private func restampOutbox(after time: Int64) async throws -> Int {
    let restamped = try await store.restampOutbox(after: Date(milliseconds: time))
    guard let latest = restamped.map(\.old.time.milliseconds).max() else { return 0 }
    state.restamped = SyncState.Restamp(
      events: restamped.count, latestOldTime: ISO8601.format(milliseconds: Int64(latest)),
      date: now())
    return restamped.count
  }

  /// Uploads the bytes of attachments added by `events` that this store holds and the server
  /// lacks: it asks the server first, so bytes it holds (sent before a retry, by another device,
  /// or kept for an undo) never travel again. A server too old to answer the question gets
  /// them all. An encrypted account's bytes are sealed (``AccountKeyring/sealBlobs(of:bytes:)``)
  /// and go under the hash of the sealed bytes, which the sealed additions name.
  private func uploadBlobs(for events: [Event], keyring: AccountKeyring?) async throws -> Int {
    // Each upload: the hash the server stores the bytes under, and how to read them.
    var uploads: [(hash: BlobHash, bytes: () async throws -> [UInt8]?)] = []
    var seen = Set<BlobHash>()
    let store = self.store
    if let keyring {
      for (attachment, sealed) in try await keyring.sealBlobs(of: events, bytes: store.blob)
      where seen.insert(sealed.hash).inserted {
        uploads.append(
          (sealed.hash, { try await keyring.sealedBytes(of: attachment, bytes: store.blob) }))
      }
    } else {
      for event in events {
        guard case .attachmentAdded(let attachment) = event.change,
          seen.insert(attachment.blobHash).inserted, try store.hasBlob(attachment.blobHash)
        else { continue }
        uploads.append((attachment.blobHash, { try store.blob(attachment.blobHash) }))
      }
    }
    var missing = Set<BlobHash>()
    // As many hashes per question as events per push: what the server takes.
    for start in stride(from: 0, to: uploads.count, by: pushSize) {
      let asked = uploads[start..<min(start + pushSize, uploads.count)].map(\.hash)
      do {
        missing.formUnion(
          try await call { caller, token in await caller.missingBlobs(asked, token: token) })
      } catch {
        // (Not `catch where`: Swift 6.3.1 crashes compiling it after a typed-throws call.)
        guard error.status == 404 || error.status == 405 else { throw error }
        missing.formUnion(asked)
      }
    }
    var uploaded = 0
    for (hash, read) in uploads where missing.contains(hash) {
      guard let bytes = try await read() else { continue }
      _ = try await call { caller, token in await caller.putBlob(bytes, hash: hash, token: token) }
      uploaded += 1
    }
    return uploaded
  }

  /// The bytes of an attachment: from the store, or downloaded from the server (checked against
  /// their hash and kept) when the store does not have them yet. An encrypted account's are
  /// downloaded as sealed — under the hash its sealed addition, fetched from the server,
  /// names — and opened with the attachment's key.
  ///
  /// - Throws: `VLogError` for an unknown attachment or bytes that do not match their hash;
  ///   ``AccountKeyError`` for sealed bytes that do not open; ``APIError`` when the download
  ///   fails.
  public func attachmentData(_ id: AttachmentID) async throws -> [UInt8] {
    guard let attachment = try store.attachment(id) else {
      return try store.attachmentData(id)  // throws attachmentNotFound
    }
    if let bytes = try store.blob(attachment.blobHash) { return bytes }
    let bytes: [UInt8]
    if let keyring = try await openKeys() {
      bytes = try await sealedAttachmentData(attachment, keyring: keyring)
    } else {
      let hash = attachment.blobHash
      bytes = try await call { caller, token in await caller.blob(hash, token: token) }
    }
    try store.storeBlob(bytes, hash: attachment.blobHash)
    return bytes
  }

  /// The clear bytes of an encrypted account's attachment, downloaded as sealed.
  private func sealedAttachmentData(_ attachment: Attachment, keyring: AccountKeyring)
    async throws -> [UInt8]
  {
    guard let stamp = try store.attachmentAddition(attachment.id) else {
      return try store.attachmentData(attachment.id)  // throws attachmentNotFound
    }
    let fetched = try await call { caller, token in await caller.fetch([stamp], token: token) }
    guard let addition = fetched.first(where: { $0.stamp == stamp }),
      case .attachmentAdded(let sealed) = addition.change, sealed.id == attachment.id,
      !addition.isRedacted
    else {
      throw VLogError(
        .blobMissing,
        "the server holds no addition of attachment \(attachment.id) (event \(stamp)) to name "
          + "its bytes: it was deleted")
    }
    let hash = sealed.blobHash
    let bytes = try await call { caller, token in await caller.blob(hash, token: token) }
    return try await keyring.openBlob(bytes, of: attachment)
  }

  // MARK: - Live channel

  /// Opens the account's live channel (`GET /v1/live`), signing in first or again as a sync
  /// would: the server then says, within milliseconds of each commit to the account's log,
  /// how far the log reaches (`LiveMessage.head(_:)`), and the device syncs if it is behind.
  /// ``AutomaticSync`` holds one while it runs.
  ///
  /// - Parameter silenceLimit: How long the channel may stay silent before it counts as gone;
  ///   it must exceed the server's keep-alive interval (25 seconds by default).
  /// - Throws: ``APIError``: `transport` when the server cannot be reached or the transport
  ///   cannot stream, `server` with 429 or 503 (and `retryAfter`) when the server or the
  ///   account holds its most channels, 401 when signing in fails; `VLogError` for a store
  ///   bound to another account.
  public func openLiveChannel(silenceLimit: Duration = .seconds(30)) async throws -> LiveChannel {
    try store.checkAccount(binding)
    let stream = try await call { caller, token in await caller.openLive(token: token) }
    try bindStore()
    return LiveChannel(stream, server: binding.server, silenceLimit: silenceLimit)
  }

  /// Runs one API call with the account's token, signing in first or again once as needed,
  /// and records a clock-skew error's server time.
  func call<Value: Sendable>(
    _ send: @escaping @Sendable (APICaller, String) async -> APIResult<Value>
  ) async throws(APIError) -> Value {
    let caller = self.caller
    let (result, token) = await APICall { token in await send(caller, token) }.run(
      token: token,
      signIn: {
        // Drawn only when a sign-in is needed: for an encrypted account, from the password.
        let credentials: Credentials
        do throws(APIError) {
          credentials = try await self.credentials()
        } catch {
          return APIResult(
            request: TransportRequest(method: "POST", path: "/v1/sessions"), response: nil,
            error: error, value: nil)
        }
        return await self.signInCall(credentials)
      })
    self.token = token
    if let body = result.error?.body, body.code == .clockSkew, let time = body.serverTime,
      let milliseconds = ISO8601.parse(time)
    {
      state.clockSkewMilliseconds = milliseconds - now().milliseconds
    }
    return try result.get()
  }

  /// Binds the store to ``binding`` after the server accepted the account's credentials.
  private func bindStore() throws {
    guard !isBound else { return }
    try store.bind(to: binding)
    isBound = true
  }

  func saveState() throws {
    guard let stateFile else { return }
    try state.write(to: stateFile)
  }
}
