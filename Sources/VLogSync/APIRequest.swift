internal import Foundation
public import VLog
public import VLogWire

/// One endpoint of the sync server's HTTP API as a small value: its method, path and body, and
/// how to read a successful response. The API caller sends these; nothing else builds HTTP.
public protocol APIRequest: Sendable {
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
  public var contentType: String? { "application/json" }
  /// None, the default.
  public var accept: String? { nil }
  /// None, the default.
  public var headers: [String: String] { [:] }
  /// The body's value.
  public func value(from response: TransportResponse) throws -> Value {
    try value(from: response.body)
  }
}

/// Nothing: the value of endpoints that answer with no body.
public struct NoContent: Sendable, Hashable {
  /// The empty value.
  public init() {}
}

/// The requests of the sync server's API, one per endpoint.
public enum Endpoints {
  /// `POST /v1/accounts`: creates an account.
  public struct CreateAccount: APIRequest {
    /// The new account's user name and password.
    public var credentials: Credentials
    /// An end-to-end encrypted account's keys, as the server keeps them; nil for an account
    /// whose notes the server reads.
    public var keys: NewAccountKeys?
    /// Creates the request.
    public init(credentials: Credentials, keys: NewAccountKeys? = nil) {
      self.credentials = credentials
      self.keys = keys
    }
    /// `POST`.
    public var method: String { "POST" }
    /// `/v1/accounts`.
    public var path: String { "/v1/accounts" }
    /// No: anyone may create an account.
    public var requiresToken: Bool { false }
    /// The credentials, and an encrypted account's keys, as JSON.
    public func body() throws -> [UInt8] {
      Array(try JSONEncoder().encode(NewAccount(credentials: credentials, keys: keys)))
    }
    /// The created account.
    public func value(from body: [UInt8]) throws -> AccountBody { try WireJSON.decode(from: body) }
  }

  /// `POST /v1/sessions`: signs in, returning a bearer token.
  public struct SignIn: APIRequest {
    /// The account's user name and password.
    public var credentials: Credentials
    /// Creates the request.
    public init(credentials: Credentials) { self.credentials = credentials }
    /// `POST`.
    public var method: String { "POST" }
    /// `/v1/sessions`.
    public var path: String { "/v1/sessions" }
    /// No: this is how a token is obtained.
    public var requiresToken: Bool { false }
    /// The credentials as JSON.
    public func body() throws -> [UInt8] { Array(try JSONEncoder().encode(credentials)) }
    /// The token and its expiry.
    public func value(from body: [UInt8]) throws -> SessionBody { try WireJSON.decode(from: body) }
  }

  /// `POST /v1/sessions/parameters`: how to sign in as a name — whether the account is
  /// end-to-end encrypted, and how its password is stretched — before signing in.
  public struct SignInParametersCall: APIRequest {
    /// The user name.
    public var username: String
    /// Creates the request.
    public init(username: String) { self.username = username }
    /// `POST`.
    public var method: String { "POST" }
    /// `/v1/sessions/parameters`.
    public var path: String { "/v1/sessions/parameters" }
    /// No: it comes before signing in.
    public var requiresToken: Bool { false }
    /// The user name as JSON.
    public func body() throws -> [UInt8] {
      Array(try JSONEncoder().encode(SignInParametersRequest(username: username)))
    }
    /// The parameters.
    public func value(from body: [UInt8]) throws -> SignInParameters {
      try WireJSON.decode(from: body)
    }
  }

  /// `POST /v1/accounts/recovery-keys`: an encrypted account's sealed keys, for a device that
  /// holds its recovery key.
  public struct RecoveryKeys: APIRequest {
    /// The user name and the recovery key's sign-in secret.
    public var credentials: RecoveryCredentials
    /// Creates the request.
    public init(credentials: RecoveryCredentials) { self.credentials = credentials }
    /// `POST`.
    public var method: String { "POST" }
    /// `/v1/accounts/recovery-keys`.
    public var path: String { "/v1/accounts/recovery-keys" }
    /// No: the recovery key's secret is the credential.
    public var requiresToken: Bool { false }
    /// The credentials as JSON.
    public func body() throws -> [UInt8] { Array(try JSONEncoder().encode(credentials)) }
    /// The account's keys, sealed.
    public func value(from body: [UInt8]) throws -> AccountKeysBody {
      try WireJSON.decode(from: body)
    }
  }

