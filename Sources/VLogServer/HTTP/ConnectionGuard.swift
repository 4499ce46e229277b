internal import Foundation
internal import HTTPTypes
internal import LMDB
internal import NIOCore
internal import NIOHTTP1
internal import NIOHTTPTypes
internal import NIOHTTPTypesHTTP1
internal import VLogWire

/// The server's open connections, counted against a cap and per peer address (an IPv6 peer by
/// its /64, as the throttles count it: `ThrottleKey.addressPrefix(_:)`), and known by whether each is inside a request or
/// between requests.
///
/// At the cap, a connection of the address that holds the most is closed to admit the new one:
/// the one of them idle longest (between requests, or open without having sent a request head
/// yet), else the one whose request body lags furthest behind the minimum rate, else the one
/// reading a body longest. Failing that (every connection of the busiest addresses is waiting
/// for its answer), the connection idle longest or lagging furthest of any address goes. At an
/// address's own cap, its connection idle longest or lagging furthest gives way the same way.
/// A new connection is refused only when every candidate is inside a request that keeps pace.
/// So clients that open connections and send nothing, or send their bodies a byte at a time,
/// cannot keep anyone else out, many addresses of them cannot push out the idle keep-alive
/// connections of clients that hold one or two, and the 257th client behind a NAT takes the
/// place of the NAT's idle connection rather than wait.
final class ConnectionRegistry: Sendable {
  /// The most connections open at once.
  let limit: Int
  /// The most connections open at once from one address; nil for no limit.
  let perAddress: Int?
  /// The slowest a request body may arrive, in bytes per second, before its connection may be
  /// closed to admit another.
  let minimumBodyRate: Int

  private struct Entry {
    let channel: any Channel
    let address: String?
    /// When the connection last became idle; nil while it is inside a request.
    var idleSince: NIODeadline?
    /// When the body being read began (its request's head), and how many bytes of it arrived;
    /// nil when no body is being read.
    var body: (since: NIODeadline, bytes: Int)?
  }

  private struct State {
    var entries: [ObjectIdentifier: Entry] = [:]
    var byAddress: [String: Int] = [:]
  }

  // `Locked`, not `Mutex`: ThreadSanitizer models its pthread mutex.
  private let state = Locked(State())

  init(limit: Int, perAddress: Int?, minimumBodyRate: Int = 500) {
    self.limit = max(1, limit)
    self.perAddress = perAddress.map { max(1, $0) }
    self.minimumBodyRate = max(1, minimumBodyRate)
  }

  /// Takes a place for a new, idle connection: false when its address already has its share,
  /// or when every place is taken by a connection inside a request. At the cap, closes the
  /// connection idle longest to make room.
  func admit(_ channel: any Channel) -> Bool {
    let id = ObjectIdentifier(channel)
    let address = channel.remoteAddress?.ipAddress.map(ThrottleKey.addressPrefix)
    let (admitted, evicted) = state.withLock { state -> (Bool, (any Channel)?) in
      let now = NIODeadline.now()
      var evicted: (any Channel)?
      if let perAddress, let address, state.byAddress[address, default: 0] >= perAddress {
        guard
          let victim = Self.victim(
            in: state, rate: minimumBodyRate, now: now, among: address, readers: false),
          let entry = Self.remove(victim, from: &state)
        else { return (false, nil) }
        evicted = entry.channel
      }
      if state.entries.count >= limit {
        guard let victim = Self.victimAtCap(in: state, rate: minimumBodyRate, now: now),
          let entry = Self.remove(victim, from: &state)
        else {
          return (false, nil)
        }
        evicted = entry.channel
      }
      state.entries[id] = Entry(channel: channel, address: address, idleSince: .now())
      if let address { state.byAddress[address, default: 0] += 1 }
      return (true, evicted)
    }
    evicted?.close(promise: nil)
    return admitted
  }

  /// Marks a connection as inside a request (false) or between requests (true).
  func setIdle(_ channel: any Channel, _ idle: Bool) {
    state.withLock { state in
      state.entries[ObjectIdentifier(channel)]?.idleSince = idle ? .now() : nil
    }
  }

