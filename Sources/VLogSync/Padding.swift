internal import Foundation
internal import VLog

/// How an encrypted account's devices pad what they seal, so that a sealed value's or an
/// attachment's size tells a server only a bucket, not a length.
///
/// Sizes are rounded up by Padmé (Nikitin et al., "Reducing Metadata Leakage from Encrypted
/// Files and Communication with PURBs", 2019): a length whose highest bit is bit E keeps its
/// top ⌊log₂ E⌋ + 1 bits and clears the rest by rounding up. It leaks O(log log L) bits of a
/// length L and adds at most 12 % (under 6 % past a kibibyte); two texts within a few bytes
/// of each other seal to one size. A sealed value is at least ``minimumValueBytes``, so
/// flags, dates and short lists all seal to one size.
///
/// Padding is ISO/IEC 7816-4's: a byte 0x80, then zeros. A padded event value starts with a
/// byte 0 that no unpadded one (the fields of an event's encoding, each with a tag of at least
/// 0x20) starts with, so values sealed before padding still open. An attachment's bytes are
/// told apart by their hash, which the attachment names: unpadded bytes match it as they are.
public enum Padding {
  /// The fewest bytes a sealed event's values are padded to.
  public static let minimumValueBytes = 64

  /// `length` rounded up by Padmé.
  public static func padme(_ length: Int) -> Int {
    guard length > 2 else { return max(length, 0) }
    let exponent = Int.bitWidth - 1 - length.leadingZeroBitCount
    let kept = Int.bitWidth - exponent.leadingZeroBitCount
    let mask = (1 << (exponent - kept)) - 1
    return (length + mask) & ~mask
  }

  /// An event's values as sealed: a byte 0, `fields`, then ISO padding to a Padmé size of at
  /// least ``minimumValueBytes``.
  static func paddedValue(_ fields: [UInt8]) -> [UInt8] {
    let size = max(minimumValueBytes, padme(fields.count + 2))
    var padded = [UInt8]()
    padded.reserveCapacity(size)
    padded.append(0)
    padded.append(contentsOf: fields)
    padded.append(0x80)
    padded.append(contentsOf: repeatElement(0, count: size - padded.count))
    return padded
  }

  /// The fields of an event's values `opened`: unpadded as ``paddedValue(_:)`` padded them,
  /// or as they are for values sealed unpadded.
  ///
  /// - Throws: ``AccountKeyError`` for a padded value without its 0x80.
  static func valueFields(_ opened: Data) throws(AccountKeyError) -> Data {
    guard let first = opened.first, first == 0 else { return opened }
    guard let end = opened.lastIndex(where: { $0 != 0 }), end > opened.startIndex,
      opened[end] == 0x80
    else {
      throw AccountKeyError("a sealed value's padding is malformed")
    }
    return opened[(opened.startIndex + 1)..<end]
  }

  /// An attachment's `bytes` padded to a Padmé size, but never past
  /// `Limits.attachmentBytes` + 1.
  static func paddedBlob(_ bytes: [UInt8]) -> [UInt8] {
    let size = min(padme(bytes.count + 1), max(Limits.attachmentBytes + 1, bytes.count + 1))
    var padded = bytes
    padded.reserveCapacity(size)
    padded.append(0x80)
    padded.append(contentsOf: repeatElement(0, count: size - padded.count))
    return padded
  }

  /// `padded` without the padding ``paddedBlob(_:)`` added, or nil if it has none.
  static func blobBytes(_ padded: [UInt8]) -> ArraySlice<UInt8>? {
    guard let end = padded.lastIndex(where: { $0 != 0 }), padded[end] == 0x80 else { return nil }
    return padded[..<end]
  }
}
