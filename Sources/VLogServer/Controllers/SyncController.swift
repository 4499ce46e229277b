internal import CoreMetrics
internal import Foundation
internal import HTTPTypes
internal import Hummingbird
internal import LMDB
internal import Logging
internal import NIOCore
internal import VLog
internal import VLogWire

/// An account's event log: `POST /v1/sync` pushes events and pulls a page, `compare` and
/// `fetch` repair a log whose digest differs from the server's.
struct SyncController: ServerController {
  let logs: any LogStorage
  let keys: any KeyStorage
  let auth: Authenticator
  let reader: RequestReader
  /// The push and page limits, the clock skew allowed and the retention period.
  let configuration: SyncServer.Configuration
  let metrics: ServerMetrics
  /// Whether each account a push came for is end-to-end encrypted, once asked of storage: an
  /// account is one or the other for good, and its number is never given again.
  let encryptedAccounts: Locked<[UInt64: Bool]>
  let now: @Sendable () -> Date

  var routes: [Route] {
    [
      Route("v1/sync", .post) { try await sync($0, $1) },
      Route("v1/sync/compare", .post) { try await compare($0, $1) },
      Route("v1/sync/fetch", .post) { try await fetch($0, $1) },
    ]
  }

  func sync(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, _) = try await auth.authenticate(request)
    let version = try wireProtocol(of: request)
    // A body must say what it is: JSON or the binary encoding, as the document says.
    let contentType = request.headers[.contentType]
    guard let encoding = contentType.flatMap(SyncEncoding.init(contentType:)) else {
      throw ServerError.unsupportedMediaType(contentType)
    }
    let bytes = try await reader.collect(request, upTo: configuration.maximumBodyBytes)
    let push: SyncPush
    do throws(WireError) {
      switch encoding {
      case .json:
        push = try WireJSON.decode(SyncRequest.self, from: bytes).validated(
          maximumEvents: configuration.maximumEventsPerPush)
      case .binary:
        push = try SyncPush(binary: bytes, maximumEvents: configuration.maximumEventsPerPush)
      }
    } catch {
      throw ServerError.invalid(error)
    }
    if !push.events.isEmpty, try await isEncrypted(account) {
      for (index, event) in push.events.enumerated() {
        do { try event.checkSealed() } catch {
          throw ServerError.invalid(WireError("events[\(index)]", error.message))
        }
      }
      // A token alone must not store, nor erase, anything of an encrypted account.
      guard let record = try await keys.encryption(of: account),
        record.admits(
          signature: request.headers[.requestSignature], method: "POST", route: "/v1/sync",
          body: bytes)
      else { throw ServerError.unsignedWrite }
    }
    let wall = Milliseconds(now())
    let serverTime = Int64(clamping: wall.rawValue)
    let bound = Int64(clamping: Milliseconds(configuration.maximumClockSkew).rawValue)
    let latest = wall.adding(configuration.maximumClockSkew)
    for (index, event) in push.events.enumerated()
    where Milliseconds(rawValue: event.stamp.time.milliseconds) > latest {
      throw ServerError.clockSkew(
        field: "events[\(index)].time", eventTime: Int64(event.stamp.time.milliseconds),
        serverTime: serverTime, bound: bound)
    }
    let limit = min(push.limit ?? configuration.defaultPageSize, configuration.maximumPageSize)
    let outcome = try await logs.sync(
      account: account, pushing: push.events,
      comparingSealedValues: version >= .repeatableSeals, after: push.cursor, limit: limit,
      maximumBytes: configuration.maximumPageBytes,
      retention: (configuration.retention, wall))
    context.logger.info(
      "sync",
      metadata: [
        "account": "\(account)", "pushed": "\(push.events.count)",
        "stored": "\(outcome.stored)", "cursor": "\(push.cursor)",
        "returned": "\(outcome.events.count)", "newCursor": "\(outcome.cursor)",
        "more": "\(outcome.more)", "encoding": "\(encoding)",
      ])
    metrics.eventsStored.increment(by: outcome.stored)
    metrics.pagesServed.increment()
    metrics.eventsServed.increment(by: outcome.events.count)
    let page = SyncPage(
      events: outcome.events.map(version.form), cursor: outcome.cursor, more: outcome.more,
      serverTime: now(), stored: outcome.stored,
      eventSetDigest: outcome.head.digest)
    switch SyncEncoding(accept: request.headers[.accept]) {
    case .json:
      return try json(SyncResponse(page), status: .ok)
    case .binary:
      var headers = HTTPFields()
      headers[.contentType] = SyncEncoding.binary.mediaType
      return Response(
        status: .ok, headers: headers,
        body: .init(byteBuffer: ByteBuffer(bytes: page.binaryEncoded())))
    }
  }

  /// Whether `account` is end-to-end encrypted: its pushed events must then carry their values
  /// sealed.
  private func isEncrypted(_ account: UInt64) async throws -> Bool {
    if let known = encryptedAccounts.withLock({ $0[account] }) { return known }
    let encrypted = try await keys.encryption(of: account) != nil
    encryptedAccounts.withLock { $0[account] = encrypted }
    return encrypted
  }

  func compare(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, _) = try await auth.authenticate(request)
    let body = try await reader.decode(CompareRequest.self, from: request)
    let buckets = try checked { () throws(WireError) in try body.validated() }
    let comparison = try await logs.compare(
      account: account, with: buckets, limit: configuration.maximumComparedIDs)
    context.logger.info(
      "compare",
      metadata: [
        "account": "\(account)", "buckets": "\(comparison.ids.count)",
        "ids": "\(comparison.ids.values.reduce(0) { $0 + $1.count })",
        "complete": "\(comparison.complete)",
      ])
    return try json(CompareResponse(comparison), status: .ok)
  }

  func fetch(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, _) = try await auth.authenticate(request)
    let version = try wireProtocol(of: request)
    let body = try await reader.decode(FetchRequest.self, from: request)
    let maximum = configuration.maximumEventsPerPush
    let ids = try checked { () throws(WireError) in try body.validated(maximum: maximum) }
    let events = try await logs.events(
      account: account, ids: ids, maximumBytes: configuration.maximumPageBytes)
    context.logger.info(
      "fetch",
      metadata: ["account": "\(account)", "asked": "\(ids.count)", "returned": "\(events.count)"])
    return try json(FetchResponse(events: events.map(version.form)), status: .ok)
  }
}
