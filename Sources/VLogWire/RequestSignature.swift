internal import Crypto
internal import Foundation

/// What an end-to-end encrypted account's devices sign each write to its log and keys with,
/// so that its server refuses a write from someone who holds only a session token.
///
/// A device of the account draws an Ed25519 key pair from the keys only the account's devices
/// hold (`AccountKeys` in VLogSync: from the vouching key, so a re-keying draws a new pair);
/// the account's creation, and each re-keying, give the server the public half. Each push of
/// events, rotation of keys, store of object keys and upload of bytes then carries, in the `VLog-Signature`
/// header, the signature of the request's method, route and body, which the server checks
/// before it stores or erases anything. One rule for the devices, which sign, and the server,
/// which checks.
///
/// The signature vouches to an honest server only: a server that lies can store what it
/// likes, and the account's devices check every event themselves (its authenticator).
public enum RequestSignature {
  /// The request header that carries the signature: `VLog-Signature`.
  public static let headerName = "VLog-Signature"
  /// The bytes of a public key: 32.
  public static let publicKeyBytes = 32
  /// The bytes of a private key (its seed): 32.
  public static let privateKeyBytes = 32

  /// The public half of `privateKey`, a 32-byte Ed25519 seed.
  ///
  /// - Throws: ``WireError`` for a seed that is not 32 bytes.
  public static func publicKey(of privateKey: [UInt8]) throws(WireError) -> [UInt8] {
    Array(try signingKey(privateKey).publicKey.rawRepresentation)
  }

  /// The header value that signs a request: base64 of the Ed25519 signature, under
  /// `privateKey`, of `method`, `route` (the path as the API names it, without a query) and
  /// `body`.
  ///
  /// - Throws: ``WireError`` for a seed that is not 32 bytes, or a signature that fails.
  public static func signature(
    method: String, route: String, body: [UInt8], privateKey: [UInt8]
  ) throws(WireError) -> String {
    let key = try signingKey(privateKey)
    do {
      let signature = try key.signature(for: message(method: method, route: route, body: body))
      return Data(signature).base64EncodedString()
    } catch {
      throw WireError(headerName, "the request could not be signed: \(error)")
    }
  }

  /// Whether `header` is a signature of `method`, `route` and `body` under `publicKey`.
  public static func isValid(
    _ header: String?, method: String, route: String, body: [UInt8], publicKey: [UInt8]
  ) -> Bool {
    guard let header, header.utf8.count <= 128, let signature = Data(base64Encoded: header),
      let key = try? Curve25519.Signing.PublicKey(rawRepresentation: publicKey)
    else { return false }
    return key.isValidSignature(signature, for: message(method: method, route: route, body: body))
  }

  /// What is signed: a label, the method, the route and the SHA-256 of the body.
  private static func message(method: String, route: String, body: [UInt8]) -> Data {
    var message = Data("vlog request\u{0}\(method.uppercased())\u{0}\(route)\u{0}".utf8)
    message.append(contentsOf: SHA256.hash(data: body))
    return message
  }

  private static func signingKey(_ privateKey: [UInt8]) throws(WireError)
    -> Curve25519.Signing.PrivateKey
  {
    guard privateKey.count == privateKeyBytes,
      let key = try? Curve25519.Signing.PrivateKey(rawRepresentation: privateKey)
    else {
      throw WireError(
        headerName, "a signing key is \(privateKeyBytes) bytes, this one \(privateKey.count)")
    }
    return key
  }
}
