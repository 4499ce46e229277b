internal import Crypto
internal import Foundation

/// What a device sends the server in place of a password: drawn by HKDF-SHA-256 from the
/// master secret its password (or recovery key) was stretched into. One rule for the devices,
/// which draw it (`PasswordKeys` in VLogSync), and the server, which draws it from the hash it
/// kept of a clear account's password before devices stretched (``KeyDerivation``, version 3).
public enum SignInSecret {
  /// The sign-in secret drawn from `master` for `purpose` (`password` or `recovery`): 32 bytes
  /// as 43 characters of base64url without padding.
  public static func drawn(from master: [UInt8], purpose: String) -> String {
    let secret = HKDF<SHA256>.expand(
      pseudoRandomKey: SymmetricKey(data: master), info: Array("vlog \(purpose) sign-in".utf8),
      outputByteCount: 32)
    return base64URL(secret.withUnsafeBytes { Array($0) })
  }

  /// Whether `a` and `b` are equal, in time that does not depend on where they differ.
  public static func equalInConstantTime(_ a: some StringProtocol, _ b: some StringProtocol)
    -> Bool
  {
    let a = Array(a.utf8)
    let b = Array(b.utf8)
    guard a.count == b.count else { return false }
    var difference: UInt8 = 0
    for index in a.indices { difference |= a[index] ^ b[index] }
    return difference == 0
  }

  /// base64url without padding (RFC 4648 §5).
  static func base64URL(_ bytes: [UInt8]) -> String {
    Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
      .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
  }
}
