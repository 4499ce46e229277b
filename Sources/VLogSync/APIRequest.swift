internal import Foundation
package import VLog
package import VLogWire

/// One endpoint of the sync server's HTTP API as a small value: its method, path and body, and
/// how to read a successful response. The API caller sends these; nothing else builds HTTP.
package protocol APIRequest: Sendable {
  /// What a successful response holds.
  associatedtype Value: Sendable

  /// The HTTP method.
  var method: String { get }
  /// The path under the server's base URL.
  var path: String { get }
  /// Whether the request carries the account's bearer token.
  var requiresToken: Bool { get }
  /// The `Content-Type` of ``body()``, if there is a body.
  var contentType: String? { get }
  /// The `Accept` header: the media types the request can read, if it asks for any.
  var accept: String? { get }
  /// Other header fields, by lowercase name: the protocol version, for requests answered with
  /// events.
  var headers: [String: String] { get }
  /// Whether an encrypted account's devices sign the request (`RequestSignature`): a write
  /// to its log or its keys, which its server takes only signed.
  var isSignedWrite: Bool { get }
  /// The encoded body.
  func body() throws -> [UInt8]
  /// Reads a successful (2xx) response body.
  ///
  /// - Throws: `WireError` naming the field of a malformed body.
  func value(from body: [UInt8]) throws -> Value
  /// Reads a successful (2xx) response, for requests whose reading depends on its headers (its
  /// `Content-Type`); by default, ``value(from:)-([UInt8])`` of the body.
  ///
  /// - Throws: `WireError` naming the field of a malformed body.
  func value(from response: TransportResponse) throws -> Value
}

extension APIRequest {
  /// JSON, the default.
  package var contentType: String? { "application/json" }
  /// None, the default.
  package var accept: String? { nil }
  /// None, the default.
  package var headers: [String: String] { [:] }
  /// No, the default.
  package var isSignedWrite: Bool { false }
  /// The body's value.
  package func value(from response: TransportResponse) throws -> Value {
    try value(from: response.body)
  }
}

/// Nothing: the value of endpoints that answer with no body.
public struct NoContent: Sendable, Hashable {
  /// The empty value.
  public init() {}
}

