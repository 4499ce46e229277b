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
    var writer = ProtobufWriter()
    writer.buffer.append(Self.format)
    writer.rawFixed64(baseHash)
    writer.rawVarint(UInt64(baseCount))
    writer.rawFixed64(resultHash)
    writer.rawVarint(UInt64(resultCount))
    for operation in operations {
      switch operation {
      case .copy(let offset, let count):
        writer.rawVarint(UInt64(count) << 1)
        writer.rawVarint(UInt64(offset))
      case .insert(let inserted):
        writer.rawVarint(UInt64(inserted.count) << 1 | 1)
        writer.buffer += inserted
      }
    }
    return writer.buffer
  }

  /// The delta `bytes` encode, every length checked: against the end of the bytes, the largest
  /// text (``Limits/textBytes``), the base's length for a copy, and the result's length for the
  /// operations together.
  ///
  /// - Throws: `VLogError` `malformedEvent` saying what is wrong and at which byte.
  public init(decoding bytes: [UInt8]) throws(VLogError) {
    self = try withBytes(of: bytes) { buffer throws(VLogError) in
      try Self(decoding: buffer)
    }
  }

  /// The delta `bytes` encode, checked as `init(decoding:)` checks an array.
  public init(decoding bytes: UnsafeRawBufferPointer) throws(VLogError) {
    guard let format = bytes.first else {
      throw VLogError(.malformedEvent, "a text delta is empty")
    }
    guard format == Self.format else {
      throw VLogError(.malformedEvent, "a text delta of format \(format), not \(Self.format)")
    }
    var reader = ProtobufReader(bytes)
    reader.offset = 1
    let baseHash = try reader.fixed64()
    let baseCount = try Self.length(&reader, "the base's length")
    let resultHash = try reader.fixed64()
    let resultCount = try Self.length(&reader, "the result's length")
    var operations: [Operation] = []
    var total = 0
    while !reader.isAtEnd {
      let at = reader.offset
      let header = try reader.varint()
      guard header >> 1 <= UInt64(Limits.textBytes), header >> 1 > 0 else {
        throw VLogError(
          .malformedEvent, "a text delta's operation at byte \(at) is empty or too long")
      }
      let count = Int(header >> 1)
      if header & 1 == 0 {
        let offset = try Self.length(&reader, "a copy's offset")
        guard offset <= baseCount, count <= baseCount - offset else {
          throw VLogError(
            .malformedEvent,
            "a text delta's copy at byte \(at) runs past the end of its base (\(baseCount) "
              + "bytes)")
        }
        operations.append(.copy(offset: offset, count: count))
      } else {
        guard count <= bytes.count - reader.offset else {
          throw VLogError(
            .malformedEvent, "a text delta's insertion at byte \(at) runs past the end")
        }
        operations.append(.insert(Array(bytes[reader.offset..<reader.offset + count])))
        reader.offset += count
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

  /// A varint that is a length or an offset: at most the largest text.
  private static func length(_ reader: inout ProtobufReader, _ what: String) throws(VLogError)
    -> Int
  {
    let at = reader.offset
    let value = try reader.varint()
    guard value <= UInt64(Limits.textBytes) else {
      throw VLogError(
        .malformedEvent,
        "a text delta's \(what) at byte \(at), \(value), is more than the largest text")
    }
    return Int(value)
  }
}
