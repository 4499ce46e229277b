internal import HTTPTypes
internal import Hummingbird
internal import Logging
internal import NIOCore
internal import VLog
internal import VLogWire

/// The live channel: `GET /v1/live`.
struct LiveController: ServerController {
  let hub: LiveHub
  let logs: any LogStorage
  let auth: Authenticator
  /// The connections against the cap: a channel's leaves their count.
  let connections: ConnectionRegistry
  /// The server's logger, which a channel logs its end to.
  let logger: Logger

  var routes: [Route] {
    [Route("v1/live", .get) { try await live($0, $1) }]
  }

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
  ///
  /// Once its answer's head and first message are written, the connection is handed over to
  /// the channel (``LiveConnectionHandler``): it serves no more requests, and closes when the
  /// channel ends.
  func live(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (session, id, mailbox, head) = try await openChannel(request)
    // The channel's place is the hub's from now: the connection leaves the request
    // connections' count. Closing the connection ends the channel, whatever it is doing.
    let channel = context.channel
    let hub = self.hub
    // What the channel keeps until it ends: the server's logger and the request's id, not
    // the request's logger with its metadata.
    let logger = self.logger
    let requestID = context.logger[metadataKey: "hb.request.id"]?.description ?? ""
    do {
      try await channel.triggerUserOutboundEvent(LiveConnectionHandler.Opening(mailbox: mailbox))
        .get()
    } catch {
      hub.close(id)
      throw error
    }
    connections.release(channel)
    let account = session.account
    channel.closeFuture.whenComplete { _ in
      hub.close(id)
      logger.info(
        "live channel ended", metadata: ["account": "\(account)", "hb.request.id": "\(requestID)"])
    }
    mailbox.post(head: head)
    context.logger.info("live channel opened", metadata: ["account": "\(account)"])
    var headers = HTTPFields()
    headers[.contentType] = LiveMessage.mediaType
    headers[.cacheControl] = "no-store"
    // The connection closes when the channel ends: a client must not send another request on
    // it.
    headers[.connection] = "close"
    return Response(
      status: .ok, headers: headers,
      body: ResponseBody { writer in
        // The first message through the response's writer, after its head; the end the
        // writer then writes hands the connection over, and the error thrown after it ends
        // the server's task for the connection.
        if let first = mailbox.take() {
          try await writer.write(ByteBuffer(bytes: first.encoded))
        }
        try await writer.finish(nil)
        throw LiveConnectionHandler.HandedOver()
      })
  }

  /// Authenticates a live channel's request, takes the channel's place and reads the account's
  /// head.
  private func openChannel(_ request: Request) async throws -> (
    session: TokenRecord, id: UInt64, mailbox: LiveMailbox, head: UInt64
  ) {
    let session = try await auth.session(of: request)
    let (id, mailbox) = try hub.open(
      account: session.account, token: session.hash, expiresAt: session.expiresAt)
    do {
      return (session, id, mailbox, try await logs.head(of: session.account))
    } catch {
      hub.close(id)
      throw error
    }
  }
}
