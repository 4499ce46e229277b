internal import Crypto
internal import Foundation
public import VLog
public import VLogWire

// What an encrypted account's devices vouch for, so that its server cannot make it up.
//
// The server relays everything a device seals to and applies: the public keys new account
// keys are sealed to at each rotation, the epoch, every event. A server that controls those
// answers must not be able to make a device seal a key to a public key of its own, nor
// apply a change no device made. So the account's devices vouch for both with keys only
// they hold, which the server never sees, and check before they seal or apply:
//
// - the *keys' authenticator*, HMAC-SHA-256 over the account's name, the epoch and the two
//   public keys under the vouching key (random, drawn anew at each re-keying), made by the
//   device that sets them (creation, a password change, a recovery, a rotation) and checked
//   by every device before it seals to them. A lost device's keys vouch for nothing after a
//   re-keying;
// - each event's *authenticator* (`Event.authenticator`), a truncated HMAC-SHA-256 over its
//   stamp, kind and ids (`Event.authenticatedBytes`) under a key drawn from the vouching key
//   (from the tag key in keys made before this version), made when the event is sealed and
//   checked before a pulled event is stored, redacted events included. Events keep their
//   authenticators for good, so a re-keying retires the key it replaces rather than forget
//   it (`RetiredEventKey`): the retired key still vouches for events stamped before the
//   re-keying, and for none after, so a lost device's keys make no event a device applies
//   that is stamped after the re-keying.

/// A key an account's events were authenticated with before a re-keying: it vouches only for
/// events stamped before ``before``, so that the keys a lost device kept make nothing a device
/// applies that is stamped after the re-keying that retired them.
struct RetiredEventKey: Sendable, Equatable {
  /// Milliseconds since 1970: the events it vouches for are stamped before.
  let before: UInt64
  /// The key: 32 bytes.
  let key: [UInt8]

  /// Its size in the keys' raw representation: 8 bytes of time, 32 of key.
  static let bytes = NewAccountKeys.retiredEventKeyBytes

  /// How long after the re-keying device's clock (set by the server's, as far as the device
  /// measured it and at most an hour) events made before the re-keying may still be stamped:
  /// the clock skew a server allows by default, as another device's clock may run that far
  /// ahead of the server's.
  static let margin: UInt64 = 10 * 60 * 1000

  /// When a key retired now stops vouching, in milliseconds since 1970: the device's time
  /// `deviceTime`, moved by the skew it measured to the server's clock
  /// (`serverSkewMilliseconds`, at most an hour either way, so that a server cannot move it
  /// far), and ``margin`` after.
  static func cutoff(deviceTime: Date, serverSkewMilliseconds: Int64 = 0) -> UInt64 {
    let hour: Int64 = 60 * 60 * 1000
    let skew = min(max(serverSkewMilliseconds, -hour), hour)
    let milliseconds = (deviceTime.timeIntervalSince1970 * 1000).rounded(.down)
    // A clock far off either way gives a time far off, never one that wraps around.
    let now = milliseconds.isFinite ? Int64(max(min(milliseconds, 1e15), -1e15)) : 0
    return UInt64(clamping: now + skew) + margin
  }
}

extension AccountKeys {
  /// The key the account's devices vouch for events with: HKDF-SHA-256 of the vouching key (of
  /// the tag key, in keys made before this version), which
  /// every device of the account holds and the server never sees.
  private var authenticationKey: SymmetricKey { SymmetricKey(data: authenticationBytes) }

  /// The seed of the Ed25519 key the account's devices sign their writes with
  /// (`RequestSignature`): HKDF-SHA-256 of the vouching key, so that a re-keying draws a new
  /// one and a lost device's keys sign nothing the server takes after it.
  public var requestSigningKey: [UInt8] {
    HKDF<SHA256>.expand(
      pseudoRandomKey: vouchingKey, info: Array("vlog request signing".utf8),
      outputByteCount: RequestSignature.privateKeyBytes
    ).bytes
  }

  /// The public half of ``requestSigningKey``: what the server checks the account's writes
  /// against, given at the account's creation and at each re-keying.
  public var requestPublicKey: [UInt8] {
    // A seed of the right size always makes a key.
    (try? RequestSignature.publicKey(of: requestSigningKey)) ?? []
  }

