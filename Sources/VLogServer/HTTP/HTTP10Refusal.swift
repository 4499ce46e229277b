internal import NIOCore
internal import NIOHTTP1
internal import NIOHTTPTypesHTTP1

/// Refuses a request for the live channel (`GET /v1/live`) in HTTP/1.0 with 505 and a JSON
/// error body, and closes the connection: the channel streams its answer in chunks, which
/// HTTP/1.0 does not have. Every other request, of either version, goes on.
///
/// It reads the requests before they are converted to HTTP types, which carry no version:
/// ``ConnectionGuardHandler`` places it just ahead of that conversion.
final class HTTP10Refusal: ChannelDuplexHandler, RemovableChannelHandler {
  typealias InboundIn = HTTPServerRequestPart
  typealias InboundOut = HTTPServerRequestPart
  typealias OutboundIn = HTTPServerResponsePart
  typealias OutboundOut = HTTPServerResponsePart

  /// Whether the request being read is refused: its parts go no further.
  private var refusing = false

  func channelRead(context: ChannelHandlerContext, data: NIOAny) {
    let part = unwrapInboundIn(data)
    if case .head(let head) = part {
      refusing =
        head.version.major == 1 && head.version.minor == 0
        && (head.uri == "/v1/live" || head.uri.hasPrefix("/v1/live?"))
      if refusing { refuse(context) }
    }
    guard !refusing else { return }
    context.fireChannelRead(data)
  }

  private func refuse(_ context: ChannelHandlerContext) {
    let bytes = ConnectionGuardHandler.refusalBody(
      "the live channel streams its answer in HTTP/1.1 chunks; this request is HTTP/1.0: "
        + "ask in HTTP/1.1, or sync with POST /v1/sync")
    var headers = HTTPHeaders()
    headers.add(name: "Content-Type", value: "application/json")
    headers.add(name: "Content-Length", value: String(bytes.readableBytes))
    headers.add(name: "Connection", value: "close")
    let head = HTTPResponseHead(
      version: .http1_0, status: .httpVersionNotSupported, headers: headers)
    context.write(wrapOutboundOut(.head(head)), promise: nil)
    context.write(wrapOutboundOut(.body(.byteBuffer(bytes))), promise: nil)
    let channel = context.channel
    context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in
      channel.close(promise: nil)
    }
  }
}
