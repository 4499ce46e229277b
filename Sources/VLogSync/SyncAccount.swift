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
  /// Whether the store's event-set digest equals the server's: both hold exactly the same events
  /// (counting those the device quarantined as held).
  public var inSync = false
  /// Events the server served that this device refused and set aside (``QuarantinedEvent``,
  /// listed in ``SyncState/quarantined``): no device of the account vouched for them.
  public var quarantined = 0
  /// Whether the server did not know this device's cursor — its log is shorter than the
  /// device last saw: restored from a backup, or replaced — so that the device pulled from
  /// the start (skipping what it holds) and pushed back, by comparing digests, what the server
  /// lost.
  public var cursorReset = false
  /// Outbox events given a new replica id because the server held other events under their
  /// ids (`eventCollision`): another device shares this store's replica id — a copied or
  /// restored store (`NoteStore.renewReplica()`).
  public var movedToNewReplica = 0
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
  var isBound = false
  /// The password, in memory only, when the app gave one: for signing in again when the token
  /// expires. Nil when the account was restored from a credential store.
  var password: String?
  let credentialStore: (any CredentialStore)?
  /// The token as last written to the credential store.
  var storedToken: String?
  let stateFile: String?
  let now: @Sendable () -> Date
  let pageSize: Int
  let pushSize: Int
  let pushBytes: Int
  var encoding: SyncEncoding
  var token: String?
  /// The sync running now, which a second call waits for before it starts its own.
  var running: Task<SyncReport, any Error>?
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
  /// Events this sync put in quarantine so far.
  var quarantinedInSync = 0
  /// Redacted events this sync pulled with no evidence yet of why (`RedactionEvidence`):
  /// judged when the pull ends, since a later page may bring the deletion or the newer change
  /// that vouches for them.
  var pendingRedactions: [Event] = []
  /// The key derivation the server named before any sign-in pinned one
  /// (``currentDerivation()``), asked once per account object.
  var askedDerivation: KeyDerivation?
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
  var keptEpoch: UInt64?

  /// Reads a state file, or nil if there is none.
  ///
  /// - Throws: When the file exists but is not a state file.
  public static func loadState(from path: String) throws -> SyncState? {
    try SyncState.load(from: path)
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
        // Drawn only when a sign-in is needed, from the password.
        let password: String
        do throws(APIError) {
          password = try await self.knownPassword()
        } catch {
          return APIResult(
            request: TransportRequest(method: "POST", path: "/v1/sessions"), response: nil,
            error: error, value: nil)
        }
        return await self.signIn(withPassword: password)
      })
    self.token = token
    if let body = result.error?.body, body.code == .clockSkew, let time = body.serverTime,
      let milliseconds = ISO8601.parse(time)
    {
      measuredClockSkew(milliseconds - now().milliseconds)
    }
    // Until a sync measures the server's clock to the millisecond, an answer's Date header
    // tells it to the second: a re-keying before the first sync dates its cutoff by it.
    if state.clockSkewMilliseconds == nil,
      let skew = APICaller.clockSkew(of: result.response, at: now())
    {
      measuredClockSkew(skew)
    }
    return try result.get()
  }

  /// Keeps the server's clock minus this device's, in milliseconds, as measured: in the state,
  /// and in the store, which stamps by the server's clock when this device's is ahead
  /// (`NoteStore.recordServerClock(offset:)`). A store that cannot write it keeps it until
  /// it closes: the next sync measures it again.
  func measuredClockSkew(_ skew: Int64) {
    state.clockSkewMilliseconds = skew
    try? store.recordServerClock(offset: skew)
  }

  /// Binds the store to ``binding`` after the server accepted the account's credentials.
  func bindStore() throws {
    guard !isBound else { return }
    try store.bind(to: binding)
    isBound = true
  }

  func saveState() throws {
    guard let stateFile else { return }
    try state.write(to: stateFile)
  }
}
