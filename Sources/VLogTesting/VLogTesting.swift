public import Foundation
internal import Synchronization
public import VLog

/// A wall clock that moves only when told to: the time source for deterministic tests.
///
/// Safe to use from any thread. Stepping it back imitates a device whose clock was corrected.
public final class ManualClock: Sendable {
  private let current: Mutex<Date>

  /// Creates a clock showing `start` (default 2026-01-01T00:00:00Z).
  public init(start: Date = Date(timeIntervalSince1970: 1_767_225_600)) {
    current = Mutex(start)
  }

  /// The time the clock shows.
  public var now: Date { current.withLock { $0 } }

  /// Moves the clock by `seconds` (negative to step it back).
  public func advance(by seconds: TimeInterval) {
    current.withLock { $0 = $0.addingTimeInterval(seconds) }
  }

  /// Sets the time the clock shows.
  public func set(_ date: Date) {
    current.withLock { $0 = date }
  }
}

/// Reproducible random numbers (SplitMix64): the same seed gives the same sequence, so a
/// random test replays from its seed.
public struct SeededGenerator: RandomNumberGenerator, Sendable {
  private var state: UInt64

  /// Creates a generator.
  public init(seed: UInt64) { state = seed }

  /// The next number.
  public mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }
}

/// Identifiers from a seeded generator, so that a test makes the same ids on every run.
public final class SeededIdentifiers: Sendable {
  private let generator: Mutex<SeededGenerator>

  /// Creates a generator; the same seed gives the same sequence of ids.
  public init(seed: UInt64) {
    generator = Mutex(SeededGenerator(seed: seed))
  }

  /// The next identifier.
  public func next() -> Identifier {
    generator.withLock { generator in
      Identifier(high: generator.next(), low: generator.next())
    }
  }
}

extension NoteStore.Dependencies {
  /// Dependencies driven by a manual clock and seeded identifiers.
  public static func testing(clock: ManualClock, seed: UInt64) -> NoteStore.Dependencies {
    let identifiers = SeededIdentifiers(seed: seed)
    return NoteStore.Dependencies(now: { clock.now }, makeIdentifier: { identifiers.next() })
  }
}

/// A fresh directory, removed after `body` returns or throws.
///
/// Each call makes its own directory, so tests that use it run in parallel.
public func withTemporaryDirectory<R>(
  _ body: (String) async throws -> R
) async throws -> R {
  let path = try makeTemporaryDirectory()
  defer { removeTemporaryItem(atPath: path) }
  return try await body(path)
}

/// A fresh directory, removed after `body` returns or throws: the synchronous form.
public func withTemporaryDirectory<R>(_ body: (String) throws -> R) throws -> R {
  let path = try makeTemporaryDirectory()
  defer { removeTemporaryItem(atPath: path) }
  return try body(path)
}

private func makeTemporaryDirectory() throws -> String {
  let url = FileManager.default.temporaryDirectory
    .appendingPathComponent("vlog-\(UUID().uuidString)", isDirectory: true)
  try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
  return url.path
}

/// Removes a temporary file or directory. A failure is reported on standard error rather than
/// thrown, so that it never hides the error of the test that used the directory.
func removeTemporaryItem(atPath path: String) {
  do {
    try FileManager.default.removeItem(atPath: path)
  } catch {
    FileHandle.standardError.write(Data("warning: could not remove \(path): \(error)\n".utf8))
  }
}

/// A store in a fresh directory, closed and removed after `body`.
///
/// - Parameters:
///   - options: How to open it (default: no fsync, which is right for tests).
///   - body: Uses the store.
public func withTemporaryStore<R>(
  options: NoteStore.Options = NoteStore.Options(durability: .noSync),
  _ body: (NoteStore) async throws -> R
) async throws -> R {
  try await withTemporaryDirectory { path in
    let store = try NoteStore.open(at: path, options: options)
    defer { store.close() }
    return try await body(store)
  }
}

/// Runs `body` on a thread of its own and returns what it returns: for blocking work in a
/// test (waiting on a socket or a child process, reading a file over and over). Waiting on one
/// of Swift concurrency's cooperative threads (two on a two-core machine) would hold up every
/// other task of the process meanwhile, servers under test among them.
public func offPool<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
  await withCheckedContinuation { continuation in
    Thread.detachNewThread { continuation.resume(returning: body()) }
  }
}