/// The requests of the sync server's API, one per endpoint.
package enum Endpoints {
  /// `POST /v1/accounts`: creates an account.
  package struct CreateAccount: APIRequest {
    /// The new account: its user name and sign-in secret, and an encrypted account's keys or
    /// a clear account's key derivation.
    package var account: NewAccount
    /// Creates the request.
    package init(credentials: Credentials, keys: NewAccountKeys? = nil) {
      account = NewAccount(credentials: credentials, keys: keys)
    }
    /// Creates the request.
    package init(_ account: NewAccount) { self.account = account }
    /// `POST`.
    package var method: String { "POST" }
    /// `/v1/accounts`.
    package var path: String { "/v1/accounts" }
    /// No: anyone may create an account.
    package var requiresToken: Bool { false }
    /// The credentials, and an encrypted account's keys, as JSON.
    package func body() throws -> [UInt8] {
      Array(try JSONEncoder().encode(account))
    }
    /// The created account.
    package func value(from body: [UInt8]) throws -> AccountBody { try WireJSON.decode(from: body) }
  }

  /// `POST /v1/sessions`: signs in, returning a bearer token.
  package struct SignIn: APIRequest {
    /// The account's user name and password.
    package var credentials: Credentials
    /// Creates the request.
    package init(credentials: Credentials) { self.credentials = credentials }
    /// `POST`.
    package var method: String { "POST" }
    /// `/v1/sessions`.
    package var path: String { "/v1/sessions" }
    /// No: this is how a token is obtained.
    package var requiresToken: Bool { false }
    /// The credentials as JSON.
    package func body() throws -> [UInt8] { Array(try JSONEncoder().encode(credentials)) }
    /// The token and its expiry.
    package func value(from body: [UInt8]) throws -> SessionBody { try WireJSON.decode(from: body) }
  }

  /// `POST /v1/sessions/parameters`: how to sign in as a name — whether the account is
  /// end-to-end encrypted, and how its password is stretched — before signing in.
  package struct SignInParametersCall: APIRequest {
    /// The user name.
    package var username: String
    /// Creates the request.
    package init(username: String) { self.username = username }
    /// `POST`.
    package var method: String { "POST" }
    /// `/v1/sessions/parameters`.
    package var path: String { "/v1/sessions/parameters" }
    /// No: it comes before signing in.
    package var requiresToken: Bool { false }
    /// The user name as JSON.
    package func body() throws -> [UInt8] {
      Array(try JSONEncoder().encode(SignInParametersRequest(username: username)))
    }
    /// The parameters.
    package func value(from body: [UInt8]) throws -> SignInParameters {
      try WireJSON.decode(from: body)
    }
  }

  /// `POST /v1/accounts/recovery-keys`: an encrypted account's sealed keys, for a device that
  /// holds its recovery key.
  package struct RecoveryKeys: APIRequest {
    /// The user name and the recovery key's sign-in secret.
    package var credentials: RecoveryCredentials
    /// Creates the request.
    package init(credentials: RecoveryCredentials) { self.credentials = credentials }
    /// `POST`.
    package var method: String { "POST" }
    /// `/v1/accounts/recovery-keys`.
    package var path: String { "/v1/accounts/recovery-keys" }
    /// No: the recovery key's secret is the credential.
    package var requiresToken: Bool { false }
    /// The credentials as JSON.
    package func body() throws -> [UInt8] { Array(try JSONEncoder().encode(credentials)) }
    /// The account's keys, sealed.
    package func value(from body: [UInt8]) throws -> AccountKeysBody {
      try WireJSON.decode(from: body)
    }
  }

  /// `POST /v1/accounts/recover`: recovers an encrypted account with its recovery key.
  package struct Recover: APIRequest {
    /// The recovery.
    package var recovery: AccountRecovery
    /// Creates the request.
    package init(_ recovery: AccountRecovery) { self.recovery = recovery }
    /// `POST`.
    package var method: String { "POST" }
    /// `/v1/accounts/recover`.
    package var path: String { "/v1/accounts/recover" }
    /// No: the recovery key's secret is the credential.
    package var requiresToken: Bool { false }
    /// The recovery as JSON.
    package func body() throws -> [UInt8] { Array(try JSONEncoder().encode(recovery)) }
    /// Nothing.
    package func value(from body: [UInt8]) throws -> NoContent { NoContent() }
  }

  /// `DELETE /v1/sessions/current`: revokes the token it is sent with.
  package struct SignOut: APIRequest {
    /// Creates the request.
    package init() {}
    /// `DELETE`.
    package var method: String { "DELETE" }
    /// `/v1/sessions/current`.
    package var path: String { "/v1/sessions/current" }
    /// Yes.
    package var requiresToken: Bool { true }
    /// None.
    package var contentType: String? { nil }
    /// Empty.
    package func body() throws -> [UInt8] { [] }
    /// Nothing.
    package func value(from body: [UInt8]) throws -> NoContent { NoContent() }
  }

  /// `PUT /v1/accounts/current/password`: changes the password, revoking every other token.
  package struct ChangePassword: APIRequest {
    /// The password now and the new one.
    package var change: PasswordChange
    /// Creates the request.
    package init(_ change: PasswordChange) { self.change = change }
    /// `PUT`.
    package var method: String { "PUT" }
    /// `/v1/accounts/current/password`.
    package var path: String { "/v1/accounts/current/password" }
    /// Yes.
    package var requiresToken: Bool { true }
    /// The passwords as JSON.
    package func body() throws -> [UInt8] { Array(try JSONEncoder().encode(change)) }
    /// Nothing.
    package func value(from body: [UInt8]) throws -> NoContent { NoContent() }
  }

  /// `DELETE /v1/accounts/current`: erases the account and everything of it.
  package struct DeleteAccount: APIRequest {
    /// The account's password, checked again.
    package var deletion: AccountDeletion
    /// Creates the request.
    package init(password: String) { deletion = AccountDeletion(password: password) }
    /// `DELETE`.
    package var method: String { "DELETE" }
    /// `/v1/accounts/current`.
    package var path: String { "/v1/accounts/current" }
    /// Yes.
    package var requiresToken: Bool { true }
    /// The password as JSON.
    package func body() throws -> [UInt8] { Array(try JSONEncoder().encode(deletion)) }
    /// Nothing.
    package func value(from body: [UInt8]) throws -> NoContent { NoContent() }
  }

  /// `GET /v1/sessions`: the account's sessions.
  package struct Sessions: APIRequest {
    /// Creates the request.
    package init() {}
    /// `GET`.
    package var method: String { "GET" }
    /// `/v1/sessions`.
    package var path: String { "/v1/sessions" }
    /// Yes.
    package var requiresToken: Bool { true }
    /// None.
    package var contentType: String? { nil }
    /// Empty.
    package func body() throws -> [UInt8] { [] }
    /// The sessions.
    package func value(from body: [UInt8]) throws -> SessionList { try WireJSON.decode(from: body) }
  }

  /// `GET /v1/accounts/current/keys`: an encrypted account's keys as the server keeps them,
  /// with the links of the epochs after `since`.
  package struct AccountKeys: APIRequest {
    /// The epoch the device holds, whose links to the current one it wants; nil for none.
    package var since: UInt64?
    /// Creates the request.
    package init(since: UInt64? = nil) { self.since = since }
    /// `GET`.
    package var method: String { "GET" }
    /// `/v1/accounts/current/keys`, with `?since=`.
    package var path: String {
      "/v1/accounts/current/keys" + (since.map { "?since=\($0)" } ?? "")
    }
    /// Yes.
    package var requiresToken: Bool { true }
    /// None.
    package var contentType: String? { nil }
    /// Empty.
    package func body() throws -> [UInt8] { [] }
    /// Reads the keys.
    package func value(from body: [UInt8]) throws -> AccountKeysBody {
      try WireJSON.decode(from: body)
    }
  }

  /// `PUT /v1/accounts/current/keys`: rotates an encrypted account's content key.
  package struct RotateKeys: APIRequest {
    /// The rotation.
    package var rotation: KeyRotation
    /// Creates the request.
    package init(_ rotation: KeyRotation) { self.rotation = rotation }
    /// `PUT`.
    package var method: String { "PUT" }
    /// `/v1/accounts/current/keys`.
    package var path: String { "/v1/accounts/current/keys" }
    /// Yes.
    package var requiresToken: Bool { true }
    /// Yes.
    package var isSignedWrite: Bool { true }
    /// The rotation as JSON.
    package func body() throws -> [UInt8] { Array(try JSONEncoder().encode(rotation)) }
    /// Reads the keys after the rotation.
    package func value(from body: [UInt8]) throws -> AccountKeysBody {
      try WireJSON.decode(from: body)
    }
  }

  /// `POST /v1/object-keys`: stores keys of notes and attachments.
  package struct StoreObjectKeys: APIRequest {
    /// The keys, wrapped by the content key of their epoch.
    package var keys: ObjectKeys
    /// Creates the request.
    package init(_ keys: ObjectKeys) { self.keys = keys }
    /// `POST`.
    package var method: String { "POST" }
    /// `/v1/object-keys`.
    package var path: String { "/v1/object-keys" }
    /// Yes.
    package var requiresToken: Bool { true }
    /// Yes.
    package var isSignedWrite: Bool { true }
    /// The keys as JSON.
    package func body() throws -> [UInt8] { Array(try JSONEncoder().encode(keys)) }
    /// Reads how many were stored.
    package func value(from body: [UInt8]) throws -> StoredObjectKeys {
      try WireJSON.decode(from: body)
    }
  }

  /// `POST /v1/object-keys/lookup`: the keys of some notes and attachments.
  package struct LookUpObjectKeys: APIRequest {
    /// The objects.
    package var objects: [Identifier]
    /// Creates the request.
    package init(_ objects: [Identifier]) { self.objects = objects }
    /// `POST`.
    package var method: String { "POST" }
    /// `/v1/object-keys/lookup`.
    package var path: String { "/v1/object-keys/lookup" }
    /// Yes.
    package var requiresToken: Bool { true }
    /// The ids as JSON.
    package func body() throws -> [UInt8] {
      Array(try JSONEncoder().encode(ObjectKeysLookup(objects: objects)))
    }
    /// Reads the keys the account holds.
    package func value(from body: [UInt8]) throws -> ObjectKeys {
      try WireJSON.decode(from: body)
    }
  }

  /// `GET /v1/object-keys`: a page of every key of the account's notes and attachments.
  package struct ListObjectKeys: APIRequest {
    /// The last object of the page before; nil for the first page.
    package var after: Identifier?
    /// Creates the request.
    package init(after: Identifier? = nil) { self.after = after }
    /// `GET`.
    package var method: String { "GET" }
    /// `/v1/object-keys`, with `?after=`.
    package var path: String { "/v1/object-keys" + (after.map { "?after=\($0)" } ?? "") }
    /// Yes.
    package var requiresToken: Bool { true }
    /// None.
    package var contentType: String? { nil }
    /// Empty.
    package func body() throws -> [UInt8] { [] }
    /// Reads the page.
    package func value(from body: [UInt8]) throws -> ObjectKeysPage {
      try WireJSON.decode(from: body)
    }
  }

  /// `DELETE /v1/sessions/{id}`: revokes one session of the account.
  package struct RevokeSession: APIRequest {
    /// The session's id, from ``Sessions``.
    package var id: String
    /// Creates the request.
    package init(id: String) { self.id = id }
    /// `DELETE`.
    package var method: String { "DELETE" }
    /// `/v1/sessions/{id}`, the id percent-encoded.
    package var path: String {
      "/v1/sessions/" + (id.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")
    }
    /// Yes.
    package var requiresToken: Bool { true }
    /// None.
    package var contentType: String? { nil }
    /// Empty.
    package func body() throws -> [UInt8] { [] }
    /// Nothing.
    package func value(from body: [UInt8]) throws -> NoContent { NoContent() }
  }

  /// `POST /v1/sync`: pushes events and pulls the page after the cursor.
  package struct Sync: APIRequest {
    /// The events and the cursor.
    package var push: SyncPush
    /// How to encode the request and which encoding to ask for in return.
    package var encoding: SyncEncoding
    /// Creates the request.
    package init(_ push: SyncPush, encoding: SyncEncoding = .json) {
      self.push = push
      self.encoding = encoding
    }
    /// `POST`.
    package var method: String { "POST" }
    /// `/v1/sync`.
    package var path: String { "/v1/sync" }
    /// Yes.
    package var requiresToken: Bool { true }
    /// When it pushes events.
    package var isSignedWrite: Bool { !push.events.isEmpty }
    /// The encoding's media type.
    package var contentType: String? { encoding.mediaType }
    /// The encoding's media type, and JSON (which a server may answer with).
    package var accept: String? {
      encoding == .json ? encoding.mediaType : "\(encoding.mediaType), application/json"
    }
    /// The protocol version this client reads (`WireProtocol`).
    package var headers: [String: String] {
      [WireProtocol.headerName.lowercased(): WireProtocol.current.description]
    }
    /// The sync request, encoded.
    package func body() throws -> [UInt8] {
      switch encoding {
      case .json: Array(try JSONEncoder().encode(SyncRequest(push)))
      case .binary: push.binaryEncoded()
      }
    }
    /// The page, from a JSON body.
    package func value(from body: [UInt8]) throws -> SyncPage {
      try WireJSON.decode(SyncResponse.self, from: body).validated()
    }
    /// The page, in the encoding the response's `Content-Type` names.
    package func value(from response: TransportResponse) throws -> SyncPage {
      switch response.headers["content-type"].flatMap(SyncEncoding.init(contentType:)) {
      case .binary: try SyncPage(binary: response.body)
      case .json, nil: try value(from: response.body)
      }
    }
  }

  /// `POST /v1/sync/compare`: sends the client's event-set digest in buckets and gets the
  /// server's ids in the buckets that differ.
  package struct Compare: APIRequest {
    /// The client's buckets.
    package var buckets: EventSetBuckets
    /// Creates the request.
    package init(buckets: EventSetBuckets) { self.buckets = buckets }
    /// `POST`.
    package var method: String { "POST" }
    /// `/v1/sync/compare`.
    package var path: String { "/v1/sync/compare" }
    /// Yes.
    package var requiresToken: Bool { true }
    /// The buckets as JSON.
    package func body() throws -> [UInt8] {
      Array(try JSONEncoder().encode(CompareRequest(buckets)))
    }
    /// The server's ids in the buckets that differ.
    package func value(from body: [UInt8]) throws -> Comparison {
      try WireJSON.decode(CompareResponse.self, from: body).validated()
    }
  }

  /// `POST /v1/sync/fetch`: gets events by id.
  package struct Fetch: APIRequest {
    /// The ids wanted.
    package var ids: [Stamp]
    /// Creates the request.
    package init(ids: [Stamp]) { self.ids = ids }
    /// `POST`.
    package var method: String { "POST" }
    /// `/v1/sync/fetch`.
    package var path: String { "/v1/sync/fetch" }
    /// Yes.
    package var requiresToken: Bool { true }
    /// The protocol version this client reads (`WireProtocol`).
    package var headers: [String: String] {
      [WireProtocol.headerName.lowercased(): WireProtocol.current.description]
    }
    /// The ids as JSON.
    package func body() throws -> [UInt8] {
      Array(try JSONEncoder().encode(FetchRequest(ids: ids)))
    }
    /// The events the server holds, in the order asked, perhaps not all of them.
    package func value(from body: [UInt8]) throws -> [Event] {
      try WireJSON.decode(FetchResponse.self, from: body).validated()
    }
  }

  /// `POST /v1/sync/missing-blobs`: asks which blobs the server lacks.
  package struct MissingBlobs: APIRequest {
    /// The hashes asked about.
    package var hashes: [BlobHash]
    /// Creates the request.
    package init(hashes: [BlobHash]) { self.hashes = hashes }
    /// `POST`.
    package var method: String { "POST" }
    /// `/v1/sync/missing-blobs`.
    package var path: String { "/v1/sync/missing-blobs" }
    /// Yes.
    package var requiresToken: Bool { true }
    /// The hashes as JSON.
    package func body() throws -> [UInt8] {
      Array(try JSONEncoder().encode(MissingBlobsRequest(hashes: hashes)))
    }
    /// The hashes whose bytes the server lacks, in the order asked.
    package func value(from body: [UInt8]) throws -> [BlobHash] {
      try WireJSON.decode(MissingBlobsResponse.self, from: body).validated()
    }
  }

  /// `PUT /v1/blobs/{hash}`: uploads an attachment's bytes.
  package struct PutBlob: APIRequest {
    /// The bytes' SHA-256.
    package var hash: BlobHash
    /// The bytes.
    package var bytes: [UInt8]
    /// Creates the request.
    package init(hash: BlobHash, bytes: [UInt8]) {
      self.hash = hash
      self.bytes = bytes
    }
    /// `PUT`.
    package var method: String { "PUT" }
    /// `/v1/blobs/{hash}`.
    package var path: String { "/v1/blobs/\(hash)" }
    /// Yes.
    package var requiresToken: Bool { true }
    /// Yes: an encrypted account's uploads take its room on the server.
    package var isSignedWrite: Bool { true }
    /// `application/octet-stream`.
    package var contentType: String? { "application/octet-stream" }
    /// The bytes.
    package func body() throws -> [UInt8] { bytes }
    /// Nothing.
    package func value(from body: [UInt8]) throws -> NoContent { NoContent() }
  }

  /// `GET /v1/blobs/{hash}`: downloads an attachment's bytes.
  package struct GetBlob: APIRequest {
    /// The bytes' SHA-256.
    package var hash: BlobHash
    /// Creates the request.
    package init(hash: BlobHash) { self.hash = hash }
    /// `GET`.
    package var method: String { "GET" }
    /// `/v1/blobs/{hash}`.
    package var path: String { "/v1/blobs/\(hash)" }
    /// Yes.
    package var requiresToken: Bool { true }
    /// None.
    package var contentType: String? { nil }
    /// Empty.
    package func body() throws -> [UInt8] { [] }
    /// The bytes.
    package func value(from body: [UInt8]) throws -> [UInt8] { body }
  }

  /// `GET /v1/live`: opens the account's live channel, whose answer is a stream of
  /// server-sent events (``APICaller/openLive(token:)`` sends it, not `send`).
  package struct Live: APIRequest {
    /// Creates the request.
    package init() {}
    /// `GET`.
    package var method: String { "GET" }
    /// `/v1/live`.
    package var path: String { "/v1/live" }
    /// Yes.
    package var requiresToken: Bool { true }
    /// None.
    package var contentType: String? { nil }
    /// `text/event-stream`.
    package var accept: String? { LiveMessage.mediaType }
    /// Empty.
    package func body() throws -> [UInt8] { [] }
    /// Nothing: the answer is read as it arrives, not whole.
    package func value(from body: [UInt8]) throws -> NoContent { NoContent() }
  }
}
