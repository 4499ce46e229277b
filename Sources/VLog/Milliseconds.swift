package import Foundation

/// Wall-clock time, or a span of it, in whole milliseconds: what stamps, retention, deadlines,
/// tokens and throttles count in. Every conversion is here, written once: a date rounds to the
/// nearest millisecond and counts as 0 before 1970; a duration drops fractions of a
/// millisecond and counts as 0 when negative; sums saturate instead of trapping.
package struct Milliseconds: RawRepresentable, Hashable, Comparable, Sendable {
  /// Milliseconds since 1970 (a time) or in all (a span).
  package var rawValue: UInt64

  package init(rawValue: UInt64) { self.rawValue = rawValue }

  /// 1970, or no time at all.
  package static let zero = Milliseconds(rawValue: 0)

  /// The latest time, or the longest span.
  package static let max = Milliseconds(rawValue: .max)

  /// The time of `date`.
  package init(_ date: Date) { rawValue = date.unsignedMilliseconds }

  /// The span of `duration`.
  package init(_ duration: Duration) { rawValue = duration.wholeMilliseconds }

  /// The time `duration` later, at most `UInt64.max` milliseconds.
  package func adding(_ duration: Duration) -> Milliseconds {
    let (sum, overflow) = rawValue.addingReportingOverflow(duration.wholeMilliseconds)
    return Milliseconds(rawValue: overflow ? .max : sum)
  }

  /// The time `duration` earlier, at least 1970.
  package func subtracting(_ duration: Duration) -> Milliseconds {
    let span = duration.wholeMilliseconds
    return Milliseconds(rawValue: rawValue >= span ? rawValue - span : 0)
  }

  /// Whether a deadline `duration` after this time has come at `now` (a span of 0: at once).
  package func isDue(after duration: Duration, at now: Milliseconds) -> Bool {
    let span = duration.wholeMilliseconds
    guard span > 0 else { return true }
    let (due, overflow) = rawValue.addingReportingOverflow(span)
    return !overflow && due <= now.rawValue
  }

  package static func < (a: Milliseconds, b: Milliseconds) -> Bool { a.rawValue < b.rawValue }
}

extension Milliseconds: ExpressibleByIntegerLiteral {
  /// A count of milliseconds written as a number (`0`, `86_400_000`).
  package init(integerLiteral value: UInt64) { rawValue = value }
}

extension Date {
  /// Milliseconds since 1970, rounded: the precision VLog stores dates with.
  package var milliseconds: Int64 {
    let value = (timeIntervalSince1970 * 1000).rounded()
    // Past Int64's range (a date ages away, or not a number): the nearest end, not a trap.
    guard let exact = Int64(exactly: value) else {
      return value.isNaN ? 0 : value < 0 ? .min : .max
    }
    return exact
  }

  /// Milliseconds since 1970, rounded, and 0 for a date before it: for counters and stamps.
  package var unsignedMilliseconds: UInt64 {
    UInt64(clamping: max(0, milliseconds))
  }

  /// The date `milliseconds` after 1970-01-01T00:00:00Z.
  package init(milliseconds: Int64) {
    self.init(timeIntervalSince1970: Double(milliseconds) / 1000)
  }
}

extension Duration {
  /// The duration in whole milliseconds, 0 for negative durations, saturating.
  package var wholeMilliseconds: UInt64 {
    let (seconds, attoseconds) = components
    guard seconds >= 0 else { return 0 }
    let (milliseconds, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1000)
    guard !overflow else { return .max }
    return milliseconds &+ UInt64(max(0, attoseconds) / 1_000_000_000_000_000)
  }
}
