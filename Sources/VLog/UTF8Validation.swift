internal import Foundation

extension String {
  /// The string whose UTF-8 is `bytes`, or nil if `bytes` are not valid UTF-8.
  ///
  /// Decoding with repair and then comparing the result with `bytes` takes the standard
  /// library's specialized paths for a byte buffer; `String(validating:as:)` does not have one
  /// and goes through generic code for every byte. Repair replaces each invalid sequence with
  /// U+FFFD's bytes, which no invalid sequence equals, so the two differ exactly when the bytes
  /// are not valid UTF-8.
  package init?(validUTF8 bytes: UnsafeRawBufferPointer) {
    let string = String(decoding: bytes.assumingMemoryBound(to: UInt8.self), as: UTF8.self)
    let same =
      string.utf8.withContiguousStorageIfAvailable { decoded in
        guard decoded.count == bytes.count else { return false }
        guard let start = decoded.baseAddress, let original = bytes.baseAddress else {
          return true  // both empty
        }
        return memcmp(start, original, bytes.count) == 0
      } ?? string.utf8.elementsEqual(bytes)
    guard same else { return nil }
    self = string
  }
}
