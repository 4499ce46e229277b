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
}

/// Closes a connection at once when the server already has as many as its cap allows, so that
/// no number of clients can exhaust its file descriptors or memory.
final class ConnectionLimitHandler: ChannelInboundHandler, RemovableChannelHandler {
  typealias InboundIn = NIOAny
  private let counter: ConnectionCounter
  private var counted = false

  init(_ counter: ConnectionCounter) { self.counter = counter }

  func channelActive(context: ChannelHandlerContext) {
    guard counter.acquire() else {
      context.close(promise: nil)
      return
    }
    counted = true
    context.fireChannelActive()
  }

  func handlerAdded(context: ChannelHandlerContext) {
    // Added to a channel that is already active: count it now.
    if context.channel.isActive { channelActive(context: context) }
  }

  func channelInactive(context: ChannelHandlerContext) {
    if counted {
      counted = false
      counter.release()
    }
    context.fireChannelInactive()
  }
}
