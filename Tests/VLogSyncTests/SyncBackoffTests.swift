import Testing
import VLogSync
import VLogTesting

@Suite("Sync back-off")
struct SyncBackoffTests {
  @Test("waits double from the first up to the longest, and never undercut Retry-After")
  func doubling() {
    let backoff = SyncBackoff(initial: .seconds(2), maximum: .seconds(300), jitter: 0)
    var random = SeededGenerator(seed: 1)
    let waits = (1...10).map { backoff.delay(afterFailures: $0, random: &random) }
    #expect(
      waits == [2, 4, 8, 16, 32, 64, 128, 256, 300, 300].map { Duration.seconds($0) })
    #expect(
      backoff.delay(afterFailures: 1, retryAfter: .seconds(30), random: &random) == .seconds(30))
    #expect(
      backoff.delay(afterFailures: 9, retryAfter: .seconds(30), random: &random) == .seconds(300))
    // Absurd counts and zero stay in range.
    #expect(backoff.delay(afterFailures: .max, random: &random) == .seconds(300))
    #expect(backoff.delay(afterFailures: 0, random: &random) == .seconds(2))
  }

  @Test("jitter adds up to its fraction, and spreads devices")
  func jitter() {
    let backoff = SyncBackoff(initial: .seconds(10), maximum: .seconds(300), jitter: 0.2)
    var random = SeededGenerator(seed: 7)
    let waits = (0..<100).map { _ in backoff.delay(afterFailures: 1, random: &random) }
    #expect(waits.allSatisfy { $0 >= .seconds(10) && $0 <= .seconds(12) })
    #expect(Set(waits).count > 50)
  }
}
