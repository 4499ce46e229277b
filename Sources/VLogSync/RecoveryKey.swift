internal import Crypto
internal import Foundation

/// An encrypted account's recovery key: 32 random bytes, shown once when the account is
/// created, that sign in and open the account's keys when the password is lost. Losing both
/// the password and the recovery key loses the account's notes: nobody else can read them.
///
/// Written as 56 characters of Crockford's base32 in groups of four — the key and a 3-byte
/// checksum, so that a mistyped key is told apart from a wrong one.
public struct RecoveryKey: Sendable, Hashable, CustomStringConvertible {
  /// The 32 bytes.
  let bytes: [UInt8]

  /// A new recovery key from 32 bytes of `random` (a cryptographically secure source).
  public init(random: (Int) -> [UInt8]) throws(AccountKeyError) {
    let bytes = random(32)
    guard bytes.count == 32 else {
      throw AccountKeyError("a recovery key needs 32 random bytes, got \(bytes.count)")
    }
    self.bytes = bytes
  }

  /// Reads a recovery key as ``description`` writes it: case, spaces and dashes do not matter,
  /// and `I`, `L` read as `1`, `O` as `0`.
  ///
  /// - Throws: ``AccountKeyError`` saying what is wrong: a character that is not base32, the
  ///   wrong length, or a checksum that does not match (a typing mistake).
  public init(_ text: String) throws(AccountKeyError) {
    var values: [UInt8] = []
    for character in text.uppercased() where character != "-" && !character.isWhitespace {
      guard let value = Self.value(of: character) else {
        throw AccountKeyError("'\(character)' is not a character of a recovery key")
      }
      values.append(value)
    }
    guard values.count == 56 else {
      throw AccountKeyError("a recovery key has 56 characters, this has \(values.count)")
    }
    var decoded: [UInt8] = []
    var buffer = 0
    var bits = 0
    for value in values {
      buffer = (buffer << 5) | Int(value)
      bits += 5
      if bits >= 8 {
        bits -= 8
        decoded.append(UInt8((buffer >> bits) & 0xFF))
      }
    }
    let key = Array(decoded.prefix(32))
    guard Array(decoded.suffix(3)) == Self.checksum(key) else {
      throw AccountKeyError("the recovery key's checksum does not match: a character is wrong")
    }
    bytes = key
  }

  static let alphabet = Array("0123456789ABCDEFGHJKMNPQRSTVWXYZ")

  private static func value(of character: Character) -> UInt8? {
    switch character {
    case "O": return 0
    case "I", "L": return 1
    default: return alphabet.firstIndex(of: character).map(UInt8.init)
    }
  }

  private static func checksum(_ key: [UInt8]) -> [UInt8] {
    Array(SHA256.hash(data: key).prefix(3))
  }

  /// `XXXX-XXXX-…`: 14 groups of four characters.
  public var description: String {
    var characters: [Character] = []
    var buffer = 0
    var bits = 0
    for byte in bytes + Self.checksum(bytes) {
      buffer = (buffer << 8) | Int(byte)
      bits += 8
      while bits >= 5 {
        bits -= 5
        characters.append(Self.alphabet[(buffer >> bits) & 31])
      }
      buffer &= (1 << bits) - 1
    }
    return stride(from: 0, to: characters.count, by: 4).map {
      String(characters[$0..<min($0 + 4, characters.count)])
    }.joined(separator: "-")
  }

  /// The recovery key's sign-in secret and key pair.
  public func keys() throws -> PasswordKeys {
    try PasswordKeys(
      master: SymmetricKey(data: bytes), purpose: "recovery", derivation: .versionOne)
  }
}
