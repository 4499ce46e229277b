internal import Foundation
internal import LMDB
internal import VLog

/// Bounds the work password hashing costs the server, and the guesses anyone can make at a
/// password, so that no client can exhaust the one or make many of the other.
///
/// Three rules, each answered with 429 and a `Retry-After`:
///
/// 1. At most ``limit`` hashes run at once in this process (scrypt takes a third of a second
///    and 128 MiB each); a request past that is refused at once instead of queueing.
/// 2. Failed password checks count against keys — a user name, an address, a device, the
///    recovery of a name — each with its ``ThrottleBudget``; a key past its budget waits. The
///    counters live in the server's storage (``ThrottleStorage/countThrottle(_:now:)``): every
///    server of a database shares them, a restart keeps them, and none is forgotten to make
///    room for another — only when its window has passed.
/// 3. Sign-ups count against their address.
///
/// A check reads the counters, runs the hash, then counts: guesses made at once all pass the
/// check before any of them counts, so whenever a key may try again, up to ``limit`` guesses
/// per server get through, not one.
final class PasswordThrottle: Sendable {
  /// The most hashes at once.
  let limit: Int
  /// An address's sign-ups an hour.
  let signUpsPerHour: Int
  private let store: any ThrottleStorage
  private let secret: @Sendable () async throws -> [UInt8]
  private let now: @Sendable () -> Date
  private let running = Locked(0)

  /// A key and the budget it is judged by.
  typealias Subject = (key: ThrottleKey, budget: ThrottleBudget)

  init(
    limit: Int, signUpsPerHour: Int, store: any ThrottleStorage,
    secret: @escaping @Sendable () async throws -> [UInt8], now: @escaping @Sendable () -> Date
  ) {
    self.limit = max(1, limit)
    self.signUpsPerHour = signUpsPerHour
    self.store = store
    self.secret = secret
    self.now = now
  }

  /// Runs `work` (a password hash) if the rules allow it now.
  ///
  /// - Parameter subjects: The keys whose failures count; empty for a hash of a new password.
  /// - Throws: ``ServerError`` 429 `tooManyRequests` with the seconds to wait; what `work`
  ///   throws.
  func hash<T: Sendable>(for subjects: [Subject], _ work: () async throws -> T) async throws -> T {
    if !subjects.isEmpty {
      try await checkWait(subjects) { seconds in
        "too many failed attempts for this user name, device or address; wait \(seconds) s"
      }
    }
    try running.withLock { running throws(ServerError) in
      guard running < limit else {
        throw ServerError.tooManyRequests(
          retryAfter: 1, "the server is busy checking passwords; try again in a second")
      }
      running += 1
    }
    defer { running.withLock { $0 -= 1 } }
    return try await work()
  }

  /// Records how a check for `subjects` ended: a failure counts against every one; a success
  /// forgets the failures of those in `clearing`.
  func record(_ subjects: [Subject], succeeded: Bool, clearing: [ThrottleKey] = []) async throws {
    let secret = try await self.secret()
    if succeeded {
      try await store.clearThrottle(clearing.map { $0.stored(secret: secret) })
    } else {
      try await store.countThrottle(
        subjects.map { ($0.key.stored(secret: secret), $0.budget.window) },
        now: Milliseconds(now()))
    }
  }

  /// Counts a sign-up from `address` (nil: a connection with no IP address, not counted).
  ///
  /// - Throws: ``ServerError`` 429 `tooManyRequests` with the seconds until the address's hour
  ///   is over.
  func admitSignUp(from address: String?) async throws {
    guard let address else { return }
    let subject: Subject = (
      ThrottleKey(kind: .signUp, value: ThrottleKey.addressPrefix(address)),
      .signUps(signUpsPerHour)
    )
    let limit = signUpsPerHour
    try await checkWait([subject]) { seconds in
      "\(limit) accounts were created from this address in the last hour; wait \(seconds) s"
    }
    try await record([subject], succeeded: false)
  }

  /// Throws 429 with the longest wait any subject's counter imposes now.
  private func checkWait(_ subjects: [Subject], message: (Int) -> String) async throws {
    let secret = try await self.secret()
    let keys = subjects.map { $0.key.stored(secret: secret) }
    let counts = try await store.throttleCounts(keys)
    let now = Milliseconds(self.now())
    let wait = zip(subjects, keys).compactMap { subject, key in
      subject.budget.wait(counts[key], now: now)
    }.max()
    if let wait {
      let seconds = Int(clamping: (wait + 999) / 1000)
      throw ServerError.tooManyRequests(retryAfter: seconds, message(seconds))
    }
  }

  /// Removes the counters whose windows are over.
  func sweep() async throws -> Int {
    try await store.sweepThrottles(
      firstBefore: Milliseconds(now()).subtracting(.milliseconds(ThrottleBudget.longestWindow)))
  }
}