  /// Notes that a connection began reading a request body (`true`, at its head) or finished it.
  func setReadingBody(_ channel: any Channel, _ reading: Bool) {
    state.withLock { state in
      state.entries[ObjectIdentifier(channel)]?.body = reading ? (.now(), 0) : nil
    }
  }

  /// Adds `count` bytes to the body a connection is reading.
  func received(_ count: Int, on channel: any Channel) {
    state.withLock { state in state.entries[ObjectIdentifier(channel)]?.body?.bytes += count }
  }

  /// The connection to close to admit a new one at the cap: one of the address holding the
  /// most connections (the busiest addresses first, their readers of bodies included), else
  /// any connection idle or lagging; nil when there is none to close.
  private static func victimAtCap(in state: State, rate: Int, now: NIODeadline)
    -> ObjectIdentifier?
  {
    let busiest = state.byAddress.values.max() ?? 0
    // Only an address holding more than its fair share gives up a body being read.
    let fair = state.entries.count / max(1, state.byAddress.count)
    if busiest > 1, busiest > fair {
      for (address, count) in state.byAddress where count == busiest {
        if let victim = victim(in: state, rate: rate, now: now, among: address, readers: true) {
          return victim
        }
      }
    }
    return victim(in: state, rate: rate, now: now, among: nil, readers: false)
  }

  /// The connection of `address` (of any, when nil) to close: the one idle longest, else the
  /// one whose body lags furthest behind `rate` bytes per second since its head, else — with
  /// `readers` — the one reading a body longest; nil when none is idle, lagging or (with
  /// `readers`) reading.
  private static func victim(
    in state: State, rate: Int, now: NIODeadline, among address: String?, readers: Bool
  ) -> ObjectIdentifier? {
    var idle: (ObjectIdentifier, NIODeadline)?
    var slow: (ObjectIdentifier, Int64)?
    var reading: (ObjectIdentifier, NIODeadline)?
    for (key, entry) in state.entries where address == nil || entry.address == address {
      if let since = entry.idleSince {
        if idle.map({ since < $0.1 }) ?? true { idle = (key, since) }
      } else if let body = entry.body {
        // How long it has been reading, less the time its bytes earn at the minimum rate.
        let lag =
          (now - body.since).nanoseconds - Int64(body.bytes) * 1_000_000_000 / Int64(rate)
        if lag > 0, slow.map({ lag > $0.1 }) ?? true { slow = (key, lag) }
        if readers, reading.map({ body.since < $0.1 }) ?? true { reading = (key, body.since) }
      }
    }
    return idle?.0 ?? slow?.0 ?? reading?.0
  }

  /// Gives back a connection's place; nothing if it has none (refused, or already evicted).
  func release(_ channel: any Channel) {
    _ = state.withLock { Self.remove(ObjectIdentifier(channel), from: &$0) }
  }

  /// The connections open now.
  var openCount: Int { state.withLock { $0.entries.count } }

  /// The connections inside a request now.
  var inRequestCount: Int {
    state.withLock { $0.entries.values.filter { $0.idleSince == nil }.count }
  }

  /// Whether a connection holds a place (it does not once it holds a live channel).
  func holds(_ channel: any Channel) -> Bool {
    state.withLock { $0.entries[ObjectIdentifier(channel)] != nil }
  }

  private static func remove(_ id: ObjectIdentifier, from state: inout State) -> Entry? {
    guard let entry = state.entries.removeValue(forKey: id) else { return nil }
    if let address = entry.address {
      let left = state.byAddress[address, default: 1] - 1
      state.byAddress[address] = left > 0 ? left : nil
    }
    return entry
  }
}

/// Guards one connection: takes its place in the ``ConnectionRegistry`` (or closes it at once),
/// closes it if no request head arrives within the head timeout of its opening, fails a request
/// whose body falls behind the minimum rate or has not ended within the body timeout of its
/// head (``BodyTimedOut``), tells the registry when it is between requests and how its body
/// arrives, and answers a request that is not valid HTTP with the JSON error every other
/// refusal has.
///
/// A body's deadline is its head's time plus a grace (10 seconds by default) plus one second
/// for each `minimumBodyRate` bytes received (500 by default, as Apache's `mod_reqtimeout`),
/// and never later than the body timeout: a body sent a byte every few seconds is cut within
/// seconds, a large one on a slow link gets the time its bytes earn.
///
/// The body's deadline is a timer on the connection's event loop, cancelled when the body ends:
/// a request costs no task and leaves no timer behind (a cancelled `Task.sleep` keeps its timer
/// until it would have fired, and at the 120-second default a busy server would hold hundreds
/// of thousands).
final class ConnectionGuardHandler: ChannelDuplexHandler, RemovableChannelHandler {
  typealias InboundIn = HTTPRequestPart
  typealias InboundOut = HTTPRequestPart
  typealias OutboundIn = HTTPResponsePart
  typealias OutboundOut = HTTPResponsePart

