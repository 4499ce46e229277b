internal import HTTPTypes
internal import HummingbirdCore
internal import NIOCore
internal import NIOHTTP1
internal import NIOHTTPTypes
internal import NIOHTTPTypesHTTP1

/// Takes a connection over from the HTTP server once its response has opened a live channel,
/// so that an open channel costs its connection and its ``LiveMailbox``, and no task.
///
/// The route of `GET /v1/live` authenticates the request, takes the channel's place and
/// announces it (``Opening``) before it answers; its answer is the response's head and first
/// message. When the answer's end comes down the pipeline, this handler keeps it (the
/// response goes on), hands the connection to the mailbox, which writes its messages from here,
/// and tells the handlers behind it — the HTTP server's — that the connection has closed. The
/// response then throws ``HandedOver``, so that the server's task for the connection ends
/// without waiting for the connection to close. This handler takes the handlers that read
/// requests out of the pipeline (the HTTP decoder and its converters, the connection's guard
/// and idle timer): only the response's encoder stays, so that the channel's messages go out
/// as the rest of its answer. From then on it keeps what the handlers behind it would do to the
/// connection (their closes, their writes), drops whatever the client sends, and keeps
/// reading, so that a client that goes away is seen. The mailbox ends the response and closes
/// the connection when the channel ends.
final class LiveConnectionHandler: ChannelDuplexHandler, RemovableChannelHandler {
  typealias InboundIn = HTTPRequestPart
  typealias InboundOut = HTTPRequestPart
  typealias OutboundIn = HTTPResponsePart
  typealias OutboundOut = HTTPResponsePart

  /// What a live channel's response throws once its end is written, so that the HTTP
  /// server's task for the connection ends now rather than when the connection closes.
  ///
  /// That task runs the connection in NIO's `executeThenClose`, which, once its body returns,
  /// waits for the connection to close: a task, with the frames of every call it is in, for
  /// each open channel. When the body throws instead, it asks for a close (which this handler
  /// keeps, and answers) and returns at once, and the server's task ends with it, logging the
  /// error at trace level.
  struct HandedOver: Error {}

  /// The outbound event by which a live channel's route announces that its answer opens the
  /// channel of `mailbox`.
  struct Opening: Sendable {
    let mailbox: LiveMailbox
  }

  private enum State {
    /// Requests and answers pass.
    case http
    /// The answer now being written opens a live channel: its end hands the connection over.
    case opening(LiveMailbox)
    /// The connection is the mailbox's.
    case live(LiveMailbox)
  }

  private var state = State.http
  private var context: ChannelHandlerContext?

  init() {}

  func handlerAdded(context: ChannelHandlerContext) { self.context = context }

  func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

  func triggerUserOutboundEvent(
    context: ChannelHandlerContext, event: Any, promise: EventLoopPromise<Void>?
  ) {
    guard let opening = event as? Opening else {
      context.triggerUserOutboundEvent(event, promise: promise)
      return
    }
    state = .opening(opening.mailbox)
    promise?.succeed(())
  }

