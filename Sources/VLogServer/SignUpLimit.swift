internal import Foundation
internal import LMDB

/// How many accounts one IP address may create in an hour: a sliding window of the times of its
/// sign-ups, in this process's memory.
///
/// The table holds at most ``maximumAddresses`` addresses; past it, those whose window is empty
/// go first, then the ones whose latest sign-up is oldest. Forgetting an address only lets it
/// sign up again sooner, still within the connection and password-hashing limits.
final class SignUpLimit: Sendable {
  /// Sign-ups per address per hour.
  let limit: Int
  let window: TimeInterval = 3600
  private let maximumAddresses = 100_000
  private let now: @Sendable () -> Date
  private let times = Locked<[String: [Date]]>([:])

  init(limit: Int, now: @escaping @Sendable () -> Date) {
    self.limit = max(1, limit)
    self.now = now
  }

  /// Counts a sign-up from `address` (nil: a connection with no IP address, not counted).
  ///
  /// - Throws: ``ServerError`` 429 `tooManyRequests` with the seconds until the address's
  ///   oldest sign-up in the window leaves it.
  func admit(_ address: String?) throws {
    guard let address else { return }
    let now = self.now()
    try times.withLock { times throws(ServerError) in
      var recent = (times[address] ?? []).filter { now.timeIntervalSince($0) < window }
      if recent.count >= limit, let oldest = recent.first {
        let wait = max(1, Int((window - now.timeIntervalSince(oldest)).rounded(.up)))
        times[address] = recent
        throw ServerError.tooManyRequests(
          retryAfter: wait,
          "\(limit) accounts were created from this address in the last hour; wait \(wait) s")
      }
      recent.append(now)
      times[address] = recent
      if times.count > maximumAddresses { forgetSome(&times, now: now) }
    }
  }

  private func forgetSome(_ times: inout [String: [Date]], now: Date) {
    times = times.filter { $0.value.contains { now.timeIntervalSince($0) < window } }
    while times.count > maximumAddresses,
      let oldest = times.min(by: {
        ($0.value.last ?? .distantPast) < ($1.value.last ?? .distantPast)
      })
    {
      times[oldest.key] = nil
    }
  }
}
