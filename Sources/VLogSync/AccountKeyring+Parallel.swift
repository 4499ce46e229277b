internal import Dispatch
internal import Foundation
internal import Synchronization
internal import VLog

/// Sealing and opening many events at once, on every core.
extension AccountKeyring {
  /// `events` through `transform`, with their indices, in order: in as many parts as the
  /// machine has cores (one fewer if `sparingACore`, but at least one), run together on threads
  /// of their own, when there are enough events to be worth it (on the calling thread when
  /// there are fewer).
  ///
  /// Neither a task group nor Dispatch's global queues: on Linux the cooperative pool is
  /// Dispatch's global queue, as wide as the machine has cores, so parts run there would hold
  /// every thread of it, and every task of the app (and of a server in the same process) would
  /// wait for the seal to end; and a pool with a blocked thread would run the parts one after
  /// the other. Sealing is computation: each part runs on a serial queue of its own, which
  /// Dispatch gives a thread beside the pool's, and the system shares the cores between them
  /// and the pool, while the calling task waits without holding a thread.
  static func inParallel(
    _ events: [Event], sparingACore: Bool,
    _ transform: @escaping @Sendable (Int, Event) throws -> Event
  ) async throws -> [Event] {
    let cores = sparingACore ? max(1, sealingQueues.count - 1) : sealingQueues.count
    let parts = min(cores, events.count / Self.eventsPerPart)
    guard parts > 0 else { return try events.indices.map { try transform($0, events[$0]) } }
    let size = (events.count + parts - 1) / parts
    let done = PartResults(count: parts)
    return try await withCheckedThrowingContinuation { continuation in
      let group = DispatchGroup()
      for part in 0..<parts {
        sealingQueues[part].async(group: group) {
          let range = part * size..<min((part + 1) * size, events.count)
          done.set(part, Result { try range.map { try transform($0, events[$0]) } })
        }
      }
      group.notify(queue: sealingQueues[0]) { continuation.resume(with: done.joined()) }
    }
  }

  /// The serial queues the parts of ``inParallel(_:sparingACore:_:)`` run on, one for each core.
  private static let sealingQueues = (0..<max(1, ProcessInfo.processInfo.activeProcessorCount))
    .map { DispatchQueue(label: "VLogSync.AccountKeyring.sealing.\($0)") }

  /// The results of the parts of ``inParallel(_:sparingACore:_:)``, set by each as it ends.
  fileprivate final class PartResults: Sendable {
    private let results: Mutex<[Result<[Event], any Error>?]>

    init(count: Int) { results = Mutex(Array(repeating: nil, count: count)) }

    func set(_ part: Int, _ result: Result<[Event], any Error>) {
      results.withLock { $0[part] = result }
    }

    /// The parts' events in order, or the first part's error.
    func joined() -> Result<[Event], any Error> {
      Result { try results.withLock { parts in try parts.flatMap { try $0?.get() ?? [] } } }
    }
  }

  /// The fewest events a part of ``inParallel(_:sparingACore:_:)`` takes: fewer are not worth a task.
  static let eventsPerPart = 256
}
