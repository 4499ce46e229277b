internal import Crypto
internal import Foundation
internal import LMDB

/// A 128-bit identifier, stored as 16 big-endian bytes and written as a lowercase UUID
/// (`8-4-4-4-12` hexadecimal digits).
///
/// The concrete identifier types (``NoteID``, ``AttachmentID``, ``ReplicaID``) wrap one, so that
/// an attachment's id can never be passed where a note's is expected.
public struct Identifier: Hashable, Comparable, Sendable, CustomStringConvertible {
  /// The first 64 bits.
  public var high: UInt64
  /// The last 64 bits.
  public var low: UInt64

  /// Creates an identifier from its two halves.
  public init(high: UInt64, low: UInt64) {
    self.high = high
    self.low = low
  }

  /// A new random identifier.
  public static func random(using generator: inout some RandomNumberGenerator) -> Identifier {
    Identifier(high: generator.next(), low: generator.next())
  }

  /// Parses the UUID form, in either case, with or without hyphens.
  ///
  /// - Returns: nil if `text` is not 32 hexadecimal digits, optionally hyphenated as a UUID.
  public init?(_ text: some StringProtocol) {
    var text = String(text)
    guard let parsed = text.withUTF8(Self.parse) else { return nil }
    self = parsed
  }

  /// The identifier `utf8` spells: 32 hexadecimal digits, hyphenated as a UUID or not.
  private static func parse(_ utf8: UnsafeBufferPointer<UInt8>) -> Identifier? {
    let hyphenated: Bool
    switch utf8.count {
    case 32: hyphenated = false
    case 36: hyphenated = true
    default: return nil
    }
    var halves: (high: UInt64, low: UInt64) = (0, 0)
    var digits = 0
    for position in 0..<utf8.count {
      let byte = utf8[position]
      if hyphenated, position == 8 || position == 13 || position == 18 || position == 23 {
        guard byte == UInt8(ascii: "-") else { return nil }
        continue
      }
      guard let value = Hex.value(of: byte) else { return nil }
      if digits < 16 {
        halves.high = halves.high << 4 | UInt64(value)
      } else {
        halves.low = halves.low << 4 | UInt64(value)
      }
      digits += 1
    }
    return Identifier(high: halves.high, low: halves.low)
  }

  /// Reads an identifier from 16 big-endian bytes.
  ///
  /// - Precondition: `bytes` holds at least `offset + 16` bytes.
  package init(bytes: UnsafeRawBufferPointer, at offset: Int = 0) {
    high = UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
    low = UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self))
  }

  /// Reads the identifier that ends a key of a store's database, checking the key's length.
  ///
  /// - Parameters:
  ///   - key: The key's bytes.
  ///   - length: The length the key must have, or nil for any length of at least 16.
  ///   - database: The database's name, for the error.
  /// - Throws: ``VLogError/Code/corruptStore`` for a key of the wrong length.
  static func ending(
    _ key: UnsafeRawBufferPointer, length: Int? = 16, in database: String
  ) throws(VLogError) -> Identifier {
    guard key.count >= 16, length.map({ key.count == $0 }) ?? true else {
      throw VLogError(
        .corruptStore,
        "a key in '\(database)' is \(key.count) bytes, not \(length.map(String.init) ?? "16 or more")"
      )
    }
    return Identifier(bytes: key, at: key.count - 16)
  }

  /// The 16 big-endian bytes.
  public var bytes: [UInt8] {
    var result = [UInt8]()
    result.reserveCapacity(16)
    append(to: &result)
    return result
  }

  /// Lends the 16 big-endian bytes without allocating.
  @inline(__always)
  func withKey<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    try withUnsafeBytes(of: (high.bigEndian, low.bigEndian)) { try body($0) }
  }

  package func append(to buffer: inout [UInt8]) {
    BigEndian.append(high, to: &buffer)
    BigEndian.append(low, to: &buffer)
  }

  /// The lowercase UUID form, for example `1b4e28ba-2fa1-11d2-883f-0016d3cca427`.
  public var description: String {
    String(unsafeUninitializedCapacity: 36) { text in
      var written = 0
      for digit in 0..<32 {
        if digit == 8 || digit == 12 || digit == 16 || digit == 20 {
          text[written] = UInt8(ascii: "-")
          written += 1
        }
        let half = digit < 16 ? high : low
        text[written] = Hex.digit(UInt8(truncatingIfNeeded: half >> (60 - 4 * (digit % 16))))
        written += 1
      }
      return written
    }
  }

  /// Orders identifiers by their bytes.
  public static func < (lhs: Identifier, rhs: Identifier) -> Bool {
    (lhs.high, lhs.low) < (rhs.high, rhs.low)
  }

}