  private let registry: ConnectionRegistry
  private let headTimeout: TimeAmount
  private let bodyTimeout: TimeAmount
  private let bodyGrace: TimeAmount
  /// When the body being read began, and how many of its bytes arrived.
  private var bodyStart = NIODeadline.uptimeNanoseconds(0)
  private var bodyBytes = 0
  /// Whether a body timed out: the connection closes once its answer (408) is written, rather
  /// than waiting for a body that may never end.
  private var closesAfterAnswer = false
  /// Whether this connection holds a place; nil until decided, once per connection.
  private var admitted: Bool?
  /// Requests whose head has arrived and whose answer has not ended.
  private var open = 0
  private var headTimer: Scheduled<Void>?
  /// The deadline of the body of the request being read; nil between a body's end and the next
  /// request's head.
  private var bodyTimer: Scheduled<Void>?

  init(
    _ registry: ConnectionRegistry, headTimeout: TimeAmount, bodyTimeout: TimeAmount,
    bodyGrace: TimeAmount = .seconds(10)
  ) {
    self.registry = registry
    self.headTimeout = headTimeout
    self.bodyTimeout = bodyTimeout
    self.bodyGrace = bodyGrace
  }

  /// The body's deadline now: grace plus the time its bytes earn, within the body timeout.
  private var bodyDeadline: NIODeadline {
    let earned = Int64(bodyBytes) * 1_000_000_000 / Int64(registry.minimumBodyRate)
    let allowed = min(bodyTimeout.nanoseconds, bodyGrace.nanoseconds + earned)
    return bodyStart + .nanoseconds(allowed)
  }

  /// Schedules the body's check at its deadline. When it fires, a body that earned more time
  /// meanwhile is checked again then; one that did not fails with ``BodyTimedOut``.
  private func scheduleBodyCheck(_ context: ChannelHandlerContext) {
    let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
    bodyTimer = context.eventLoop.scheduleTask(deadline: bodyDeadline) {
      let (handler, context) = bound.value
      if handler.bodyDeadline > .now() {
        handler.scheduleBodyCheck(context)
      } else {
        handler.bodyTimer = nil
        handler.closesAfterAnswer = true
        context.fireErrorCaught(BodyTimedOut())
      }
    }
  }

  /// Takes a place for the connection, or closes it; only the first call per connection
  /// decides (the handler may be added to an active channel and then see it become active).
  private func admit(_ context: ChannelHandlerContext) {
    guard admitted == nil else { return }
    admitted = registry.admit(context.channel)
    guard admitted == true else {
      context.close(promise: nil)
      return
    }
    let channel = context.channel
    headTimer = context.eventLoop.scheduleTask(in: headTimeout) {
      channel.close(promise: nil)
    }
  }

