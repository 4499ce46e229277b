internal import Crypto
internal import Foundation
internal import VLog

#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Darwin)
  internal import Darwin
#endif

/// A throttle's counter as the server's storage keeps it: how many times something happened
/// (a failed sign-in, a sign-up) since `first`, and when it last did, in milliseconds since
/// 1970.
struct ThrottleCount: Sendable, Hashable {
  /// How many times, since `first`.
  var count: UInt64
  /// When the counter's window began.
  var first: UInt64
  /// The latest time.
  var last: UInt64
}

/// How much of something one key (a name, an address, a device) may do before it must wait.
///
/// A counter starts when its key first counts and is forgotten once ``window`` has passed since
/// then. Within it, the first ``free`` counts cost nothing. Past them, a budget with a
/// ``firstWait`` makes the key wait after each further count, from ``firstWait`` doubling up to
/// ``maximumWait``; one without waits until the window ends.
struct ThrottleBudget: Sendable, Hashable {
  /// Counts allowed before any wait.
  var free: UInt64
  /// The wait after the first count past ``free``, in milliseconds; nil: wait out the window.
  var firstWait: UInt64?
  /// The longest wait, in milliseconds.
  var maximumWait: UInt64
  /// How long a counter lasts from its first count, in milliseconds.
  var window: UInt64

  private static let second: UInt64 = 1000
  private static let day: UInt64 = 24 * 3600 * second

  /// A user name's failed sign-ins (and password checks): 5 free, then 1 s doubling to 5 min.
  static let name = ThrottleBudget(
    free: 5, firstWait: second, maximumWait: 300 * second, window: day)
  /// A device credential's failed sign-ins: as a name's, but counted for that device alone.
  static let device = name
  /// An address's failed sign-ins under any names: 100 free (an office behind one address),
  /// then 1 s doubling to 5 min.
  static let address = ThrottleBudget(
    free: 100, firstWait: second, maximumWait: 300 * second, window: day)
  /// The address of a sign-in with a device credential the server made for the account: its
  /// failures count against the address, as any, but it waits for the address's failures
  /// only past ten times the address's budget — others' behind the same address (an office,
  /// a carrier's NAT, a proxy) do not lock a known device out, while many credentials from
  /// one address still do not guess without bound; its own failures make it wait
  /// (``device``).
  static let addressOfKnownDevice = ThrottleBudget(
    free: 1000, firstWait: second, maximumWait: 300 * second, window: day)
  /// An address's failed recovery attempts: 10 free, then 1 min doubling to 1 h.
  static let recoveryAddress = ThrottleBudget(
    free: 10, firstWait: 60 * second, maximumWait: 3600 * second, window: day)

  /// An address's sign-ups: `limit` an hour, then none until the hour is over.
  static func signUps(_ limit: Int) -> ThrottleBudget {
    ThrottleBudget(
      free: UInt64(max(1, limit)), firstWait: nil, maximumWait: 3600 * second,
      window: 3600 * second)
  }

  /// The longest window of any budget: counters older than this are swept.
  static let longestWindow = day

  /// The milliseconds `count` makes its key wait at `now`, or nil if none.
  func wait(_ count: ThrottleCount?, now: Milliseconds) -> UInt64? {
    let now = now.rawValue
    guard let count, now < count.first &+ window, count.count >= free else { return nil }
    let until: UInt64
    if let firstWait {
      let doublings = min(count.count - free, 20)
      until = count.last &+ min(firstWait << doublings, maximumWait)
    } else {
      until = count.first &+ window
    }
    return until > now ? until - now : nil
  }
}

/// What a throttle counts, and the key its counter is stored under: the first 16 bytes of an
/// HMAC-SHA-256, under the server's secret, of the kind and the value, so that the storage
/// holds no user name or address in clear and every key has one length.
struct ThrottleKey: Sendable, Hashable {
  /// What is counted.
  enum Kind: String, Sendable {
    case name, address, device
    /// An account's password checks made with a token of it.
    case account
    case recoveryAddress = "recovery-address"
    case signUp = "sign-up"
  }

  let kind: Kind
  let value: String

  /// The key in storage.
  func stored(secret: [UInt8]) -> [UInt8] {
    let message = Array("vlog throttle\u{0}\(kind.rawValue)\u{0}\(value)".utf8)
    return Array(
      HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: secret)).prefix(16))
  }

  /// The part of an IP address that names one client: an IPv4 address whole, an IPv6
  /// address's first 64 bits (one host's usual allocation, which it may fill with addresses),
  /// an IPv4 address mapped into IPv6 as the IPv4 address.
  static func addressPrefix(_ address: String) -> String {
    guard address.contains(":") else { return address }
    var bytes = [UInt8](repeating: 0, count: 16)
    let parsed = bytes.withUnsafeMutableBytes { inet_pton(AF_INET6, address, $0.baseAddress) }
    guard parsed == 1 else { return address }
    if bytes.prefix(10).allSatisfy({ $0 == 0 }), bytes[10] == 0xff, bytes[11] == 0xff {
      return bytes.suffix(4).map(String.init).joined(separator: ".")
    }
    return bytes.prefix(8).map { String($0, radix: 16) }.joined(separator: ":") + "::/64"
  }
}
