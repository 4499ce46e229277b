/// A text written as an edit of the text it replaces: the bytes of UTF-8 it keeps of that text
/// (copied, by offset) and those it adds (inserted), in order. What a long note's text change
/// carries in place of its whole text, so that a save costs what was typed, not the note.
///
/// A delta names its base by length and XXH3 hash, and its result the same way: applied to any
/// other text than its base it fails, and it never yields a text other than the one it was
/// made from. Its encoding:
///
/// | bytes | what |
/// |---|---|
/// | 1 | the format: 1 |
/// | 8 | XXH3-64 of the base, little-endian |
/// | varint | the base's length |
/// | 8 | XXH3-64 of the result, little-endian |
/// | varint | the result's length |
/// | … | operations, each a varint `count << 1 \| kind`: kind 0 copies `count` bytes of the base from the offset (a varint) that follows; kind 1 inserts the `count` bytes that follow |
///
/// A delta made by ``init(from:to:)`` holds at most three operations — the common prefix
/// copied, the changed middle inserted, the common suffix copied — so its size is the bytes
/// inserted plus at most ``fixedBytes``.
public struct TextDelta: Sendable, Hashable {
  /// One step of building the result.
  public enum Operation: Sendable, Hashable {
    /// `count` bytes of the base, from `offset`.
    case copy(offset: Int, count: Int)
    /// These bytes.
    case insert([UInt8])

    /// The number of bytes the operation adds to the result.
    var count: Int {
      switch self {
      case .copy(_, let count): count
      case .insert(let bytes): bytes.count
      }
    }
  }

  /// The base's length in bytes of UTF-8, and its XXH3-64.
  public let baseCount: Int
  let baseHash: UInt64
  /// The result's length in bytes of UTF-8, and its XXH3-64.
  public let resultCount: Int
  let resultHash: UInt64
  /// The operations, in order.
  public let operations: [Operation]

  /// The format byte of the encoding.
  static let format: UInt8 = 1

  /// The most bytes an encoding made by ``init(from:to:)`` adds to the bytes it inserts: the
  /// format, two hashes, two lengths and three operations' headers and offsets.
  public static let fixedBytes = 1 + 8 + 4 + 8 + 4 + 3 * (4 + 4)

  /// The delta that makes `result` from `base`: their common prefix and suffix copied, what
  /// lies between inserted.
  public init(from base: [UInt8], to result: [UInt8]) {
    let prefix = Self.commonPrefix(base, result)
    let suffix = Self.commonSuffix(base, result, excluding: prefix)
    var operations: [Operation] = []
    if prefix > 0 { operations.append(.copy(offset: 0, count: prefix)) }
    if prefix + suffix < result.count {
      operations.append(.insert(Array(result[prefix..<result.count - suffix])))
    }
    if suffix > 0 { operations.append(.copy(offset: base.count - suffix, count: suffix)) }
    self.init(
      baseCount: base.count, baseHash: Hash.xxh3(base), resultCount: result.count,
      resultHash: Hash.xxh3(result), operations: operations)
  }

  private init(
    baseCount: Int, baseHash: UInt64, resultCount: Int, resultHash: UInt64,
    operations: [Operation]
  ) {
    self.baseCount = baseCount
    self.baseHash = baseHash
    self.resultCount = resultCount
    self.resultHash = resultHash
    self.operations = operations
  }

  /// The number of bytes the delta inserts.
  public var insertedCount: Int {
    operations.reduce(0) { total, operation in
      if case .insert(let bytes) = operation { return total + bytes.count }
      return total
    }
  }

  /// The length of the prefix `a` and `b` share, compared a word at a time.
  static func commonPrefix(_ a: [UInt8], _ b: [UInt8]) -> Int {
    let limit = min(a.count, b.count)
    return a.withUnsafeBytes { a in
      b.withUnsafeBytes { b in
        var index = 0
        while index + 8 <= limit,
          a.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            == b.loadUnaligned(fromByteOffset: index, as: UInt64.self)
        {
          index += 8
        }
        while index < limit, a[index] == b[index] { index += 1 }
        return index
      }
    }
  }

  /// The length of the suffix `a` and `b` share, not reaching into their first `prefix` bytes.
  static func commonSuffix(_ a: [UInt8], _ b: [UInt8], excluding prefix: Int) -> Int {
    let limit = min(a.count, b.count) - prefix
    var length = 0
    while length < limit, a[a.count - 1 - length] == b[b.count - 1 - length] { length += 1 }
    return length
  }

  // MARK: - Applying

  /// The text the delta makes from `base`.
  ///
  /// - Throws: `VLogError` `malformedEvent` when `base` is not the text the delta was made
  ///   from (its length or hash differ), or the result is not the text it was made to make.
  public func applied(to base: [UInt8]) throws(VLogError) -> [UInt8] {
    guard base.count == baseCount, Hash.xxh3(base) == baseHash else {
      throw VLogError(
        .malformedEvent,
        "a text delta applied to another text than its base (\(base.count) bytes, the delta's "
          + "base has \(baseCount))")
    }
    var result: [UInt8] = []
    result.reserveCapacity(resultCount)
    for operation in operations {
      switch operation {
      case .copy(let offset, let count): result += base[offset..<offset + count]
      case .insert(let bytes): result += bytes
      }
    }
    guard result.count == resultCount, Hash.xxh3(result) == resultHash else {
      throw VLogError(.malformedEvent, "a text delta does not make the text it names")
    }
    return result
  }

  // MARK: - Encoding