/// Declares the shared behaviour of the typed identifiers.
public protocol TypedIdentifier: Hashable, Comparable, Sendable, CustomStringConvertible {
  /// The underlying 128 bits.
  var identifier: Identifier { get }
  /// Wraps 128 bits.
  init(_ identifier: Identifier)
}

extension TypedIdentifier {
  /// Parses the UUID form; nil if `text` is not one.
  public init?(_ text: some StringProtocol) {
    guard let identifier = Identifier(text) else { return nil }
    self.init(identifier)
  }

  /// A new random identifier.
  public static func random(using generator: inout some RandomNumberGenerator) -> Self {
    Self(Identifier.random(using: &generator))
  }

  /// The lowercase UUID form.
  public var description: String { identifier.description }

  /// Orders identifiers by their bytes.
  public static func < (lhs: Self, rhs: Self) -> Bool { lhs.identifier < rhs.identifier }
}

/// The identity of a note: 128 random bits made by the replica that created it, never reused.
public struct NoteID: TypedIdentifier {
  /// The underlying 128 bits.
  public let identifier: Identifier
  /// Wraps 128 bits.
  public init(_ identifier: Identifier) { self.identifier = identifier }
}

/// The identity of an attachment: 128 random bits, never reused. An attachment never changes;
/// a new picture is a new attachment.
public struct AttachmentID: TypedIdentifier {
  /// The underlying 128 bits.
  public let identifier: Identifier
  /// Wraps 128 bits.
  public init(_ identifier: Identifier) { self.identifier = identifier }
}

/// The identity of a replica (one store on one device), chosen at random when the store is
/// created. It breaks ties between stamps with equal times.
public struct ReplicaID: TypedIdentifier {
  /// The underlying 128 bits.
  public let identifier: Identifier
  /// Wraps 128 bits.
  public init(_ identifier: Identifier) { self.identifier = identifier }
}

/// The identity of a tag: its name normalised (trimmed, whitespace collapsed, lowercased, in
/// Unicode's composed form), so that "Paris" and "paris" made on two devices are one tag, and
/// so are "café" typed with a precomposed é and with an e and a combining accent.
public struct TagID: Hashable, Comparable, Sendable, CustomStringConvertible {
  /// The normalised name.
  public let rawValue: String

  /// The id of the tag with this display name.
  public init(name: String) {
    rawValue = Self.normalize(name)
  }

  /// The normalised name.
  public var description: String { rawValue }

  /// Orders tag ids by their UTF-8 bytes, as the store's indexes do.
  public static func < (lhs: TagID, rhs: TagID) -> Bool {
    lhs.rawValue.utf8.lexicographicallyPrecedes(rhs.rawValue.utf8)
  }

  /// Trims, collapses runs of whitespace to one space, lowercases, and composes (NFC).
  ///
  /// Canonically equivalent strings are equal to Swift's `==`, and hash alike, but not to
  /// the store's indexes, which compare bytes: an id is composed so that both agree.
  static func normalize(_ name: String) -> String {
    TagName.cleanASCII(name, lowercasing: true)
      ?? TagName.cleanCharacters(name).lowercased().precomposedStringWithCanonicalMapping
  }
}

/// A tag as events name it without its name: the first 16 bytes of the SHA-256 of `tag`, a
/// zero byte and the tag's id (its lowercased name), written as 32 hexadecimal digits.
///
/// Removing a tag from a note (``Change/tagRemoved(_:tag:)``) and deleting a tag
/// (``Change/tagErased(_:)``) name it by key, so that once a tag is deleted, no event any log
/// keeps spells its name. Two replicas that spell a tag "Paris" and "paris" name it with the
/// same key. The key is a hash of the name, not a secret: whoever guesses a name can check
/// the guess against it.
public struct TagKey: Hashable, Comparable, Sendable, CustomStringConvertible {
  /// The 16 bytes, as an identifier.
  public let identifier: Identifier

  /// The key of the tag with this id.
  public init(_ tag: TagID) { self.init(hashing: tag.rawValue) }

