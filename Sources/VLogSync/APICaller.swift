internal import Foundation
public import VLog
public import VLogWire

/// Everything about one API call: the request sent, the response received (if any), its status,
/// the error, the parsed value, and the raw bytes of the body.
public struct APIResult<Value: Sendable>: Sendable {
  /// The request as sent.
  public let request: TransportRequest
  /// The response, if one arrived.
  public let response: TransportResponse?
  /// Why the call failed, if it did.
  public let error: APIError?
  /// The parsed value of a successful call.
  public let value: Value?

  /// The HTTP status, if a response arrived.
  public var status: Int? { response?.status }
  /// The raw bytes of the response body (empty without a response).
  public var data: [UInt8] { response?.body ?? [] }

  /// The value, or the error.
  public func get() throws(APIError) -> Value {
    if let value { return value }
    throw error ?? APIError(.invalidResponse, "the call returned neither a value nor an error")
  }
}

/// The sync server's API, one method per endpoint, and no state: each method builds its request
/// value and sends it through the transport with the token it is given.
///
/// Only an account (``SyncAccount``) uses an API caller; apps talk to the account.
public struct APICaller: Sendable {
  /// How requests reach the server.
  public let transport: any Transport
  /// The seed of the key an encrypted account's devices sign their writes with
  /// (`RequestSignature`, `AccountKeys/requestSigningKey`); nil to sign nothing.
  public var requestSigningKey: [UInt8]?

  /// Creates a caller over a transport.
  public init(transport: any Transport) {
    self.transport = transport
  }

  /// This caller signing the writes it sends to an encrypted account's log and keys (pushes of
  /// events, rotations, object keys, bytes) with `key`, a seed of `RequestSignature`; with nil,
  /// signing nothing.
  public func signingWrites(with key: [UInt8]?) -> APICaller {
    var caller = self
    caller.requestSigningKey = key
    return caller
  }

  /// `POST /v1/accounts`: an account whose notes the server reads, or with `keys` an end-to-end
  /// encrypted one.
  public func createAccount(_ credentials: Credentials, keys: NewAccountKeys? = nil) async
    -> APIResult<AccountBody>
  {
    await send(Endpoints.CreateAccount(credentials: credentials, keys: keys), token: nil)
  }

  /// `POST /v1/accounts`, with the whole body.
  public func createAccount(_ account: NewAccount) async -> APIResult<AccountBody> {
    await send(Endpoints.CreateAccount(account), token: nil)
  }

  /// `GET /v1/accounts/current/keys`, with the links of the epochs after `since`.
  public func accountKeys(since: UInt64? = nil, token: String) async -> APIResult<AccountKeysBody> {
    await send(Endpoints.AccountKeys(since: since), token: token)
  }

  /// `POST /v1/accounts/recovery-keys`.
  public func recoveryKeys(_ credentials: RecoveryCredentials) async -> APIResult<AccountKeysBody> {
    await send(Endpoints.RecoveryKeys(credentials: credentials), token: nil)
  }

  /// `POST /v1/sessions/parameters`: whether the account `username` is encrypted and how its
  /// password is stretched. Untrusted: see `KeyDerivation/checked(own:encrypted:pinned:seenVersion:allowingVersionOne:)`.
  public func signInParameters(username: String) async -> APIResult<SignInParameters> {
    await send(Endpoints.SignInParametersCall(username: username), token: nil)
  }

  /// `POST /v1/accounts/recover`.
  public func recover(_ recovery: AccountRecovery) async -> APIResult<NoContent> {
    await send(Endpoints.Recover(recovery), token: nil)
  }

  /// `PUT /v1/accounts/current/keys`.
  public func rotateKeys(_ rotation: KeyRotation, token: String) async -> APIResult<
    AccountKeysBody
  > {
    await send(Endpoints.RotateKeys(rotation), token: token)
  }

  /// `POST /v1/object-keys`.
  public func storeObjectKeys(_ keys: ObjectKeys, token: String) async -> APIResult<
    StoredObjectKeys
  > {
    await send(Endpoints.StoreObjectKeys(keys), token: token)
  }

