import Foundation
import LMDB

/// A fresh directory for one test, removed afterwards.
func withTemporaryDirectory<R>(_ body: (String) throws -> R) throws -> R {
  let url = FileManager.default.temporaryDirectory
    .appendingPathComponent("lmdb-tests-\(UUID().uuidString)", isDirectory: true)
  try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
  defer { try? FileManager.default.removeItem(at: url) }
  return try body(url.path)
}

/// An environment in a fresh directory, closed and removed afterwards.
func withTemporaryEnvironment<R>(
  _ configuration: Environment.Configuration = .init(durability: .noSync),
  _ body: (Environment, String) throws -> R
) throws -> R {
  try withTemporaryDirectory { path in
    let environment = try Environment.open(at: path, configuration: configuration)
    defer { environment.close() }
    return try body(environment, path)
  }
}

/// A big-endian key for a sequence number, so that keys sort as numbers.
func key(_ number: UInt64) -> [UInt8] {
  withUnsafeBytes(of: number.bigEndian) { Array($0) }
}

/// The number in a big-endian key.
func number(_ key: UnsafeRawBufferPointer) -> UInt64 {
  UInt64(bigEndian: key.loadUnaligned(as: UInt64.self))
}

/// A value of about 100 bytes that names its number.
func value(_ number: UInt64, size: Int = 100) -> [UInt8] {
  var bytes = Array("value \(number) ".utf8)
  while bytes.count < size {
    bytes.append(UInt8(truncatingIfNeeded: number &+ UInt64(bytes.count)))
  }
  return bytes
}

/// A small deterministic generator (SplitMix64), so random tests replay from their seed.
struct SeededGenerator: RandomNumberGenerator {
  var state: UInt64
  init(seed: UInt64) { state = seed }
  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }
}

/// Collects a range of entries as copied (key, value) pairs.
func entries(
  _ transaction: borrowing some Transaction & ~Copyable, in database: Database,
  range: KeyRange = .all,
  reverse: Bool = false
) throws -> [(key: [UInt8], value: [UInt8])] {
  var result: [(key: [UInt8], value: [UInt8])] = []
  try transaction.forEach(in: database, range: range, reverse: reverse) { key, value in
    result.append((Array(key), Array(value)))
  }
  return result
}
