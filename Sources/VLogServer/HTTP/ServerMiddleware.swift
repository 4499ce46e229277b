internal import Foundation
internal import HTTPTypes
internal import Hummingbird
internal import Logging
internal import NIOCore
internal import NIOHTTP1
internal import VLog
internal import VLogWire

/// Renders every error as a JSON ``ErrorBody`` and logs one structured line per request.
struct ServerMiddleware: RouterMiddleware {
  package let logger: Logger
  let metrics: ServerMetrics
  /// The API's routes, for the methods a path allows.
  let routes: RouteTable
  /// The proxies whose `Forwarded` and `X-Forwarded-For` headers name the client
  /// (``ClientAddress``).
  let trustedProxies: Set<String>

  func handle(
    _ request: Request, context: ServerContext,
    next: (Request, ServerContext) async throws -> Response
  ) async throws -> Response {
    // Only what the wait below needs lives across it; the rest is synchronous.
    let start = ContinuousClock.now
    var (context, requestID) = Self.identify(request, context)
    if !trustedProxies.isEmpty {
      context.clientAddress = ClientAddress.of(
        peer: context.clientAddress, forwarded: request.headers[.forwarded],
        forwardedFor: request.headers[.xForwardedFor], trusted: trustedProxies)
    }
    let outcome: Result<Response, any Error>
    do {
      outcome = .success(try await next(request, context))
    } catch {
      outcome = .failure(error)
    }
    return answer(outcome, to: request, context: context, requestID: requestID, start: start)
  }

  /// The request's id, and the context that logs under it. A request id from the caller (a
  /// load balancer's, say) is kept, so one request can be followed through both logs;
  /// otherwise Hummingbird's own.
  private static func identify(
    _ request: Request, _ context: ServerContext
  ) -> (ServerContext, String) {
    var context = context
    let requestID: String
    if let given = request.headers[.requestID], isAcceptableRequestID(given) {
      requestID = given
    } else if let own = context.logger[metadataKey: "hb.request.id"] {
      requestID = own.description
    } else {
      // A context made without Hummingbird's application (the in-process transport).
      requestID = Hex.string((0..<8).map { _ in UInt8.random(in: 0...255) })
    }
    context.logger[metadataKey: "hb.request.id"] = .string(requestID)
    return (context, requestID)
  }

  /// The response to send for what the route answered or threw: every error as a JSON
  /// ``ErrorBody``, a HEAD without its body; counted and logged.
  private func answer(
    _ outcome: Result<Response, any Error>, to request: Request, context: ServerContext,
    requestID: String, start: ContinuousClock.Instant
  ) -> Response {
    var response: Response
    do {
      response = try outcome.get()
      if request.method == .head {
        // HEAD is GET without the body (the routes send HEAD to GET's handlers).
        let length = response.body.contentLength
        response.body = ResponseBody()
        if let length { response.headers[.contentLength] = String(length) }
      }
    } catch let error as ServerError {
      response = error.response()
    } catch let error as StorageError {
      // What storage says of itself is for the log; the client gets what it can act on.
      if ![.accountExists, .accountDeleted, .invalidCursor].contains(error.code) {
        context.logger.log(
          level: error.code == .unavailable ? .warning : .error, "storage failed",
          metadata: ["error": "\(error)", "path": "\(request.uri.path)"])
      }
      response = ServerError(error, requestID: requestID).response()
    } catch let error as HTTPError {
      // No route for the method: a path that exists with other methods is a 405.
      if error.status == .notFound,
        let allowed = routes.methods(forPath: request.uri.path), !allowed.contains(request.method)
      {
        response = ServerError.methodNotAllowed(request.method, allowed: allowed).response()
      } else {
        response = ServerError.http(error).response()
      }
    } catch let error as HTTPParserError {
      // The client sent a broken request or went away in the middle of it: its doing, not the
      // server's, and nobody may be left to read the answer.
      context.logger.info(
        "request ended early or malformed",
        metadata: ["error": "\(error)", "path": "\(request.uri.path)"])
      response = ServerError.malformedRequest(error).response()
    } catch {
      // The full description: PostgreSQL's errors describe themselves only generically.
      context.logger.error(
        "request failed",
        metadata: ["error": "\(String(reflecting: error))", "path": "\(request.uri.path)"])
      response = ServerError.internalError(requestID: requestID).response()
    }
    response.headers[.requestID] = requestID
    let elapsed = ContinuousClock.now - start
    metrics.request(
      method: request.method.rawValue, path: context.endpointPath ?? "unmatched",
      status: response.status.code, duration: elapsed)
    let microseconds =
      elapsed.components.seconds * 1_000_000 + elapsed.components.attoseconds / 1_000_000_000_000
    context.logger.log(
      level: response.status.code >= 500 ? .error : .info, "request",
      metadata: [
        "method": "\(request.method)", "path": "\(request.uri.path)",
        "status": "\(response.status.code)", "microseconds": "\(microseconds)",
      ])
    return response
  }
}

extension ServerMiddleware {
  /// Whether a caller's request id may be logged and echoed: 1 to 128 letters, digits and
  /// `-_.:/`.
  static func isAcceptableRequestID(_ id: String) -> Bool {
    (1...128).contains(id.utf8.count)
      && id.utf8.allSatisfy { byte in
        (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte)
          || (0x61...0x7A).contains(byte) || "-_.:/".utf8.contains(byte)
      }
  }
}

extension HTTPField.Name {
  /// `X-Request-ID`: the id under which a request is logged.
  static let requestID = HTTPField.Name("X-Request-ID")!
  /// `VLog-Protocol`: the protocol version a client reads (`WireProtocol`).
  static let wireProtocol = HTTPField.Name(WireProtocol.headerName)!
  /// `Forwarded` (RFC 7239): the client a proxy forwarded for.
  static let forwarded = HTTPField.Name("Forwarded")!
  /// `X-Forwarded-For`: the clients a chain of proxies forwarded for, nearest last.
  static let xForwardedFor = HTTPField.Name("X-Forwarded-For")!
  /// `VLog-Signature`: an encrypted account's devices' signature of a write
  /// (`RequestSignature`).
  static let requestSignature = HTTPField.Name(RequestSignature.headerName)!
}
