internal import Hummingbird
internal import Logging
internal import VLog
internal import VLogWire

/// The endpoints of an end-to-end encrypted account's keys: the record of its keys and their
/// rotation, and its notes' and attachments' keys. Each answers 404 for an account that is not
/// encrypted.
extension SyncServer {
  /// The account of the request's token, and its record of keys.
  ///
  /// - Throws: ``ServerError`` `notEncrypted` for an account that is not encrypted.
  private func encryptedAccount(_ request: Request) async throws -> (
    account: UInt64, record: EncryptionRecord
  ) {
    let (account, _) = try await authenticate(request)
    guard let record = try await store.encryption(of: account) else {
      throw ServerError.notEncrypted
    }
    return (account, record)
  }

  /// A query parameter that must be a whole number, if present.
  private func number(_ name: String, of request: Request) throws(ServerError) -> UInt64? {
    guard let text = request.uri.queryParameters[name[...]] else { return nil }
    guard let value = UInt64(text) else {
      throw ServerError.invalid(WireError(name, "'\(text)' is not a whole number"))
    }
    return value
  }

  /// What a device of an encrypted account needs to open its keys, and with `since`, the
  /// links from that epoch to the current one.
  func accountKeys(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, record) = try await encryptedAccount(request)
    var links: [[UInt8]] = []
    if let since = try number("since", of: request), since < record.epoch {
      links = try await store.links(account: account, after: since)
    }
    return try json(record.body(links: links), status: .ok)
  }

  /// Rotates the account's content key: 409 `keysChanged` if it is no longer at the
  /// rotation's epoch, or the rotation lacks a key the account holds.
  func rotateKeys(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, _) = try await encryptedAccount(request)
    let body = try await decode(KeyRotation.self, from: request)
    let rotation = try checked { () throws(WireError) in try body.validated() }
    let record = try await store.rotateKeys(account: account, by: rotation)
    context.logger.info(
      "content key rotated",
      metadata: [
        "account": "\(account)", "epoch": "\(record.epoch)", "keys": "\(rotation.keys.count)",
      ])
    return try json(record.body(), status: .ok)
  }

  /// Stores keys of notes and attachments: 409 `keysChanged` if they are not wrapped by the
  /// current epoch's content key.
  func storeObjectKeys(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, _) = try await encryptedAccount(request)
    let body = try await decode(ObjectKeys.self, from: request)
    let keys = try checked { () throws(WireError) in
      try body.validated(maximum: configuration.maximumEventsPerPush)
    }
    let stored = try await store.storeObjectKeys(keys, account: account, epoch: body.epoch)
    return try json(StoredObjectKeys(stored: stored), status: .ok)
  }

  /// The keys of the objects asked for that the account holds.
  func lookUpObjectKeys(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, _) = try await encryptedAccount(request)
    let body = try await decode(ObjectKeysLookup.self, from: request)
    let objects = try checked { () throws(WireError) in
      try body.validated(maximum: configuration.maximumEventsPerPush)
    }
    let page = try await store.objectKeys(of: objects, account: account)
    return try json(ObjectKeys(epoch: page.epoch, keys: page.keys), status: .ok)
  }

  /// A page of every key the account holds, after the object `after`.
  func listObjectKeys(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, _) = try await encryptedAccount(request)
    var after: Identifier?
    if let text = request.uri.queryParameters["after"] {
      guard let object = Identifier(text) else {
        throw ServerError.invalid(WireError("after", "'\(text)' is not an object id (a UUID)"))
      }
      after = object
    }
    let limit = Int(
      clamping: min(
        try number("limit", of: request) ?? UInt64(configuration.defaultPageSize),
        UInt64(configuration.maximumPageSize)))
    guard limit > 0 else { throw ServerError.invalid(WireError("limit", "0 is not positive")) }
    let page = try await store.objectKeys(account: account, after: after, limit: limit)
    return try json(
      ObjectKeysPage(epoch: page.epoch, keys: page.keys, more: page.more), status: .ok)
  }
}