  /// What the account's devices vouch for `epoch` and the two public keys with, for the
  /// account `username`: 32 bytes.
  public func keysAuthenticator(
    epoch: UInt64, passwordPublicKey: [UInt8], recoveryPublicKey: [UInt8], username: String
  ) -> [UInt8] {
    var message = Array("vlog public keys\u{0}\(username.lowercased())\u{0}".utf8)
    for shift in stride(from: 56, through: 0, by: -8) {
      message.append(UInt8(truncatingIfNeeded: epoch >> UInt64(shift)))
    }
    message += passwordPublicKey + recoveryPublicKey
    return Array(HMAC<SHA256>.authenticationCode(for: message, using: vouchingKey))
  }

  /// The public keys of `body`, the server's record of the account's keys, once checked to be
  /// those the account's devices vouched for at the record's epoch — the only keys a device
  /// seals anything to.
  ///
  /// - Throws: ``AccountKeyError`` when the record carries no authenticator (an account an
  ///   older version made: recover it once with its recovery key) or one no device of the
  ///   account made: the server answered with public keys that are not the account's.
  public func vouchedPublicKeys(of body: AccountKeysBody, username: String)
    throws(AccountKeyError) -> (password: [UInt8], recovery: [UInt8])
  {
    guard let text = body.keysAuthenticator else {
      throw AccountKeyError(
        "the server's record of the account's keys carries no authenticator (an older "
          + "version made it): no key is sealed to public keys no device vouched for; "
          + "recover the account once with its recovery key")
    }
    let password: [UInt8]
    let recovery: [UInt8]
    let authenticator: [UInt8]
    do {
      password = try NewAccountKeys.bytes(
        body.passwordPublicKey, "passwordPublicKey", count: NewAccountKeys.publicKeyBytes)
      recovery = try NewAccountKeys.bytes(
        body.recoveryPublicKey, "recoveryPublicKey", count: NewAccountKeys.publicKeyBytes)
      authenticator = try NewAccountKeys.bytes(
        text, "keysAuthenticator", count: NewAccountKeys.authenticatorBytes)
    } catch {
      throw AccountKeyError("the server's record of the account's keys is malformed: \(error)")
    }
    let expected = keysAuthenticator(
      epoch: body.epoch, passwordPublicKey: password, recoveryPublicKey: recovery,
      username: username)
    guard Self.equalInConstantTime(expected, authenticator) else {
      throw AccountKeyError(
        "the server named public keys or an epoch (\(body.epoch)) that no device of the account "
          + "vouched for: nothing is sealed to them")
    }
    return (password, recovery)
  }

  /// What the account's devices vouch for `event` with: 16 bytes of HMAC-SHA-256 over its
  /// stamp, kind and ids (`Event.authenticatedBytes`), which every form a log stores of it
  /// keeps.
  public func authenticator(of event: Event) -> [UInt8] {
    Self.authenticator(of: event, key: authenticationKey)
  }

  private static func authenticator(of event: Event, key: SymmetricKey) -> [UInt8] {
    var message = Self.eventPrefix
    message += event.authenticatedBytes
    return Array(
      HMAC<SHA256>.authenticationCode(for: message, using: key).prefix(Event.authenticatorBytes))
  }

  /// Checks that a device of the account made `event`: that it carries the authenticator
  /// ``authenticator(of:)`` gives.
  ///
  /// - Throws: ``AccountKeyError`` for an event without one, or whose stamp, kind or ids are
  ///   not those a device vouched for: an event the server made up or changed.
  public func checkAuthenticator(of event: Event) throws(AccountKeyError) {
    guard let carried = event.authenticator else {
      throw AccountKeyError(
        "event \(event.stamp) (\(event.change.kind)) carries no authenticator: no device of the "
          + "account vouched for it, and it is not applied")
    }
    if Self.equalInConstantTime(authenticator(of: event), carried) { return }
    // A key a re-keying retired vouches only for what was stamped before it.
    let time = event.stamp.time.milliseconds
    for retired in retiredEventKeys where time < retired.before {
      let code = Self.authenticator(of: event, key: SymmetricKey(data: retired.key))
      if Self.equalInConstantTime(code, carried) { return }
    }
    throw AccountKeyError(
      "event \(event.stamp) (\(event.change.kind)) is not one a device of the account made: "
        + "its authenticator does not match its stamp, kind and ids under the account's keys "
        + "of its time, and it is not applied")
  }

  private static let eventPrefix = Array("vlog event authenticator\u{0}".utf8)

  /// Whether `a` and `b` are equal, in time that does not depend on where they differ.
  private static func equalInConstantTime(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    guard a.count == b.count else { return false }
    var difference: UInt8 = 0
    for index in a.indices { difference |= a[index] ^ b[index] }
    return difference == 0
  }
}