  func handlerAdded(context: ChannelHandlerContext) {
    // A connection's first read is a request head, a few hundred bytes: its receive buffer
    // starts at 512 bytes (NIO's default is 2 KiB) and grows with what arrives. A connection
    // keeps its buffer while it is open, and one that holds a live channel reads no more.
    try? context.channel.syncOptions?.setOption(
      ChannelOptions.recvAllocator,
      value: AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 512, maximum: 65536))
    if context.channel.isActive { admit(context) }
    // Ahead of the conversion to HTTP types, which drops the request's version. Both calls
    // fail only on a pipeline without Hummingbird's HTTP/1 codec, where there is no version
    // to read: then nothing is added.
    if let codec = try? context.pipeline.syncOperations.handler(type: HTTP1ToHTTPServerCodec.self) {
      try? context.pipeline.syncOperations.addHandler(HTTP10Refusal(), position: .before(codec))
    }
  }

  func channelActive(context: ChannelHandlerContext) {
    admit(context)
    if admitted == true { context.fireChannelActive() }
  }

  func handlerRemoved(context: ChannelHandlerContext) {
    bodyTimer?.cancel()
    bodyTimer = nil
  }

  func channelInactive(context: ChannelHandlerContext) {
    headTimer?.cancel()
    bodyTimer?.cancel()
    if admitted == true { registry.release(context.channel) }
    context.fireChannelInactive()
  }

  /// A client that closes its side of a connection holding a live channel is gone: the
  /// connection closes at once. (The server keeps half-closed connections open for their
  /// answers, so without this it would notice only when a ping fails.)
  func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
    if let event = event as? ChannelEvent, event == .inputClosed, admitted == true,
      !registry.holds(context.channel)
    {
      context.close(promise: nil)
    }
    context.fireUserInboundEventTriggered(event)
  }

  func channelRead(context: ChannelHandlerContext, data: NIOAny) {
    switch unwrapInboundIn(data) {
    case .head:
      headTimer?.cancel()
      headTimer = nil
      open += 1
      if open == 1 { registry.setIdle(context.channel, false) }
      bodyTimer?.cancel()
      bodyStart = .now()
      bodyBytes = 0
      registry.setReadingBody(context.channel, true)
      scheduleBodyCheck(context)
    case .end:
      bodyTimer?.cancel()
      bodyTimer = nil
      registry.setReadingBody(context.channel, false)
    case .body(let bytes):
      bodyBytes += bytes.readableBytes
      registry.received(bytes.readableBytes, on: context.channel)
    }
    context.fireChannelRead(data)
  }

  func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
    guard case .end = unwrapOutboundIn(data) else {
      context.write(data, promise: promise)
      return
    }
    if open > 0 {
      open -= 1
      if open == 0 { registry.setIdle(context.channel, true) }
    }
    guard closesAfterAnswer else {
      context.write(data, promise: promise)
      return
    }
    let channel = context.channel
    let written = context.eventLoop.makePromise(of: Void.self)
    written.futureResult.whenComplete { _ in channel.close(promise: nil) }
    written.futureResult.cascade(to: promise)
    context.write(data, promise: written)
  }

  func errorCaught(context: ChannelHandlerContext, error: any Error) {
    // Between requests, a request that is not HTTP gets the JSON error; inside one, the
    // request's own handling sees the error.
    guard let parserError = error as? HTTPParserError, open == 0 else {
      context.fireErrorCaught(error)
      return
    }
    let (status, message) = Self.refusal(parserError)
    let bytes = Self.refusalBody(message)
    var head = HTTPResponse(status: status)
    head.headerFields[.contentType] = "application/json"
    head.headerFields[.contentLength] = String(bytes.readableBytes)
    head.headerFields[.connection] = "close"
    context.write(wrapOutboundOut(.head(head)), promise: nil)
    context.write(wrapOutboundOut(.body(bytes)), promise: nil)
    let channel = context.channel
    context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in
      channel.close(promise: nil)
    }
  }

  /// The JSON error body of a refusal made below the router (`httpError`). A code and a
  /// message always encode; an empty body would be the fallback, as in ServerError's.
  static func refusalBody(_ message: String) -> ByteBuffer {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    return ByteBuffer(
      bytes: (try? encoder.encode(ErrorBody(code: .httpError, message: message))) ?? Data())
  }

  /// The status and message for a request the HTTP parser refused.
  static func refusal(_ error: HTTPParserError) -> (HTTPResponse.Status, String) {
    switch error {
    case .invalidMethod:
      (
        .notImplemented,
        "the request's method is not one this server knows; it answers GET, HEAD, POST, PUT "
          + "and DELETE"
      )
    case .headerOverflow:
      (.requestHeaderFieldsTooLarge, "the request's headers are too large")
    default:
      (.badRequest, "the request is not valid HTTP/1.1 (\(error))")
    }
  }
}

/// A request's body did not end within the server's body timeout: what reading the body
/// throws, answered with 408 and a closed connection.
struct BodyTimedOut: Error {}