  func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
    switch state {
    case .http:
      context.write(data, promise: promise)
    case .opening(let mailbox):
      guard case .end = unwrapOutboundIn(data) else {
        context.write(data, promise: promise)
        return
      }
      state = .live(mailbox)
      promise?.succeed(())
      context.flush()
      // The handlers that served requests leave, and those behind this one hear that the
      // connection has gone (the idle timer, which keeps that news to itself, has left
      // first): the server's streams of the connection end.
      Self.removeRequestHandlers(from: context.pipeline)
      context.fireChannelInactive()
      // Reads go on whatever the server's handlers behind this one want: a client that closes
      // the connection must be heard.
      context.read()
      mailbox.start(on: LiveConnection(self, eventLoop: context.eventLoop))
    case .live:
      // The server's handlers have nothing more to say on this connection.
      promise?.succeed(())
    }
  }

  func flush(context: ChannelHandlerContext) {
    if case .live = state { return }
    context.flush()
  }

  func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
    guard case .http = state else {
      // The server's task ending (``HandedOver``), which may ask before the answer's end
      // has come down: the mailbox closes the connection.
      promise?.succeed(())
      return
    }
    context.close(mode: mode, promise: promise)
  }

  func channelRead(context: ChannelHandlerContext, data: NIOAny) {
    guard case .live = state else {
      context.fireChannelRead(data)
      return
    }
  }

  func channelReadComplete(context: ChannelHandlerContext) {
    guard case .live = state else {
      context.fireChannelReadComplete()
      return
    }
    context.read()
  }

  func channelInactive(context: ChannelHandlerContext) {
    // The handlers behind heard it when the connection was handed over.
    guard case .live = state else {
      context.fireChannelInactive()
      return
    }
  }

  func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
    guard case .live(let mailbox) = state else {
      context.fireUserInboundEventTriggered(event)
      return
    }
    if event is ChannelShouldQuiesceEvent {
      // The server is shutting down: the channel ends, saying so.
      mailbox.post(closing: LiveHub.shuttingDown)
    } else if let event = event as? ChannelEvent, event == .inputClosed {
      // The client closed its side: it is gone. (The server keeps half-closed connections
      // open for their answers, so without this it would notice only when a ping fails.)
      context.close(promise: nil)
    }
  }

  func errorCaught(context: ChannelHandlerContext, error: any Error) {
    guard case .live = state else {
      context.fireErrorCaught(error)
      return
    }
    // The connection failed (reset by the client, a read error): the channel ends.
    context.close(promise: nil)
  }

  /// Takes out of `pipeline` the handlers of a connection that serves requests, which a live
  /// channel's connection does no more: the request decoder, the conversion between NIO's
  /// HTTP/1 parts and HTTP types, the connection's guard and the server's idle timer. What
  /// they hold is freed, and what the client sends reaches this handler as bytes, to be
  /// dropped. The response encoder stays: it frames the messages as the answer began (in
  /// chunks, for HTTP/1.1).
  private static func removeRequestHandlers(from pipeline: ChannelPipeline) {
    let operations = pipeline.syncOperations
    let contexts = [
      try? operations.context(handlerType: ByteToMessageHandler<HTTPRequestDecoder>.self),
      try? operations.context(handlerType: HTTP1ToHTTPServerCodec.self),
      try? operations.context(handlerType: ConnectionGuardHandler.self),
      try? operations.context(handlerType: HTTPConnectionStateHandler.self),
    ]
    for case let context? in contexts { operations.removeHandler(context: context, promise: nil) }
  }

  /// Writes a message of the channel, as a part of NIO's HTTP/1 (the handlers that converted
  /// HTTP types are gone); on the event loop.
  fileprivate func send(_ bytes: ByteBuffer) -> EventLoopFuture<Void>? {
    guard let context else { return nil }
    return context.writeAndFlush(NIOAny(HTTPServerResponsePart.body(.byteBuffer(bytes))))
  }

  /// Ends the response and closes the connection; on the event loop.
  fileprivate func finish() {
    guard let context else { return }
    context.writeAndFlush(NIOAny(HTTPServerResponsePart.end(nil)), promise: nil)
    context.close(promise: nil)
  }
}

/// A live channel's connection, once its handler has taken it over: what its mailbox writes
/// enters the pipeline at the handler.
struct LiveConnection: Sendable {
  private let handler: NIOLoopBound<LiveConnectionHandler>
  /// The connection's event loop, where the methods must be called.
  let eventLoop: any EventLoop

  fileprivate init(_ handler: LiveConnectionHandler, eventLoop: any EventLoop) {
    self.handler = NIOLoopBound(handler, eventLoop: eventLoop)
    self.eventLoop = eventLoop
  }

  /// Writes and flushes one message; nil if the connection has gone.
  func send(_ bytes: ByteBuffer) -> EventLoopFuture<Void>? { handler.value.send(bytes) }

  /// Ends the response and closes the connection.
  func finish() { handler.value.finish() }
}