  /// `POST /v1/accounts/recover`: recovers an encrypted account with its recovery key.
  public struct Recover: APIRequest {
    /// The recovery.
    public var recovery: AccountRecovery
    /// Creates the request.
    public init(_ recovery: AccountRecovery) { self.recovery = recovery }
    /// `POST`.
    public var method: String { "POST" }
    /// `/v1/accounts/recover`.
    public var path: String { "/v1/accounts/recover" }
    /// No: the recovery key's secret is the credential.
    public var requiresToken: Bool { false }
    /// The recovery as JSON.
    public func body() throws -> [UInt8] { Array(try JSONEncoder().encode(recovery)) }
    /// Nothing.
    public func value(from body: [UInt8]) throws -> NoContent { NoContent() }
  }

  /// `DELETE /v1/sessions/current`: revokes the token it is sent with.
  public struct SignOut: APIRequest {
    /// Creates the request.
    public init() {}
    /// `DELETE`.
    public var method: String { "DELETE" }
    /// `/v1/sessions/current`.
    public var path: String { "/v1/sessions/current" }
    /// Yes.
    public var requiresToken: Bool { true }
    /// None.
    public var contentType: String? { nil }
    /// Empty.
    public func body() throws -> [UInt8] { [] }
    /// Nothing.
    public func value(from body: [UInt8]) throws -> NoContent { NoContent() }
  }

  /// `PUT /v1/accounts/current/password`: changes the password, revoking every other token.
  public struct ChangePassword: APIRequest {
    /// The password now and the new one.
    public var change: PasswordChange
    /// Creates the request.
    public init(_ change: PasswordChange) { self.change = change }
    /// `PUT`.
    public var method: String { "PUT" }
    /// `/v1/accounts/current/password`.
    public var path: String { "/v1/accounts/current/password" }
    /// Yes.
    public var requiresToken: Bool { true }
    /// The passwords as JSON.
    public func body() throws -> [UInt8] { Array(try JSONEncoder().encode(change)) }
    /// Nothing.
    public func value(from body: [UInt8]) throws -> NoContent { NoContent() }
  }

  /// `DELETE /v1/accounts/current`: erases the account and everything of it.
  public struct DeleteAccount: APIRequest {
    /// The account's password, checked again.
    public var deletion: AccountDeletion
    /// Creates the request.
    public init(password: String) { deletion = AccountDeletion(password: password) }
    /// `DELETE`.
    public var method: String { "DELETE" }
    /// `/v1/accounts/current`.
    public var path: String { "/v1/accounts/current" }
    /// Yes.
    public var requiresToken: Bool { true }
    /// The password as JSON.
    public func body() throws -> [UInt8] { Array(try JSONEncoder().encode(deletion)) }
    /// Nothing.
    public func value(from body: [UInt8]) throws -> NoContent { NoContent() }
  }

  /// `GET /v1/sessions`: the account's sessions.
  public struct Sessions: APIRequest {
    /// Creates the request.
    public init() {}
    /// `GET`.
    public var method: String { "GET" }
    /// `/v1/sessions`.
    public var path: String { "/v1/sessions" }
    /// Yes.
    public var requiresToken: Bool { true }
    /// None.
    public var contentType: String? { nil }
    /// Empty.
    public func body() throws -> [UInt8] { [] }
    /// The sessions.
    public func value(from body: [UInt8]) throws -> SessionList { try WireJSON.decode(from: body) }
  }

