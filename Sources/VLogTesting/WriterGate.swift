internal import Dispatch
package import LMDB

/// Holds an environment's writer queue until ``release()``, so that writes submitted meanwhile
/// are all pending when it moves on: the groups they commit in are then known. For the tests
/// of writes that share commits.
package final class WriterGate: Sendable {
  private let gate = DispatchSemaphore(value: 0)
  private let blocking: Task<Void, any Error>

  /// Holds `environment`'s writer queue; returns once it is held.
  package init(_ environment: Environment) async {
    let entered = DispatchSemaphore(value: 0)
    blocking = Task { [gate] in
      try await environment.onWriterQueue {
        entered.signal()
        gate.wait()
      }
    }
    // Off the cooperative pool: the queue's turn comes at once.
    await withCheckedContinuation { continuation in
      DispatchQueue.global().async {
        entered.wait()
        continuation.resume()
      }
    }
  }

  /// Lets the writer queue go on.
  package func release() async throws {
    gate.signal()
    try await blocking.value
  }
}