  /// The key versions before store format 8 gave `tag` when it was typed in Unicode's
  /// decomposed form: they keyed the lowercased name as typed, uncomposed. Nil when the
  /// decomposed form is the id itself (ASCII, or nothing to decompose). A device still on such
  /// a version removes a tag from a note by this key, and a note takes it as the tag's.
  package init?(decomposedFormOf tag: TagID) {
    guard !tag.rawValue.utf8.allSatisfy({ $0 < 0x80 }) else { return nil }
    let decomposed = tag.rawValue.decomposedStringWithCanonicalMapping
    guard !decomposed.utf8.elementsEqual(tag.rawValue.utf8) else { return nil }
    self.init(hashing: decomposed)
  }

  /// The first 16 bytes of the SHA-256 of "tag", a zero byte and `id`.
  private init(hashing id: String) {
    var input: [UInt8] = [0x74, 0x61, 0x67, 0]  // "tag", 0
    input.reserveCapacity(4 + id.utf8.count)
    input.append(contentsOf: id.utf8)
    identifier = SHA256.hash(data: input).withUnsafeBytes { Identifier(bytes: $0) }
  }

  /// Wraps 16 bytes read from an event or a log.
  public init(_ identifier: Identifier) { self.identifier = identifier }

  /// Parses the 32 hexadecimal digits ``description`` writes (a UUID's form is taken too).
  public init?(_ text: some StringProtocol) {
    guard let identifier = Identifier(text) else { return nil }
    self.identifier = identifier
  }

  /// The key of the tag spelled `name`, in any case.
  public init(name: String) { self.init(TagID(name: name)) }

  /// 32 lowercase hexadecimal digits.
  public var description: String { Hex.string(identifier.bytes) }

  /// Orders keys by their bytes.
  public static func < (lhs: TagKey, rhs: TagKey) -> Bool { lhs.identifier < rhs.identifier }
}

/// Rules for a tag's display name.
enum TagName {
  /// The longest name, in UTF-8 bytes.
  static let maximumBytes = 200

  /// Trims and collapses whitespace, keeping case; composes (NFC).
  static func clean(_ name: String) -> String {
    cleanASCII(name, lowercasing: false)
      ?? cleanCharacters(name).precomposedStringWithCanonicalMapping
  }

  static func cleanCharacters(_ name: String) -> String {
    name.split(whereSeparator: { $0.isWhitespace }).joined(separator: " ")
  }

  /// ``clean(_:)`` (and lowercasing, if asked) on the bytes of an ASCII name, where a
  /// whitespace character is one of the bytes 0x09–0x0D and 0x20; nil for any other name.
  /// A name that is already so is returned as it is.
  static func cleanASCII(_ name: String, lowercasing: Bool) -> String? {
    var unchanged = true
    var previousWasSpace = true
    for byte in name.utf8 {
      guard byte < 0x80 else { return nil }
      let isSpace = byte == 0x20 || (0x09...0x0D).contains(byte)
      if (isSpace && (byte != 0x20 || previousWasSpace))
        || (lowercasing && (0x41...0x5A).contains(byte))
      {
        unchanged = false
      }
      previousWasSpace = isSpace
    }
    if unchanged && !previousWasSpace || name.isEmpty { return name }
    var result: [UInt8] = []
    result.reserveCapacity(name.utf8.count)
    var pendingSpace = false
    for byte in name.utf8 {
      if byte == 0x20 || (0x09...0x0D).contains(byte) {
        pendingSpace = !result.isEmpty
        continue
      }
      if pendingSpace {
        result.append(0x20)
        pendingSpace = false
      }
      result.append(lowercasing && (0x41...0x5A).contains(byte) ? byte | 0x20 : byte)
    }
    return String(decoding: result, as: UTF8.self)
  }
}

/// The SHA-256 of an attachment's bytes, which names them in the blob store.
public struct BlobHash: Hashable, Sendable, CustomStringConvertible {
  /// The 32 bytes of the digest.
  public let bytes: [UInt8]

  /// Wraps a 32-byte digest.
  ///
  /// - Returns: nil unless `bytes` has 32 bytes.
  public init?(bytes: [UInt8]) {
    guard bytes.count == 32 else { return nil }
    self.bytes = bytes
  }

  /// Parses 64 hexadecimal digits.
  public init?(hex: some StringProtocol) {
    guard hex.utf8.count == 64, let bytes = Hex.bytes(hex) else { return nil }
    self.bytes = bytes
  }

  /// 64 lowercase hexadecimal digits.
  public var description: String { Hex.string(bytes) }

  /// The placeholder in an erased attachment's metadata: 32 zero bytes.
  static let erased = BlobHash(zeros: ())

  private init(zeros: Void) { bytes = [UInt8](repeating: 0, count: 32) }
}
