import Foundation
import Testing

@testable import VLog

@Suite("Milliseconds: every conversion of wall time and spans in one place")
struct MillisecondsTests {
  @Test("a date rounds to the millisecond and counts as 0 before 1970")
  func dates() {
    #expect(Milliseconds(Date(timeIntervalSince1970: 1.2345)).rawValue == 1235)
    #expect(Milliseconds(Date(timeIntervalSince1970: -5)).rawValue == 0)
    // Past Int64's milliseconds: the nearest end, not a trap.
    #expect(Date(timeIntervalSince1970: 1e300).milliseconds == .max)
    #expect(Date(timeIntervalSince1970: -1e300).milliseconds == .min)
  }

  @Test("a span keeps fractions of a second, drops fractions of a millisecond, is 0 when negative")
  func spans() {
    #expect(Milliseconds(.milliseconds(1500)).rawValue == 1500)
    #expect(Milliseconds(.seconds(1.5)).rawValue == 1500)
    #expect(Milliseconds(.microseconds(2999)).rawValue == 2)
    #expect(Milliseconds(.seconds(-3)).rawValue == 0)
  }

  @Test("adding saturates, subtracting stops at 1970, and a deadline of 0 is due at once")
  func arithmetic() {
    let now = Milliseconds(rawValue: 10_000)
    #expect(now.adding(.seconds(1.5)).rawValue == 11_500)
    #expect(Milliseconds(rawValue: .max - 1).adding(.seconds(1)).rawValue == .max)
    #expect(now.subtracting(.seconds(4)).rawValue == 6_000)
    #expect(now.subtracting(.seconds(40)).rawValue == 0)
    #expect(now.isDue(after: .zero, at: Milliseconds(rawValue: 0)))
    #expect(!now.isDue(after: .seconds(1), at: Milliseconds(rawValue: 10_999)))
    #expect(now.isDue(after: .seconds(1), at: Milliseconds(rawValue: 11_000)))
    #expect(
      !Milliseconds(rawValue: .max).isDue(after: .seconds(1), at: Milliseconds(rawValue: .max)))
  }
}
