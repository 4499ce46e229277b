internal import Foundation

/// The wire types of the protocol-buffers encoding that events use.
package enum WireType: UInt8 {
  case varint = 0
  case fixed64 = 1
  case lengthDelimited = 2
  case fixed32 = 5
}

/// Appends protocol-buffers fields to a byte buffer.
package struct ProtobufWriter {
  package var buffer: [UInt8] = []

  package init() {}

  package mutating func tag(_ number: Int, _ type: WireType) {
    rawVarint(UInt64(number) << 3 | UInt64(type.rawValue))
  }

  package mutating func rawVarint(_ value: UInt64) {
    var value = value
    while value >= 0x80 {
      buffer.append(UInt8(truncatingIfNeeded: value) | 0x80)
      value >>= 7
    }
    buffer.append(UInt8(value))
  }

  package mutating func varint(_ number: Int, _ value: UInt64) {
    tag(number, .varint)
    rawVarint(value)
  }

  package mutating func signed(_ number: Int, _ value: Int64) {
    varint(number, UInt64(bitPattern: (value << 1) ^ (value >> 63)))
  }

  package mutating func fixed64(_ number: Int, _ value: UInt64) {
    tag(number, .fixed64)
    rawFixed64(value)
  }

  package mutating func rawFixed64(_ value: UInt64) {
    withUnsafeBytes(of: value.littleEndian) { buffer.append(contentsOf: $0) }
  }

  package mutating func bytes(_ number: Int, _ bytes: [UInt8]) {
    tag(number, .lengthDelimited)
    rawVarint(UInt64(bytes.count))
    buffer.append(contentsOf: bytes)
  }

  package mutating func string(_ number: Int, _ string: String) {
    tag(number, .lengthDelimited)
    var string = string
    string.withUTF8 { utf8 in
      rawVarint(UInt64(utf8.count))
      buffer.append(contentsOf: utf8)
    }
  }

  package mutating func identifier(_ number: Int, _ identifier: Identifier) {
    tag(number, .lengthDelimited)
    buffer.append(16)
    identifier.append(to: &buffer)
  }
}

/// Reads protocol-buffers fields from bytes, checking every length against the end.
package struct ProtobufReader {
  package let base: UnsafeRawBufferPointer
  package var offset = 0

  package init(_ base: UnsafeRawBufferPointer) { self.base = base }

  package var isAtEnd: Bool { offset >= base.count }

  package mutating func varint() throws(VLogError) -> UInt64 {
    var result: UInt64 = 0
    var shift: UInt64 = 0
    while true {
      guard offset < base.count else { throw truncated("a varint") }
      let byte = base[offset]
      offset += 1
      guard shift < 64, shift < 63 || byte <= 1 else {
        throw VLogError(.malformedEvent, "a varint at byte \(offset - 1) is longer than 64 bits")
      }
      result |= UInt64(byte & 0x7F) << shift
      if byte < 0x80 { return result }
      shift += 7
    }
  }

  package mutating func signed() throws(VLogError) -> Int64 {
    let raw = try varint()
    return Int64(bitPattern: raw >> 1) ^ -Int64(bitPattern: raw & 1)
  }

  package mutating func tag() throws(VLogError) -> (Int, WireType) {
    let at = offset
    let raw = try varint()
    guard let type = WireType(rawValue: UInt8(raw & 7)) else {
      throw VLogError(.malformedEvent, "unsupported wire type \(raw & 7) at byte \(at)")
    }
    let number = raw >> 3
    guard number >= 1, number <= 1 << 29 else {
      throw VLogError(.malformedEvent, "invalid field number \(number) at byte \(at)")
    }
    return (Int(number), type)
  }

  package mutating func fixed64() throws(VLogError) -> UInt64 {
    guard base.count - offset >= 8 else { throw truncated("a 64-bit value") }
    defer { offset += 8 }
    return UInt64(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
  }

  package mutating func lengthDelimited() throws(VLogError) -> UnsafeRawBufferPointer {
    let length = try varint()
    guard length <= UInt64(base.count - offset) else { throw truncated("a \(length)-byte field") }
    defer { offset += Int(length) }
    return UnsafeRawBufferPointer(rebasing: base[offset..<offset + Int(length)])
  }

  package mutating func identifier(_ name: String) throws(VLogError) -> Identifier {
    let bytes = try lengthDelimited()
    guard bytes.count == 16 else {
      throw VLogError(.malformedEvent, "\(name): \(bytes.count) bytes, expected 16")
    }
    return Identifier(bytes: bytes)
  }

  package mutating func string(_ name: String) throws(VLogError) -> String {
    let bytes = try lengthDelimited()
    guard let string = String(validUTF8: bytes) else {
      throw VLogError(.malformedEvent, "\(name): not valid UTF-8")
    }
    return string
  }

  package mutating func skip(_ type: WireType) throws(VLogError) {
    switch type {
    case .varint: _ = try varint()
    case .fixed64: _ = try fixed64()
    case .lengthDelimited: _ = try lengthDelimited()
    case .fixed32:
      guard base.count - offset >= 4 else { throw truncated("a 32-bit value") }
      offset += 4
    }
  }

  func bytes(from start: Int) -> UnsafeRawBufferPointer {
    UnsafeRawBufferPointer(rebasing: base[start..<offset])
  }

  private func truncated(_ what: String) -> VLogError {
    VLogError(.malformedEvent, "truncated: \(what) at byte \(offset) runs past the end")
  }
}

/// Lends an array's bytes to a closure that throws ``VLogError``, keeping the error's type
/// (`Array.withUnsafeBytes` erases it).
package func withBytes<R>(
  of array: [UInt8], _ body: (UnsafeRawBufferPointer) throws(VLogError) -> R
) throws(VLogError) -> R {
  let result: Result<R, VLogError> = array.withUnsafeBytes { buffer in
    do throws(VLogError) {
      return .success(try body(buffer))
    } catch {
      return .failure(error)
    }
  }
  return try result.get()
}
