internal import Foundation

#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Darwin)
  internal import Darwin
#endif

/// Runs `body` with the process's address space (`RLIMIT_AS`) limited to what it has mapped
/// now plus `room` bytes, then lifts the limit again.
///
/// For an exit test's child process only: the limit binds every thread of the process, so a
/// mapping that needs more than `room` (a grown LMDB map) fails, as it would on a device whose
/// address space is exhausted. Keep `body`'s own allocations well within `room`.
///
/// - Throws: ``AddressSpaceError`` when the mapped size cannot be read or the limit cannot be
///   set; otherwise what `body` throws.
public func withAddressSpaceLimited<R>(toCurrentPlus room: Int, _ body: () throws -> R) throws
  -> R
{
  var limit = rlimit()
  guard getrlimit(addressSpaceResource, &limit) == 0 else {
    throw AddressSpaceError(description: "getrlimit(RLIMIT_AS) failed")
  }
  let saved = limit
  limit.rlim_cur = rlim_t(try mappedBytes() + room)
  guard setrlimit(addressSpaceResource, &limit) == 0 else {
    throw AddressSpaceError(description: "setrlimit(RLIMIT_AS) failed")
  }
  defer {
    var restored = saved
    setrlimit(addressSpaceResource, &restored)
  }
  return try body()
}

/// Whether the process runs under AddressSanitizer or ThreadSanitizer (as `tools/sanitize` runs
/// the suite: it sets `ASAN_OPTIONS` and `TSAN_OPTIONS`). Their shadow memory reserves most of
/// the address space, so tests that limit it are skipped there.
public let runsUnderSanitizer: Bool = {
  let environment = ProcessInfo.processInfo.environment
  return environment["ASAN_OPTIONS"] != nil || environment["TSAN_OPTIONS"] != nil
}()

/// Why the address space could not be limited.
public struct AddressSpaceError: Error, CustomStringConvertible {
  /// What failed.
  public let description: String
}

#if canImport(Glibc)
  private let addressSpaceResource = __rlimit_resource_t(RLIMIT_AS.rawValue)
#else
  private let addressSpaceResource = RLIMIT_AS
#endif

/// The bytes of address space the process has mapped (`VmSize` of `/proc/self/status`).
private func mappedBytes() throws -> Int {
  let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
  guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmSize:") }),
    let kilobytes = Int(line.split(whereSeparator: \.isWhitespace).dropFirst().first ?? "")
  else { throw AddressSpaceError(description: "/proc/self/status has no VmSize line") }
  return kilobytes << 10
}
