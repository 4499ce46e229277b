internal import Synchronization
public import VLogWire

/// An open live channel (`GET /v1/live`, ``SyncAccount/openLiveChannel(silenceLimit:)``): the
/// messages the server sends as they arrive — the account's head when it opens and after each
/// commit that grows the log, pings, and the message that ends it.
///
/// Iterating ends after a `LiveMessage.closed(_:)` message, and throws ``APIError``
/// (``APIError/Code/transport``) when the connection fails or ends without one, when nothing
/// at all arrives for longer than twice the silence limit (the connection is gone without
/// saying so), or (``APIError/Code/invalidResponse``) when the stream is malformed. Stopping
/// the iteration closes the connection.
public struct LiveChannel: AsyncSequence, Sendable {
  /// A message.
  public typealias Element = LiveMessage

  private let messages: AsyncThrowingStream<LiveMessage, any Error>

  /// Reads `stream`'s bytes as messages; fails if nothing arrives for two `silenceLimit`s in
  /// a row.
  init(_ stream: TransportStream, server: String, silenceLimit: Duration) {
    let (messages, continuation) = AsyncThrowingStream<LiveMessage, any Error>.makeStream()
    let heard = HeardCount()
    let reader = Task {
      var parser = LiveStreamParser()
      do {
        for try await chunk in stream.chunks {
          heard.count.add(1, ordering: .relaxed)
          for message in try parser.read(chunk) {
            continuation.yield(message)
            if case .closed = message {
              continuation.finish()
              return
            }
          }
        }
        continuation.finish(
          throwing: APIError(.transport, "\(server) ended the live channel without a word"))
      } catch let error as WireError {
        continuation.finish(
          throwing: APIError(.invalidResponse, "the live channel is malformed: \(error)"))
      } catch {
        continuation.finish(throwing: APIError(.transport, "the live channel failed: \(error)"))
      }
    }
    let watchdog = Task {
      var last = heard.count.load(ordering: .relaxed)
      while true {
        do { try await Task.sleep(for: silenceLimit) } catch { return }
        let now = heard.count.load(ordering: .relaxed)
        if now == last {
          continuation.finish(
            throwing: APIError(
              .transport,
              "\(server) sent nothing on the live channel for \(silenceLimit.components.seconds) s"
            ))
          return
        }
        last = now
      }
    }
    continuation.onTermination = { _ in
      reader.cancel()
      watchdog.cancel()
    }
    self.messages = messages
  }

  /// The iterator.
  public func makeAsyncIterator() -> AsyncThrowingStream<LiveMessage, any Error>.AsyncIterator {
    messages.makeAsyncIterator()
  }
}

/// How many chunks a channel has received: what its watchdog looks at.
private final class HeardCount: Sendable {
  let count = Atomic<Int>(0)
}
