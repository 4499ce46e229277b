internal import HTTPTypes
public import Hummingbird
internal import NIOCore

/// The request context of the server's routes.
public struct ServerContext: RequestContext {
  /// Hummingbird's per-request storage.
  public var coreContext: CoreRequestContextStorage

  /// The connection the request arrived on.
  let channel: any Channel
  /// The address the request came from, as the throttles judge it: the connection's peer, or
  /// behind a trusted proxy the client it forwarded for (``ClientAddress``).
  var clientAddress: String?

  /// Creates a context for a request arriving on a channel.
  public init(source: ApplicationRequestContextSource) {
    coreContext = .init(source: source)
    channel = source.channel
    clientAddress = source.channel.remoteAddress?.ipAddress
  }
}

/// One path and method of the HTTP API, and what answers it: each controller lists its own
/// (``ServerController/routes``).
struct Route: Sendable {
  /// The path, its parameters as `:name` segments.
  let path: String
  let method: HTTPRequest.Method
  /// Whether `HEAD` is answered too, as this `GET` without its body.
  let answersHead: Bool
  let handler: @Sendable (Request, ServerContext) async throws -> Response

  init(
    _ path: String, _ method: HTTPRequest.Method, answersHead: Bool = false,
    _ handler: @escaping @Sendable (Request, ServerContext) async throws -> Response
  ) {
    self.path = path
    self.method = method
    self.answersHead = answersHead
    self.handler = handler
  }
}

/// One area of the HTTP API — accounts, sessions, sync, blobs, keys, the live channel,
/// operations — holding only the storage and settings it uses, as Hummingbird's examples'
/// controllers do.
protocol ServerController: Sendable {
  /// The area's paths and methods, and their handlers.
  var routes: [Route] { get }
}

/// Every route of the API, gathered from the controllers: ``SyncServer/router()`` registers
/// them, and the middleware answers a known path asked with another method 405 with `Allow`
/// from them; a `GET` that ``Route/answersHead`` answers `HEAD` too.
struct RouteTable: Sendable {
  let routes: [Route]

  init(_ controllers: [any ServerController]) {
    routes = controllers.flatMap(\.routes)
  }

  /// Registers every route on `router`.
  func register(on router: Router<ServerContext>) {
    for route in routes {
      router.on(RouterPath(route.path), method: route.method, use: route.handler)
      // HEAD is GET without the body: the middleware drops it and keeps its length.
      if route.answersHead {
        router.on(RouterPath(route.path), method: .head, use: route.handler)
      }
    }
  }

  /// The methods of the route `path` names, or nil if none does. A literal segment wins over
  /// a parameter (`sessions/current` over `sessions/:id`), as in the router.
  func methods(forPath path: String) -> [HTTPRequest.Method]? {
    let segments = path.split(separator: "/", omittingEmptySubsequences: true)
    func matches(_ route: Route) -> Bool {
      let pattern = route.path.split(separator: "/")
      return pattern.count == segments.count
        && zip(pattern, segments).allSatisfy { $0.hasPrefix(":") || $0 == $1 }
    }
    let matching = routes.filter(matches)
    guard let best = matching.map(\.path).min(by: { Self.parameters($0) < Self.parameters($1) })
    else {
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
