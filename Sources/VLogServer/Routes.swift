internal import HTTPTypes
public import Hummingbird
internal import NIOCore

/// The request context of the server's routes.
public struct ServerContext: RequestContext {
  /// Hummingbird's per-request storage.
  public var coreContext: CoreRequestContextStorage

  /// The connection the request arrived on.
  let channel: any Channel

  /// Creates a context for a request arriving on a channel.
  public init(source: ApplicationRequestContextSource) {
    coreContext = .init(source: source)
    channel = source.channel
  }
}

/// The HTTP API, written once: each path, method and handler. ``SyncServer/router()`` registers
/// them; the middleware answers a known path asked with another method 405 with `Allow` from
/// them; a `GET` that ``Route/answersHead`` answers `HEAD` too.
enum Routes {
  /// One path and method, and what answers it.
  struct Route: Sendable {
    /// The path, its parameters as `:name` segments.
    let path: String
    let method: HTTPRequest.Method
    /// Whether `HEAD` is answered too, as this `GET` without its body.
    let answersHead: Bool
    let handler: @Sendable (SyncServer, Request, ServerContext) async throws -> Response

    init(
      _ path: String, _ method: HTTPRequest.Method, answersHead: Bool = false,
      _ handler: @escaping @Sendable (SyncServer, Request, ServerContext) async throws -> Response
    ) {
      self.path = path
      self.method = method
      self.answersHead = answersHead
      self.handler = handler
    }
  }

  static let all: [Route] = [
    Route("metrics", .get) { server, _, _ in server.metricsResponse() },
    Route("v1/health", .get) { server, _, _ in try await server.health() },
    Route("v1/health/live", .get) { server, _, _ in try server.liveness() },
    Route("v1/openapi.json", .get, answersHead: true) { server, _, _ in
      server.documentResponse()
    },
    Route("v1/accounts", .post) { try await $0.createAccount($1, $2) },
    Route("v1/accounts/current", .delete) { try await $0.deleteAccount($1, $2) },
    Route("v1/accounts/current/password", .put) { try await $0.changePassword($1, $2) },
    Route("v1/accounts/recovery-keys", .post) { try await $0.recoveryKeys($1, $2) },
    Route("v1/accounts/recover", .post) { try await $0.recover($1, $2) },
    Route("v1/accounts/current/keys", .get) { try await $0.accountKeys($1, $2) },
    Route("v1/accounts/current/keys", .put) { try await $0.rotateKeys($1, $2) },
    Route("v1/object-keys", .get) { try await $0.listObjectKeys($1, $2) },
    Route("v1/object-keys", .post) { try await $0.storeObjectKeys($1, $2) },
    Route("v1/object-keys/lookup", .post) { try await $0.lookUpObjectKeys($1, $2) },
    Route("v1/sessions", .get) { try await $0.sessions($1, $2) },
    Route("v1/sessions", .post) { try await $0.signIn($1, $2) },
    Route("v1/sessions/parameters", .post) { try await $0.signInParameters($1, $2) },
    Route("v1/sessions/current", .delete) { try await $0.signOut($1, $2) },
    Route("v1/sessions/:id", .delete) { try await $0.revokeSession($1, $2) },
    Route("v1/live", .get) { try await $0.live($1, $2) },
    Route("v1/sync", .post) { try await $0.sync($1, $2) },
    Route("v1/sync/compare", .post) { try await $0.compare($1, $2) },
    Route("v1/sync/fetch", .post) { try await $0.fetch($1, $2) },
    Route("v1/sync/missing-blobs", .post) { try await $0.missingBlobs($1, $2) },
    Route("v1/blobs/:hash", .get, answersHead: true) { try await $0.blob($1, $2) },
    Route("v1/blobs/:hash", .put) { try await $0.putBlob($1, $2) },
  ]

  /// The methods of the route `path` names, or nil if none does. A literal segment wins over
  /// a parameter (`sessions/current` over `sessions/:id`), as in the router.
  static func methods(forPath path: String) -> [HTTPRequest.Method]? {
    let segments = path.split(separator: "/", omittingEmptySubsequences: true)
    func matches(_ route: Route) -> Bool {
      let pattern = route.path.split(separator: "/")
      return pattern.count == segments.count
        && zip(pattern, segments).allSatisfy { $0.hasPrefix(":") || $0 == $1 }
    }
    let matching = all.filter(matches)
    guard let best = matching.map(\.path).min(by: { parameters($0) < parameters($1) }) else {
      return nil
    }
    return matching.filter { $0.path == best }.flatMap {
      $0.answersHead ? [$0.method, .head] : [$0.method]
    }
  }

  private static func parameters(_ path: String) -> Int {
    path.split(separator: "/").filter { $0.hasPrefix(":") }.count
  }
}
