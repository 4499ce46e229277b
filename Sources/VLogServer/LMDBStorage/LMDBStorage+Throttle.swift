internal import LMDB
internal import VLog

/// Throttle counters in the `throttle` database: 24 bytes each, the count, the window's start
/// and the latest time, big-endian.
extension LMDBStorage {
  func throttleCounts(_ keys: [[UInt8]]) async throws -> [[UInt8]: ThrottleCount] {
    try read { transaction in
      var counts: [[UInt8]: ThrottleCount] = [:]
      for key in keys {
        if let value = try transaction.value(forKey: key, in: throttle) {
          counts[key] = Self.throttleCount(value)
        }
      }
      return counts
    }
  }

  func countThrottle(_ keys: [(key: [UInt8], window: UInt64)], now: Milliseconds) async throws {
    let now = now.rawValue
    try await onWriter { [self] in
      try write { transaction in
        for (key, window) in keys {
          var count = try transaction.value(forKey: key, in: throttle).flatMap(Self.throttleCount)
          if let current = count, now < current.first &+ window {
            count = ThrottleCount(count: current.count &+ 1, first: current.first, last: now)
          } else {
            count = ThrottleCount(count: 1, first: now, last: now)
          }
          guard let count else { continue }
          var value = BigEndian.bytes(count.count)
          BigEndian.append(count.first, to: &value)
          BigEndian.append(count.last, to: &value)
          try transaction.put(value, forKey: key, in: throttle)
        }
      }
    }
  }

  func clearThrottle(_ keys: [[UInt8]]) async throws {
    guard !keys.isEmpty else { return }
    try await onWriter { [self] in
      try write { transaction in
        for key in keys { _ = try transaction.delete(forKey: key, in: throttle) }
      }
    }
  }

  func sweepThrottles(firstBefore: Milliseconds) async throws -> Int {
    try await onWriter { [self] in
      try write { transaction in
        var due: [[UInt8]] = []
        try transaction.forEach(in: throttle) { key, value in
          // A value of another length is not a counter this version wrote: swept too.
          let count = Self.throttleCount(Array(value))
          if (count?.first).map({ $0 < firstBefore.rawValue }) ?? true {
            due.append(Array(key))
          }
        }
        for key in due { _ = try transaction.delete(forKey: key, in: throttle) }
        return due.count
      }
    }
  }

  static func throttleCount(_ value: [UInt8]) -> ThrottleCount? {
    guard value.count == 24, let count = BigEndian.read(UInt64.self, from: value),
      let first = BigEndian.read(UInt64.self, from: value, at: 8),
      let last = BigEndian.read(UInt64.self, from: value, at: 16)
    else { return nil }
    return ThrottleCount(count: count, first: first, last: last)
  }
}