  /// `GET /v1/accounts/current/keys`: an encrypted account's keys as the server keeps them,
  /// with the links of the epochs after `since`.
  public struct AccountKeys: APIRequest {
    /// The epoch the device holds, whose links to the current one it wants; nil for none.
    public var since: UInt64?
    /// Creates the request.
    public init(since: UInt64? = nil) { self.since = since }
    /// `GET`.
    public var method: String { "GET" }
    /// `/v1/accounts/current/keys`, with `?since=`.
    public var path: String {
      "/v1/accounts/current/keys" + (since.map { "?since=\($0)" } ?? "")
    }
    /// Yes.
    public var requiresToken: Bool { true }
    /// None.
    public var contentType: String? { nil }
    /// Empty.
    public func body() throws -> [UInt8] { [] }
    /// Reads the keys.
    public func value(from body: [UInt8]) throws -> AccountKeysBody {
      try WireJSON.decode(from: body)
    }
  }

  /// `PUT /v1/accounts/current/keys`: rotates an encrypted account's content key.
  public struct RotateKeys: APIRequest {
    /// The rotation.
    public var rotation: KeyRotation
    /// Creates the request.
    public init(_ rotation: KeyRotation) { self.rotation = rotation }
    /// `PUT`.
    public var method: String { "PUT" }
    /// `/v1/accounts/current/keys`.
    public var path: String { "/v1/accounts/current/keys" }
    /// Yes.
    public var requiresToken: Bool { true }
    /// The rotation as JSON.
    public func body() throws -> [UInt8] { Array(try JSONEncoder().encode(rotation)) }
    /// Reads the keys after the rotation.
    public func value(from body: [UInt8]) throws -> AccountKeysBody {
      try WireJSON.decode(from: body)
    }
  }

  /// `POST /v1/object-keys`: stores keys of notes and attachments.
  public struct StoreObjectKeys: APIRequest {
    /// The keys, wrapped by the content key of their epoch.
    public var keys: ObjectKeys
    /// Creates the request.
    public init(_ keys: ObjectKeys) { self.keys = keys }
    /// `POST`.
    public var method: String { "POST" }
    /// `/v1/object-keys`.
    public var path: String { "/v1/object-keys" }
    /// Yes.
    public var requiresToken: Bool { true }
    /// The keys as JSON.
    public func body() throws -> [UInt8] { Array(try JSONEncoder().encode(keys)) }
    /// Reads how many were stored.
    public func value(from body: [UInt8]) throws -> StoredObjectKeys {
      try WireJSON.decode(from: body)
    }
  }

  /// `POST /v1/object-keys/lookup`: the keys of some notes and attachments.
  public struct LookUpObjectKeys: APIRequest {
    /// The objects.
    public var objects: [Identifier]
    /// Creates the request.
    public init(_ objects: [Identifier]) { self.objects = objects }
    /// `POST`.
    public var method: String { "POST" }
    /// `/v1/object-keys/lookup`.
    public var path: String { "/v1/object-keys/lookup" }
    /// Yes.
    public var requiresToken: Bool { true }
    /// The ids as JSON.
    public func body() throws -> [UInt8] {
      Array(try JSONEncoder().encode(ObjectKeysLookup(objects: objects)))
    }
    /// Reads the keys the account holds.
    public func value(from body: [UInt8]) throws -> ObjectKeys {
      try WireJSON.decode(from: body)
    }
  }

  /// `GET /v1/object-keys`: a page of every key of the account's notes and attachments.
  public struct ListObjectKeys: APIRequest {
    /// The last object of the page before; nil for the first page.
    public var after: Identifier?
    /// Creates the request.
    public init(after: Identifier? = nil) { self.after = after }
    /// `GET`.
    public var method: String { "GET" }
    /// `/v1/object-keys`, with `?after=`.
    public var path: String { "/v1/object-keys" + (after.map { "?after=\($0)" } ?? "") }
    /// Yes.
    public var requiresToken: Bool { true }
    /// None.
    public var contentType: String? { nil }
    /// Empty.
    public func body() throws -> [UInt8] { [] }
    /// Reads the page.
    public func value(from body: [UInt8]) throws -> ObjectKeysPage {
      try WireJSON.decode(from: body)
    }
  }

