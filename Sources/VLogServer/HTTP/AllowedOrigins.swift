internal import Foundation
internal import HTTPTypes
internal import Hummingbird

/// Cross-origin requests from web apps: the origins allowed to call the server from a browser
/// (`vlog serve --allow-origin`), answered by Hummingbird's `CORSMiddleware`. A request from
/// another origin — or from any, when none is allowed, the default — gets no
/// `Access-Control-*` headers, so the browser keeps its answer from the page, and a preflight
/// from it is answered as any `OPTIONS` is (405).
struct AllowedOrigins: RouterMiddleware {
  let origins: Set<String>

  /// The request headers a page may send, the methods of the API, and the response headers
  /// it may read.
  static let headers: [HTTPField.Name] = [
    .accept, .authorization, .contentType, .requestID, .wireProtocol,
  ]
  static let methods: [HTTPRequest.Method] = [.get, .head, .post, .put, .delete, .options]
  static let exposed = ["Retry-After", "X-Request-ID", "Allow", "WWW-Authenticate"]

  func handle(
    _ request: Request, context: ServerContext,
    next: (Request, ServerContext) async throws -> Response
  ) async throws -> Response {
    guard let origin = request.headers[.origin], origins.contains(origin) else {
      return try await next(request, context)
    }
    let cors = CORSMiddleware<ServerContext>(
      allowOrigin: CORSMiddleware<ServerContext>.AllowOriginExtended.custom(origin),
      allowHeaders: Self.headers, allowMethods: Self.methods,
      exposedHeaders: Self.exposed, maxAge: .seconds(600))
    var response = try await cors.handle(request, context: context, next: next)
    // The headers a page may read belong on the answer itself (the Fetch standard's CORS
    // check reads them there); the middleware puts them only on the preflight's.
    if request.method != .options {
      response.headers[.accessControlExposeHeaders] = Self.exposed.joined(separator: ", ")
    }
    return response
  }
}

extension SyncServer.Configuration {
  /// An origin as browsers send it — `scheme://host` or `scheme://host:port`, http or https,
  /// lowercase, without a path — from what an operator wrote; nil if it is not one.
  public static func origin(_ text: String) -> String? {
    guard let url = URLComponents(string: text), let scheme = url.scheme?.lowercased(),
      ["http", "https"].contains(scheme), let host = url.host, !host.isEmpty,
      url.path.isEmpty || url.path == "/", url.query == nil, url.fragment == nil,
      url.user == nil
    else { return nil }
    let port = url.port.map { ":\($0)" } ?? ""
    return "\(scheme)://\(host.lowercased())\(port)"
  }
}
