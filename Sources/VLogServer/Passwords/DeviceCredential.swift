internal import Crypto
internal import Foundation
internal import VLog

/// What a server gives a device that signed in, so that its later sign-ins are judged by that
/// device's own failures, not by its user name's: whoever else guesses at the name cannot lock
/// the device out (OWASP's "device cookies").
///
/// 16 random bytes and the first 16 bytes of an HMAC-SHA-256 of them, the user name, the
/// account's number and the salt of its password's hash under the server's secret,
/// base64url: any server of the storage checks it, none stores it, one made for an account is
/// nothing to another that takes its name later, and a password change (a new salt) ends
/// every credential made before it. It is no password: a device that presents it must still
/// send the right one, and its failures still count against its address.
struct DeviceCredential: Sendable, Hashable {
  /// The random part: names the device's throttle counter.
  let nonce: [UInt8]
  /// The credential as sent.
  let text: String

  /// A new credential for the account `account` named `name`, whose password's hash has the
  /// salt `passwordSalt`.
  init(name: String, account: UInt64, passwordSalt: [UInt8], nonce: [UInt8], secret: [UInt8]) {
    self.nonce = nonce
    self.text = base64URL(
      nonce
        + Self.tag(
          name: name, account: account, passwordSalt: passwordSalt, nonce: nonce, secret: secret))
  }

  /// The credential in `text`, if the server made it for the account `account` named `name`
  /// since its password was last set; nil for anything else.
  init?(
    _ text: String, name: String, account: UInt64, passwordSalt: [UInt8], secret: [UInt8]
  ) {
    guard text.utf8.count == 43, let bytes = Self.bytes(base64URL: text), bytes.count == 32
    else { return nil }
    let nonce = Array(bytes[..<16])
    let expected = Self.tag(
      name: name, account: account, passwordSalt: passwordSalt, nonce: nonce, secret: secret)
    // Compared in constant time, as HMAC checks are.
    guard zip(expected, bytes[16...]).reduce(0, { $0 | ($1.0 ^ $1.1) }) == 0 else { return nil }
    self.nonce = nonce
    self.text = text
  }

  /// The key the device's failures count under.
  var throttleKey: ThrottleKey {
    ThrottleKey(kind: .device, value: Hex.string(nonce))
  }

  private static func tag(
    name: String, account: UInt64, passwordSalt: [UInt8], nonce: [UInt8], secret: [UInt8]
  ) -> [UInt8] {
    let message =
      Array("vlog device\u{0}\(name)\u{0}\(account)\u{0}".utf8) + passwordSalt + [0] + nonce
    return Array(
      HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: secret)).prefix(16))
  }

  private static func bytes(base64URL text: String) -> [UInt8]? {
    let standard = text.replacingOccurrences(of: "-", with: "+")
      .replacingOccurrences(of: "_", with: "/")
    return Data(base64Encoded: standard + "=").map(Array.init)
  }
}

/// `bytes` in base64url without padding (RFC 4648 §5): what tokens and device credentials are
/// sent as.
func base64URL(_ bytes: [UInt8]) -> String {
  Data(bytes).base64EncodedString()
    .replacingOccurrences(of: "+", with: "-")
    .replacingOccurrences(of: "/", with: "_")
    .replacingOccurrences(of: "=", with: "")
}