  /// `DELETE /v1/sessions/{id}`: revokes one session of the account.
  public struct RevokeSession: APIRequest {
    /// The session's id, from ``Sessions``.
    public var id: String
    /// Creates the request.
    public init(id: String) { self.id = id }
    /// `DELETE`.
    public var method: String { "DELETE" }
    /// `/v1/sessions/{id}`, the id percent-encoded.
    public var path: String {
      "/v1/sessions/" + (id.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")
    }
    /// Yes.
    public var requiresToken: Bool { true }
    /// None.
    public var contentType: String? { nil }
    /// Empty.
    public func body() throws -> [UInt8] { [] }
    /// Nothing.
    public func value(from body: [UInt8]) throws -> NoContent { NoContent() }
  }

  /// `POST /v1/sync`: pushes events and pulls the page after the cursor.
  public struct Sync: APIRequest {
    /// The events and the cursor.
    public var push: SyncPush
    /// How to encode the request and which encoding to ask for in return.
    public var encoding: SyncEncoding
    /// Creates the request.
    public init(_ push: SyncPush, encoding: SyncEncoding = .json) {
      self.push = push
      self.encoding = encoding
    }
    /// `POST`.
    public var method: String { "POST" }
    /// `/v1/sync`.
    public var path: String { "/v1/sync" }
    /// Yes.
    public var requiresToken: Bool { true }
    /// The encoding's media type.
    public var contentType: String? { encoding.mediaType }
    /// The encoding's media type, and JSON (which a server may answer with).
    public var accept: String? {
      encoding == .json ? encoding.mediaType : "\(encoding.mediaType), application/json"
    }
    /// The protocol version this client reads (`WireProtocol`).
    public var headers: [String: String] {
      [WireProtocol.headerName.lowercased(): WireProtocol.current.description]
    }
    /// The sync request, encoded.
    public func body() throws -> [UInt8] {
      switch encoding {
      case .json: Array(try JSONEncoder().encode(SyncRequest(push)))
      case .binary: push.binaryEncoded()
      }
    }
    /// The page, from a JSON body.
    public func value(from body: [UInt8]) throws -> SyncPage {
      try WireJSON.decode(SyncResponse.self, from: body).validated()
    }
    /// The page, in the encoding the response's `Content-Type` names.
    public func value(from response: TransportResponse) throws -> SyncPage {
      switch response.headers["content-type"].flatMap(SyncEncoding.init(contentType:)) {
      case .binary: try SyncPage(binary: response.body)
      case .json, nil: try value(from: response.body)
      }
    }
  }

  /// `POST /v1/sync/compare`: sends the client's event-set digest in buckets and gets the
  /// server's ids in the buckets that differ.
  public struct Compare: APIRequest {
    /// The client's buckets.
    public var buckets: EventSetBuckets
    /// Creates the request.
    public init(buckets: EventSetBuckets) { self.buckets = buckets }
    /// `POST`.
    public var method: String { "POST" }
    /// `/v1/sync/compare`.
    public var path: String { "/v1/sync/compare" }
    /// Yes.
    public var requiresToken: Bool { true }
    /// The buckets as JSON.
    public func body() throws -> [UInt8] {
      Array(try JSONEncoder().encode(CompareRequest(buckets)))
    }
    /// The server's ids in the buckets that differ.
    public func value(from body: [UInt8]) throws -> Comparison {
      try WireJSON.decode(CompareResponse.self, from: body).validated()
    }
  }

