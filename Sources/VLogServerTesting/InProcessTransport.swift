internal import HTTPTypes
internal import Hummingbird
internal import Logging
internal import NIOCore
internal import NIOEmbedded
internal import Synchronization
public import VLogServer
public import VLogSync

/// A transport that hands requests straight to a `SyncServer`'s router in the same process:
/// the same routes, middleware and JSON as over HTTP, without sockets.
///
/// For simulations and tests that run many replicas and a server in one process; wrap it to
/// drop, duplicate or delay messages.
public struct InProcessTransport: Transport {
  private let responder: RouterResponder<ServerContext>
  private let logger: Logger
  /// The name stores bound through this transport record as their server.
  public let server: String

  /// Creates a transport to `server`, which stores that sync through it know as `name`.
  public init(server: SyncServer, name: String = "in-process") {
    responder = server.router().buildResponder()
    logger = server.logger
    self.server = name
  }

  /// Runs the request through the router and collects the response.
  public func send(_ request: TransportRequest) async throws -> TransportResponse {
    var fields = HTTPFields()
    for (name, value) in request.headers {
      if let name = HTTPField.Name(name) { fields[name] = value }
    }
    fields[.contentLength] = String(request.body.count)
    let incoming = Request(
      head: HTTPRequest(
        method: HTTPRequest.Method(request.method) ?? .get, scheme: "http",
        authority: "localhost", path: request.path, headerFields: fields),
      body: RequestBody(buffer: ByteBuffer(bytes: request.body)))
    // A channel that any thread may ask (for its address, say), as requests run on any.
    let context = ServerContext(
      source: ApplicationRequestContextSource(channel: NIOAsyncTestingChannel(), logger: logger))
    let response = try await responder.respond(to: incoming, context: context)
    let writer = CollectingWriter()
    let bytes = writer.bytes
    try await response.body.write(writer)
    var headers: [String: String] = [:]
    for field in response.headers { headers[field.name.canonicalName] = field.value }
    return TransportResponse(status: response.status.code, headers: headers, body: bytes.value)
  }
}

/// Collects a response body.
private struct CollectingWriter: ResponseBodyWriter {
  final class Box: Sendable {
    private let bytes = Mutex<[UInt8]>([])
    var value: [UInt8] { bytes.withLock { $0 } }
    func append(_ buffer: ByteBuffer) {
      bytes.withLock { $0.append(contentsOf: buffer.readableBytesView) }
    }
  }
  let bytes = Box()

  mutating func write(_ buffer: ByteBuffer) async throws {
    bytes.append(buffer)
  }

  consuming func finish(_ trailingHeaders: HTTPFields?) async throws {}
}
