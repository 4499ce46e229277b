internal import VLog

/// The slice of ``ServerStorage`` that keeps the password throttle's counters
/// (``PasswordThrottle``), shared by every server of the storage.
protocol ThrottleStorage: Sendable {
  /// The throttle counters kept under `keys` (``ThrottleKey/stored(secret:)``), of those that
  /// have one.
  func throttleCounts(_ keys: [[UInt8]]) async throws -> [[UInt8]: ThrottleCount]

  /// Counts once more under each key, in one transaction: a key with no counter, or whose
  /// counter's window has passed at `now`, starts again at 1 from `now`.
  func countThrottle(_ keys: [(key: [UInt8], window: UInt64)], now: Milliseconds) async throws

  /// Forgets the counters under `keys`.
  func clearThrottle(_ keys: [[UInt8]]) async throws

  /// Removes the counters whose window began before `firstBefore`.
  ///
  /// - Returns: The number removed.
  func sweepThrottles(firstBefore: Milliseconds) async throws -> Int
}
