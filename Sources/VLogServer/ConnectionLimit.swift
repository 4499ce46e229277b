internal import NIOCore
internal import Synchronization

/// Counts the server's open connections against a cap.
final class ConnectionCounter: Sendable {
  let limit: Int
  private let open = Atomic<Int>(0)

  init(limit: Int) { self.limit = max(1, limit) }

  /// Takes a place for a new connection; false when the cap is reached.
  func acquire() -> Bool {
    while true {
      let current = open.load(ordering: .relaxed)
      guard current < limit else { return false }
      if open.compareExchange(expected: current, desired: current + 1, ordering: .relaxed)
        .exchanged
      {
        return true
      }
    }
  }

  /// Gives back a connection's place.
  func release() { open.subtract(1, ordering: .relaxed) }

  /// The connections open now.
  var openCount: Int { open.load(ordering: .relaxed) }
}

/// Closes a connection at once when the server already has as many as its cap allows, so that
/// no number of clients can exhaust its file descriptors or memory.
final class ConnectionLimitHandler: ChannelInboundHandler, RemovableChannelHandler {
  typealias InboundIn = NIOAny
  private let counter: ConnectionCounter
  /// Whether this connection holds a place; nil until decided, once per connection.
  private var counted: Bool?

  init(_ counter: ConnectionCounter) { self.counter = counter }

  /// Takes a place for the connection, or closes it; only the first call per connection
  /// decides (the handler may be added to an active channel and then see it become active).
  private func admit(_ context: ChannelHandlerContext) {
    guard counted == nil else { return }
    counted = counter.acquire()
    if counted == false { context.close(promise: nil) }
  }

  func handlerAdded(context: ChannelHandlerContext) {
    if context.channel.isActive { admit(context) }
  }

  func channelActive(context: ChannelHandlerContext) {
    admit(context)
    if counted == true { context.fireChannelActive() }
  }

  func channelInactive(context: ChannelHandlerContext) {
    if counted == true {
      counted = false
      counter.release()
    }
    context.fireChannelInactive()
  }
}
