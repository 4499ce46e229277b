import Foundation
import LMDB
import VLogTesting

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
  BigEndian.bytes(number)
}

/// The number in a big-endian key.
func number(_ key: UnsafeRawBufferPointer) -> UInt64 {
  BigEndian.read(UInt64.self, from: key) ?? 0
}

/// A value of about 100 bytes that names its number.
func value(_ number: UInt64, size: Int = 100) -> [UInt8] {
  var bytes = Array("value \(number) ".utf8)
  while bytes.count < size {
    bytes.append(UInt8(truncatingIfNeeded: number &+ UInt64(bytes.count)))
  }
  return bytes
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
