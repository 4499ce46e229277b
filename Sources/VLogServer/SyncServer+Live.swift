internal import HTTPTypes
internal import Hummingbird
internal import Logging
internal import NIOCore
internal import ServiceLifecycle
internal import VLog
internal import VLogWire

extension SyncServer {
  /// `GET /v1/live`: the account's live channel, a stream of server-sent events (see
  /// `LiveMessage`) that tells the device its account's head when it opens and after every
  /// commit that grows the log, pings it every ``Configuration/liveKeepAlive``, and ends when
  /// the session does (signed out, revoked, the password changed, the account deleted, the
  /// token expired) or the server shuts down, saying why.
  ///
  /// Server-sent events rather than a WebSocket: the channel only ever speaks one way (the
  /// device pulls with an ordinary sync), so it can be an ordinary `GET` — authenticated by
  /// the same `Authorization` header as every other call (a browser reads it with `fetch`, so
  /// the token is never in a URL), described in the OpenAPI document, and carried by the same
  /// HTTP/1.1 stack, middleware and proxies as the rest of the API.
  func live(_ request: Request, _ context: ServerContext) async throws -> Response {
    // In a task of its own: the connection's task keeps the deepest its frames ever went for
    // as long as the channel is open, so the session's and the head's reads go elsewhere.
    let (session, id, mailbox, head) = try await Task { try await openChannel(request) }.value
    // The channel's place is the hub's from now: the connection leaves the request
    // connections' count, and joins it again (or closes, if it has no place there) when the
    // channel ends. Closing the connection ends the channel, whatever the stream is doing.
    let channel = context.channel
    let connections = connections
    let hub = live
    connections.release(channel)
    channel.closeFuture.whenComplete { _ in hub.close(id) }
    mailbox.post(head: head)
    let logger = context.logger
    logger.info("live channel opened", metadata: ["account": "\(session.account)"])
    var headers = HTTPFields()
    headers[.contentType] = LiveMessage.mediaType
    headers[.cacheControl] = "no-store"
    return Response(
      status: .ok, headers: headers,
      body: ResponseBody { writer in
        defer { hub.close(id) }
        // The first message through the response's writer, which writes its head before it:
        // both are in the connection's pipeline before the mailbox writes the rest.
        if let first = mailbox.take() {
          try await writer.write(ByteBuffer(bytes: first.encoded))
        }
        // The server waits for its requests to end before it stops (and before the hub's
        // service hears of the shutdown): a channel ends when the server starts shutting down,
        // saying so.
        await withGracefulShutdownHandler {
          await mailbox.stream(to: channel)
        } onGracefulShutdown: {
          mailbox.post(closing: LiveHub.shuttingDown)
        }
        logger.info("live channel ended", metadata: ["account": "\(session.account)"])
        // On the connection's event loop, where its guard hears it close: a connection still
        // open there is released by its guard when it closes.
        channel.eventLoop.execute {
          if channel.isActive, !connections.admit(channel) { channel.close(promise: nil) }
        }
        try await writer.finish(nil)
      })
  }

  /// Authenticates a live channel's request, takes the channel's place and reads the account's
  /// head.
  private func openChannel(_ request: Request) async throws -> (
    session: TokenRecord, id: UInt64, mailbox: LiveMailbox, head: UInt64
  ) {
    let session = try await session(of: request)
    let (id, mailbox) = try live.open(
      account: session.account, token: session.hash, expiresAt: session.expiresAt)
    do {
      return (session, id, mailbox, try await store.head(of: session.account))
    } catch {
      live.close(id)
      throw error
    }
  }
}