  /// `POST /v1/object-keys/lookup`.
  public func lookUpObjectKeys(_ objects: [Identifier], token: String) async -> APIResult<
    ObjectKeys
  > {
    await send(Endpoints.LookUpObjectKeys(objects), token: token)
  }

  /// `GET /v1/object-keys`.
  public func listObjectKeys(after: Identifier? = nil, token: String) async -> APIResult<
    ObjectKeysPage
  > {
    await send(Endpoints.ListObjectKeys(after: after), token: token)
  }

  /// `POST /v1/sessions`.
  public func signIn(_ credentials: Credentials) async -> APIResult<SessionBody> {
    await send(Endpoints.SignIn(credentials: credentials), token: nil)
  }

  /// `DELETE /v1/sessions/current`.
  public func signOut(token: String) async -> APIResult<NoContent> {
    await send(Endpoints.SignOut(), token: token)
  }

  /// `PUT /v1/accounts/current/password`.
  public func changePassword(_ change: PasswordChange, token: String) async -> APIResult<
    NoContent
  > {
    await send(Endpoints.ChangePassword(change), token: token)
  }

  /// `DELETE /v1/accounts/current`.
  public func deleteAccount(password: String, token: String) async -> APIResult<NoContent> {
    await send(Endpoints.DeleteAccount(password: password), token: token)
  }

  /// `GET /v1/sessions`.
  public func sessions(token: String) async -> APIResult<SessionList> {
    await send(Endpoints.Sessions(), token: token)
  }

  /// `DELETE /v1/sessions/{id}`.
  public func revokeSession(id: String, token: String) async -> APIResult<NoContent> {
    await send(Endpoints.RevokeSession(id: id), token: token)
  }

  /// `POST /v1/sync`, in the given encoding.
  public func sync(_ push: SyncPush, encoding: SyncEncoding = .json, token: String) async
    -> APIResult<SyncPage>
  {
    await send(Endpoints.Sync(push, encoding: encoding), token: token)
  }

  /// `POST /v1/sync/compare`.
  public func compare(_ buckets: EventSetBuckets, token: String) async -> APIResult<Comparison> {
    await send(Endpoints.Compare(buckets: buckets), token: token)
  }

  /// `POST /v1/sync/fetch`.
  public func fetch(_ ids: [Stamp], token: String) async -> APIResult<[Event]> {
    await send(Endpoints.Fetch(ids: ids), token: token)
  }

  /// `POST /v1/sync/missing-blobs`.
  public func missingBlobs(_ hashes: [BlobHash], token: String) async -> APIResult<[BlobHash]> {
    await send(Endpoints.MissingBlobs(hashes: hashes), token: token)
  }

  /// `PUT /v1/blobs/{hash}`.
  public func putBlob(_ bytes: [UInt8], hash: BlobHash, token: String) async -> APIResult<
    NoContent
  > {
    await send(Endpoints.PutBlob(hash: hash, bytes: bytes), token: token)
  }

  /// `GET /v1/blobs/{hash}`.
  public func blob(_ hash: BlobHash, token: String) async -> APIResult<[UInt8]> {
    await send(Endpoints.GetBlob(hash: hash), token: token)
  }

  /// `GET /v1/live`: opens the account's live channel. Its value is the stream of the
  /// channel's bytes; ``LiveChannel`` reads them as messages.
  public func openLive(token: String) async -> APIResult<TransportStream> {
    let request = Endpoints.Live()
    let outgoing = self.outgoing(request, token: token, body: [])
    let stream: TransportStream
    do {
      stream = try await transport.open(outgoing)
    } catch {
      return APIResult(
        request: outgoing, response: nil,
        error: APIError(.transport, "no answer from the server: \(error)"), value: nil)
    }
    if let error = Self.failure(stream.response) {
      return APIResult(request: outgoing, response: stream.response, error: error, value: nil)
    }
    return APIResult(request: outgoing, response: stream.response, error: nil, value: stream)
  }