  /// `POST /v1/sync/fetch`: gets events by id.
  public struct Fetch: APIRequest {
    /// The ids wanted.
    public var ids: [Stamp]
    /// Creates the request.
    public init(ids: [Stamp]) { self.ids = ids }
    /// `POST`.
    public var method: String { "POST" }
    /// `/v1/sync/fetch`.
    public var path: String { "/v1/sync/fetch" }
    /// Yes.
    public var requiresToken: Bool { true }
    /// The protocol version this client reads (`WireProtocol`).
    public var headers: [String: String] {
      [WireProtocol.headerName.lowercased(): WireProtocol.current.description]
    }
    /// The ids as JSON.
    public func body() throws -> [UInt8] { Array(try JSONEncoder().encode(FetchRequest(ids: ids))) }
    /// The events the server holds, in the order asked, perhaps not all of them.
    public func value(from body: [UInt8]) throws -> [Event] {
      try WireJSON.decode(FetchResponse.self, from: body).validated()
    }
  }

  /// `POST /v1/sync/missing-blobs`: asks which blobs the server lacks.
  public struct MissingBlobs: APIRequest {
    /// The hashes asked about.
    public var hashes: [BlobHash]
    /// Creates the request.
    public init(hashes: [BlobHash]) { self.hashes = hashes }
    /// `POST`.
    public var method: String { "POST" }
    /// `/v1/sync/missing-blobs`.
    public var path: String { "/v1/sync/missing-blobs" }
    /// Yes.
    public var requiresToken: Bool { true }
    /// The hashes as JSON.
    public func body() throws -> [UInt8] {
      Array(try JSONEncoder().encode(MissingBlobsRequest(hashes: hashes)))
    }
    /// The hashes whose bytes the server lacks, in the order asked.
    public func value(from body: [UInt8]) throws -> [BlobHash] {
      try WireJSON.decode(MissingBlobsResponse.self, from: body).validated()
    }
  }

  /// `PUT /v1/blobs/{hash}`: uploads an attachment's bytes.
  public struct PutBlob: APIRequest {
    /// The bytes' SHA-256.
    public var hash: BlobHash
    /// The bytes.
    public var bytes: [UInt8]
    /// Creates the request.
    public init(hash: BlobHash, bytes: [UInt8]) {
      self.hash = hash
      self.bytes = bytes
    }
    /// `PUT`.
    public var method: String { "PUT" }
    /// `/v1/blobs/{hash}`.
    public var path: String { "/v1/blobs/\(hash)" }
    /// Yes.
    public var requiresToken: Bool { true }
    /// `application/octet-stream`.
    public var contentType: String? { "application/octet-stream" }
    /// The bytes.
    public func body() throws -> [UInt8] { bytes }
    /// Nothing.
    public func value(from body: [UInt8]) throws -> NoContent { NoContent() }
  }

  /// `GET /v1/blobs/{hash}`: downloads an attachment's bytes.
  public struct GetBlob: APIRequest {
    /// The bytes' SHA-256.
    public var hash: BlobHash
    /// Creates the request.
    public init(hash: BlobHash) { self.hash = hash }
    /// `GET`.
    public var method: String { "GET" }
    /// `/v1/blobs/{hash}`.
    public var path: String { "/v1/blobs/\(hash)" }
    /// Yes.
    public var requiresToken: Bool { true }
    /// None.
    public var contentType: String? { nil }
    /// Empty.
    public func body() throws -> [UInt8] { [] }
    /// The bytes.
    public func value(from body: [UInt8]) throws -> [UInt8] { body }
  }

  /// `GET /v1/live`: opens the account's live channel, whose answer is a stream of
  /// server-sent events (``APICaller/openLive(token:)`` sends it, not `send`).
  public struct Live: APIRequest {
    /// Creates the request.
    public init() {}
    /// `GET`.
    public var method: String { "GET" }
    /// `/v1/live`.
    public var path: String { "/v1/live" }
    /// Yes.
    public var requiresToken: Bool { true }
    /// None.
    public var contentType: String? { nil }
    /// `text/event-stream`.
    public var accept: String? { LiveMessage.mediaType }
    /// Empty.
    public func body() throws -> [UInt8] { [] }
    /// Nothing: the answer is read as it arrives, not whole.
    public func value(from body: [UInt8]) throws -> NoContent { NoContent() }
  }
}