  /// The delta's bytes (see ``TextDelta``).
  public var encoded: [UInt8] {
    var bytes: [UInt8] = [Self.format]
    Self.appendFixed64(baseHash, to: &bytes)
    Self.appendVarint(UInt64(baseCount), to: &bytes)
    Self.appendFixed64(resultHash, to: &bytes)
    Self.appendVarint(UInt64(resultCount), to: &bytes)
    for operation in operations {
      switch operation {
      case .copy(let offset, let count):
        Self.appendVarint(UInt64(count) << 1, to: &bytes)
        Self.appendVarint(UInt64(offset), to: &bytes)
      case .insert(let inserted):
        Self.appendVarint(UInt64(inserted.count) << 1 | 1, to: &bytes)
        bytes += inserted
      }
    }
    return bytes
  }

  /// The delta `bytes` encode, every length checked: against the end of the bytes, the largest
  /// text (``Limits/textBytes``), the base's length for a copy, and the result's length for the
  /// operations together.
  ///
  /// - Throws: `VLogError` `malformedEvent` saying what is wrong and at which byte.
  public init(decoding bytes: [UInt8]) throws(VLogError) {
    try self.init(decoding: bytes[...])
  }

  /// The delta `bytes` encode (``init(decoding:)``).
  public init(decoding bytes: ArraySlice<UInt8>) throws(VLogError) {
    var reader = Reader(bytes: bytes)
    guard try reader.byte("the format") == Self.format else {
      throw VLogError(
        .malformedEvent, "a text delta of format \(bytes[bytes.startIndex]), not \(Self.format)")
    }
    let baseHash = try reader.fixed64("the base's hash")
    let baseCount = try reader.length("the base's length")
    let resultHash = try reader.fixed64("the result's hash")
    let resultCount = try reader.length("the result's length")
    var operations: [Operation] = []
    var total = 0
    while !reader.isAtEnd {
      let at = reader.offset
      let header = try reader.varint("an operation")
      guard header >> 1 <= UInt64(Limits.textBytes) else {
        throw VLogError(.malformedEvent, "a text delta's operation at byte \(at) is too long")
      }
      let count = Int(header >> 1)
      guard count > 0 else {
        throw VLogError(.malformedEvent, "a text delta's operation at byte \(at) is empty")
      }
      if header & 1 == 0 {
        let offset = try reader.length("a copy's offset")
        guard offset <= baseCount, count <= baseCount - offset else {
          throw VLogError(
            .malformedEvent,
            "a text delta's copy at byte \(at) runs past the end of its base (\(baseCount) "
              + "bytes)")
        }
        operations.append(.copy(offset: offset, count: count))
      } else {
        operations.append(.insert(try reader.bytes(count, "an insertion")))
      }
      total += count
      guard total <= resultCount else {
        throw VLogError(
          .malformedEvent,
          "a text delta's operations make more than its result's \(resultCount) bytes")
      }
    }
    guard total == resultCount else {
      throw VLogError(
        .malformedEvent,
        "a text delta's operations make \(total) bytes, not its result's \(resultCount)")
    }
    self.init(
      baseCount: baseCount, baseHash: baseHash, resultCount: resultCount,
      resultHash: resultHash, operations: operations)
  }

  private static func appendVarint(_ value: UInt64, to bytes: inout [UInt8]) {
    var value = value
    while value >= 0x80 {
      bytes.append(UInt8(value & 0x7F) | 0x80)
      value >>= 7
    }
    bytes.append(UInt8(value))
  }

  private static func appendFixed64(_ value: UInt64, to bytes: inout [UInt8]) {
    withUnsafeBytes(of: value.littleEndian) { bytes += $0 }
  }

  /// Reads a delta's fields, checking each against the end.
  private struct Reader {
    let bytes: ArraySlice<UInt8>
    var offset = 0

    var isAtEnd: Bool { offset >= bytes.count }

    private func truncated(_ what: String) -> VLogError {
      VLogError(.malformedEvent, "a text delta is truncated: \(what) at byte \(offset)")
    }

    mutating func byte(_ what: String) throws(VLogError) -> UInt8 {
      guard offset < bytes.count else { throw truncated(what) }
      defer { offset += 1 }
      return bytes[bytes.startIndex + offset]
    }

    mutating func fixed64(_ what: String) throws(VLogError) -> UInt64 {
      guard bytes.count - offset >= 8 else { throw truncated(what) }
      var value: UInt64 = 0
      for index in 0..<8 {
        value |= UInt64(bytes[bytes.startIndex + offset + index]) << (8 * index)
      }
      offset += 8
      return value
    }

    mutating func varint(_ what: String) throws(VLogError) -> UInt64 {
      var result: UInt64 = 0
      var shift: UInt64 = 0
      while true {
        let byte = try self.byte(what)
        guard shift < 63 || (shift == 63 && byte <= 1) else {
          throw VLogError(
            .malformedEvent, "a text delta's varint at byte \(offset - 1) is longer than 64 bits")
        }
        result |= UInt64(byte & 0x7F) << shift
        if byte < 0x80 { return result }
        shift += 7
      }
    }

    /// A varint that is a length or an offset: at most the largest text.
    mutating func length(_ what: String) throws(VLogError) -> Int {
      let at = offset
      let value = try varint(what)
      guard value <= UInt64(Limits.textBytes) else {
        throw VLogError(
          .malformedEvent,
          "a text delta's \(what) at byte \(at), \(value), is more than the largest text")
      }
      return Int(value)
    }

    mutating func bytes(_ count: Int, _ what: String) throws(VLogError) -> [UInt8] {
      guard bytes.count - offset >= count else { throw truncated(what) }
      defer { offset += count }
      let start = bytes.startIndex + offset
      return Array(bytes[start..<start + count])
    }
  }
}
