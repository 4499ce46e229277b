internal import LMDB

/// Lowercase hexadecimal text: how ids, hashes and digests are written, and how they are read
/// back (in either case).
package enum Hex {
  /// Two lowercase digits per byte.
  package static func string(_ bytes: some Sequence<UInt8>) -> String {
    var text: [UInt8] = []
    text.reserveCapacity(bytes.underestimatedCount * 2)
    for byte in bytes {
      text.append(digit(byte >> 4))
      text.append(digit(byte))
    }
    return String(decoding: text, as: UTF8.self)
  }

  /// The 16 lowercase digits of a 64-bit value, with leading zeros.
  package static func string(_ value: UInt64) -> String {
    string(BigEndian.bytes(value))
  }

  /// The bytes that `text` spells, two digits each, in either case; nil if `text` has an odd
  /// number of digits or anything but digits.
  package static func bytes(_ text: some StringProtocol) -> [UInt8]? {
    let utf8 = text.utf8
    guard utf8.count % 2 == 0 else { return nil }
    var bytes: [UInt8] = []
    bytes.reserveCapacity(utf8.count / 2)
    var iterator = utf8.makeIterator()
    while let first = iterator.next(), let second = iterator.next() {
      guard let high = value(of: first), let low = value(of: second) else { return nil }
      bytes.append(high << 4 | low)
    }
    return bytes
  }

  /// The lowercase digit of the low four bits of `nibble`.
  @inline(__always)
  package static func digit(_ nibble: UInt8) -> UInt8 {
    let value = nibble & 0x0F
    return value < 10 ? UInt8(ascii: "0") + value : UInt8(ascii: "a") - 10 + value
  }

  /// The value of one hexadecimal digit, in either case.
  package static func value(of digit: UInt8) -> UInt8? {
    switch digit {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
    default: nil
    }
  }
}
