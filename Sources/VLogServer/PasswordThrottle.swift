internal import Foundation
internal import LMDB

/// Bounds the work password hashing costs the server, so that no client can exhaust it.
///
/// Two rules, both answered with 429 and a `Retry-After`:
///
/// 1. At most ``limit`` hashes run at once (scrypt takes tens of milliseconds and 32 MiB of
///    memory each); a request past that is refused at once instead of queueing behind them.
/// 2. A user name with repeated failed sign-ins waits before its next attempt: after
///    ``freeFailures`` failures, 1 second, doubling with each further failure up to 5 minutes.
///    A success forgets the failures. At most 10,000 names are remembered (the oldest are
///    forgotten first), so the table's memory is bounded too.
///
/// State lives in a `Mutex`; every decision is a short critical section, never an `await`.
final class PasswordThrottle: Sendable {
  /// The most hashes at once.
  let limit: Int
  /// Failures a name may have before it must wait.
  let freeFailures = 5
  private let maximumNames = 10_000
  private let now: @Sendable () -> Date

  private struct Failures {
    var count: Int
    var last: Date
  }

  private struct State {
    var running = 0
    var failures: [String: Failures] = [:]
  }

  private let state = Locked(State())

  init(limit: Int, now: @escaping @Sendable () -> Date) {
    self.limit = max(1, limit)
    self.now = now
  }

  /// Runs `work` (a password hash) if the rules allow it now.
  ///
  /// - Parameter username: The normalised name whose failures count, or nil for new accounts.
  /// - Throws: ``ServerError`` 429 `tooManyRequests` with the seconds to wait; what `work`
  ///   throws.
  func hash<T: Sendable>(for username: String?, _ work: () async throws -> T) async throws -> T {
    let now = self.now()
    try state.withLock { state throws(ServerError) in
      if let username, let wait = Self.wait(state.failures[username], freeFailures, now) {
        throw ServerError.tooManyRequests(
          retryAfter: wait, "too many failed sign-ins for this user name; wait \(wait) s")
      }
      guard state.running < limit else {
        throw ServerError.tooManyRequests(
          retryAfter: 1, "the server is busy checking passwords; try again in a second")
      }
      state.running += 1
    }
    defer { state.withLock { $0.running -= 1 } }
    return try await work()
  }

  /// Records how a sign-in for `username` ended.
  func record(_ username: String, succeeded: Bool) {
    let now = self.now()
    state.withLock { state in
      if succeeded {
        state.failures[username] = nil
        return
      }
      var entry = state.failures[username] ?? Failures(count: 0, last: now)
      entry.count += 1
      entry.last = now
      state.failures[username] = entry
      if state.failures.count > maximumNames,
        let oldest = state.failures.min(by: { $0.value.last < $1.value.last })?.key
      {
        state.failures[oldest] = nil
      }
    }
  }

  /// The whole seconds to wait before the next attempt, or nil if none.
  private static func wait(_ failures: Failures?, _ free: Int, _ now: Date) -> Int? {
    guard let failures, failures.count >= free else { return nil }
    let exponent = min(failures.count - free, 9)
    let backoff = min(TimeInterval(1 << exponent), 300)
    let remaining = failures.last.addingTimeInterval(backoff).timeIntervalSince(now)
    return remaining > 0 ? Int(remaining.rounded(.up)) : nil
  }
}