  /// Sends any request value and reads its answer.
  package func send<Request: APIRequest>(_ request: Request, token: String?) async -> APIResult<
    Request.Value
  > {
    let body: [UInt8]
    do {
      body = try request.body()
    } catch {
      return APIResult(
        request: outgoing(request, token: token, body: []), response: nil,
        error: APIError(.invalidRequest, "cannot encode the request: \(error)"), value: nil)
    }
    let outgoing = self.outgoing(request, token: token, body: body)
    let response: TransportResponse
    do {
      response = try await transport.send(outgoing)
    } catch {
      return APIResult(
        request: outgoing, response: nil,
        error: APIError(.transport, "no answer from the server: \(error)"), value: nil)
    }
    if let error = Self.failure(response) {
      return APIResult(request: outgoing, response: response, error: error, value: nil)
    }
    do {
      return APIResult(
        request: outgoing, response: response, error: nil,
        value: try request.value(from: response))
    } catch {
      return APIResult(
        request: outgoing, response: response,
        error: APIError(
          .invalidResponse, "the server's answer is malformed: \(error)",
          status: response.status),
        value: nil)
    }
  }

  /// The request as it travels: method, path, headers, the token, the body.
  private func outgoing(_ request: some APIRequest, token: String?, body: [UInt8])
    -> TransportRequest
  {
    var outgoing = TransportRequest(
      method: request.method, path: request.path, headers: request.headers, body: body)
    if let contentType = request.contentType { outgoing.headers["content-type"] = contentType }
    if let accept = request.accept { outgoing.headers["accept"] = accept }
    if request.requiresToken, let token { outgoing.headers["authorization"] = "Bearer \(token)" }
    // A key of the wrong size signs nothing, and the server refuses the write.
    if request.isSignedWrite, let key = requestSigningKey,
      let signature = try? RequestSignature.signature(
        method: request.method, route: request.path, body: body, privateKey: key)
    {
      outgoing.headers[RequestSignature.headerName.lowercased()] = signature
    }
    return outgoing
  }

  /// The error an answer other than 2xx says; nil for a 2xx answer.
  private static func failure(_ response: TransportResponse) -> APIError? {
    guard !(200..<300).contains(response.status) else { return nil }
    // Not every error body is ours (a proxy's HTML page, say): then its text is the message.
    let body: ErrorBody? = try? WireJSON.decode(from: response.body)
    let message =
      body?.message ?? String(decoding: response.body.prefix(200), as: UTF8.self)
    // Retry-After in delta-seconds; the HTTP-date form is not used by the sync server.
    let retryAfter = response.headers["retry-after"].flatMap { Int($0) }.map {
      Duration.seconds(max(0, $0))
    }
    return APIError(.server, message, status: response.status, body: body, retryAfter: retryAfter)
  }
}

/// One API call on behalf of a signed-in account: runs its request with the current token and,
/// if the server refuses the token as expired or revoked, signs in again once and retries.
package struct APICall<Value: Sendable>: Sendable {
  /// Sends the request with a token.
  package let send: @Sendable (_ token: String) async -> APIResult<Value>

  /// Creates a call from the request it sends.
  package init(_ send: @escaping @Sendable (_ token: String) async -> APIResult<Value>) {
    self.send = send
  }

  /// Runs the call.
  ///
  /// - Parameters:
  ///   - token: The token to try first; nil signs in first.
  ///   - signIn: Signs in, for a new token.
  /// - Returns: The result (a failed sign-in's error if signing in failed), and the token that
  ///   was used last.
  package func run(
    token: String?, signIn: @Sendable () async -> APIResult<SessionBody>
  ) async -> (result: APIResult<Value>, token: String?) {
    if let token {
      let first = await send(token)
      guard first.error?.isUnauthorized == true else { return (first, token) }
    }
    let session = await signIn()
    guard let new = session.value?.token else {
      return (
        APIResult(
          request: session.request, response: session.response, error: session.error,
          value: nil), nil
      )
    }
    return (await send(new), new)
  }
}
