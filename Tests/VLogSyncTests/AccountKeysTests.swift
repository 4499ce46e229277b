import Foundation
import Testing
import VLog

@testable import VLogSync

/// A source of "random" bytes that counts up from `start`: the same keys every run.
private func counting(from start: UInt8) -> (Int) -> [UInt8] {
  let next = Counter(start)
  return { count in (0..<count).map { _ in next.take() } }
}

private final class Counter: @unchecked Sendable {
  private var value: UInt8
  init(_ value: UInt8) { self.value = value }
  func take() -> UInt8 {
    defer { value &+= 1 }
    return value
  }
}

@Suite("The keys of an encrypted account")
struct AccountKeysTests {
  // The expected values below were computed apart from swift-crypto, with Python's hashlib
  // (scrypt, SHA-256) and hmac (HKDF-Expand, RFC 5869): the scheme is what it says, not
  // only what this implementation does.

  @Test(
    "The system's random bytes: as many as asked, of every kind a draw of thousands holds, each draw new, and no two 12-byte nonces of a batch alike"
  )
  func systemRandom() {
    #expect(systemRandomBytes(0).isEmpty)
    for count in [1, 7, 8, 13, 12_000] { #expect(systemRandomBytes(count).count == count) }
    let draw = systemRandomBytes(12_000)
    // 12,000 uniform bytes miss one of the 256 values with a chance of about 1e-18.
    #expect(Set(draw).count == 256)
    #expect(systemRandomBytes(32) != systemRandomBytes(32))
    let nonces = stride(from: 0, to: draw.count, by: 12).map { Array(draw[$0..<$0 + 12]) }
    #expect(Set(nonces).count == nonces.count)
  }

  @Test(
    "A password's sign-in secret is scrypt then HKDF under the user name's salt; case of the name and Unicode form of the password do not matter"
  )
  func signInSecret() throws {
    let keys = try PasswordKeys(username: "Ann", password: "correct horse", cost: .testing)
    #expect(keys.signInSecret == "bVf764LnFvQJ9jutC3jiPwfXuK3gNn9_Pdac5ET0ytk")
    #expect(keys.signInSecret.count == 43)
    let lower = try PasswordKeys(username: "ann", password: "correct horse", cost: .testing)
    #expect(lower.signInSecret == keys.signInSecret && lower.publicKey == keys.publicKey)
    // "café" typed composed on one device and decomposed on another.
    let composed = try PasswordKeys(username: "ann", password: "caf\u{E9} au lait", cost: .testing)
    let decomposed = try PasswordKeys(
      username: "ann", password: "cafe\u{301} au lait", cost: .testing)
    #expect(composed.signInSecret == decomposed.signInSecret)
    // Another password, another name, another cost: other values.
    let other = try PasswordKeys(username: "ann", password: "correct horsf", cost: .testing)
    let bob = try PasswordKeys(username: "bob", password: "correct horse", cost: .testing)
    let costlier = try PasswordKeys(
      username: "ann", password: "correct horse", cost: KeyDerivationCost(logRounds: 5))
    for different in [other, bob, costlier] {
      #expect(different.signInSecret != keys.signInSecret)
      #expect(different.publicKey != keys.publicKey)
    }
    // The sign-in secret is not the key pair's seed.
    #expect(!keys.signInSecret.isEmpty && keys.publicKey.count == 32)
  }

  @Test(
    "A recovery key is written in Crockford's base32 with a checksum, read back forgivingly, and a typing mistake is told apart"
  )
  func recoveryKeyText() throws {
    let key = try RecoveryKey(random: counting(from: 0))
    #expect(
      key.description == "000G-40R4-0M30-E209-185G-R38E-1W81-24GK-2GAH-C5RR-34D1-P70X-3RFP-63ED")
    #expect(try RecoveryKey(key.description) == key)
    // Lowercase, spaces for dashes, O for 0 and l for 1.
    let typed = key.description.lowercased().replacingOccurrences(of: "-", with: " ")
      .replacingOccurrences(of: "0", with: "o").replacingOccurrences(of: "1", with: "l")
    #expect(try RecoveryKey(typed) == key)
    #expect(try key.keys().signInSecret == "-_gLHwz62BsxHW83pUq7N-EzcsliDU_KX9ipsWBwYhE")
    // One character changed: the checksum says so.
    var changed = Array(key.description)
    changed[5] = changed[5] == "2" ? "3" : "2"
    #expect(throws: AccountKeyError.self) { try RecoveryKey(String(changed)) }
    do {
      _ = try RecoveryKey(String(changed))
    } catch {
      #expect(error.description.contains("checksum"))
    }
    #expect(throws: AccountKeyError("a recovery key has 56 characters, this has 55")) {
      try RecoveryKey(String(key.description.dropLast()))
    }
    #expect(throws: AccountKeyError("'U' is not a character of a recovery key")) {
      try RecoveryKey("U" + key.description.dropFirst())
    }
    #expect(throws: AccountKeyError.self) { try RecoveryKey(random: { _ in [1, 2, 3] }) }
  }

  @Test(
    "Keys a server seals to the password's public key itself do not open as the account's: the password vouches for the account's keys only, through their anchor; so does the recovery key"
  )
  func anchors() throws {
    let account = try NewEncryptedAccount(
      username: "ann", password: "correct horse battery", cost: .testing, random: counting(from: 1))
    let password = try PasswordKeys(
      username: "ann", password: "correct horse battery",
      derivation: try #require(account.serverKeys.keyDerivation))
    let recovery = try account.recoveryKey.keys()
    let server = account.serverKeys
    func body(sealedForPassword: [UInt8], passwordAnchor: String) throws -> AccountKeysBody {
      var body = AccountKeysBody(
        epoch: 1,
        passwordPublicKey: try NewAccountKeys.bytes(server.passwordPublicKey, "", count: 32),
        recoveryPublicKey: try NewAccountKeys.bytes(server.recoveryPublicKey, "", count: 32),
        sealedForPassword: sealedForPassword,
        sealedForRecovery: try NewAccountKeys.bytes(server.sealedForRecovery, "", count: 161),
        passwordAnchor: [], recoveryAnchor: [], keysAuthenticator: nil)
      body.passwordAnchor = passwordAnchor
      body.keysAuthenticator = server.keysAuthenticator
      body.recoveryAnchor = server.recoveryAnchor
      return body
    }
    let genuine = try body(
      sealedForPassword: try NewAccountKeys.bytes(server.sealedForPassword, "", count: 161),
      passwordAnchor: server.passwordAnchor)
    #expect(try AccountKeys(opening: genuine, with: password, username: "ann") == account.keys)
    #expect(try AccountKeys(opening: genuine, with: recovery, username: "ann") == account.keys)
    // The server's own keys, sealed to the public key it keeps, with the anchor it keeps.
    let forged = try AccountKeys(random: counting(from: 200))
    let planted = try body(
      sealedForPassword: try forged.sealed(to: password.publicKey, username: "ann"),
      passwordAnchor: server.passwordAnchor)
    #expect(throws: AccountKeyError.self) {
      try AccountKeys(opening: planted, with: password, username: "ann")
    }
    // Without an anchor (a record from before anchors), or with another account's: refused.
    #expect(throws: AccountKeyError.self) {
      try AccountKeys(
        opening: try body(
          sealedForPassword: try NewAccountKeys.bytes(server.sealedForPassword, "", count: 161),
          passwordAnchor: ""), with: password, username: "ann")
    }
    #expect(account.keys.anchor(for: password) != forged.anchor(for: password))
    #expect(account.keys.anchor(for: password) != account.keys.anchor(for: recovery))
    // A rotation keeps the tag key, and so the anchor: no password is needed to rotate.
    let (next, _) = try account.keys.rotated(random: counting(from: 50))
    #expect(next.anchor(for: password) == account.keys.anchor(for: password))
  }

  @Test(
    "The account's keys sealed to a password open with that password only, for that account only")
  func sealedToPassword() throws {
    let keys = try AccountKeys(random: counting(from: 100))
    let password = try PasswordKeys(username: "ann", password: "correct horse", cost: .testing)
    let sealed = try keys.sealed(to: password.publicKey, username: "ann")
    #expect(sealed.count == 161)
    #expect(try AccountKeys(opening: sealed, with: password, username: "ANN") == keys)
    // Sealing twice gives other bytes (a new ephemeral key each time).
    #expect(try keys.sealed(to: password.publicKey, username: "ann") != sealed)
    let wrong = try PasswordKeys(username: "ann", password: "correct horsf", cost: .testing)
    #expect(throws: AccountKeyError.self) {
      try AccountKeys(opening: sealed, with: wrong, username: "ann")
    }
    // Sealed for ann, opened as bob's with the same password: refused.
    #expect(throws: AccountKeyError.self) {
      try AccountKeys(opening: sealed, with: password, username: "bob")
    }
    // Any byte changed: refused.
    for index in [0, 31, 32, 60, 119, 160] {
      var tampered = sealed
      tampered[index] ^= 1
      #expect(throws: AccountKeyError.self) {
        try AccountKeys(opening: tampered, with: password, username: "ann")
      }
    }
    #expect(throws: AccountKeyError.self) {
      try AccountKeys(opening: Array(sealed.dropLast()), with: password, username: "ann")
    }
    // The recovery key's seal opens with the recovery key.
    let recovery = try RecoveryKey(random: counting(from: 7))
    let forRecovery = try keys.sealed(to: recovery.keys().publicKey, username: "ann")
    #expect(try AccountKeys(opening: forRecovery, with: recovery.keys(), username: "ann") == keys)
    #expect(throws: AccountKeyError.self) {
      try AccountKeys(opening: forRecovery, with: password, username: "ann")
    }
  }

  @Test(
    "A re-keying draws a new vouching key, which a rotation keeps: keys a lost device kept vouch for no public keys after it, and the anchor a server kept from before it covers an older re-keying; keys made before vouching keys still open, seal and vouch as they did"
  )
  func vouching() throws {
    let password = try PasswordKeys(username: "ann", password: "correct horse", cost: .testing)
    let first = try AccountKeys(random: counting(from: 1))
    #expect(first.rekeyedAt == 1 && first.rawRepresentation.count == 113)
    let (rotated, _) = try first.rotated(random: counting(from: 90))
    let rekeyed = try rotated.rekeyed(random: counting(from: 150), retiringBefore: 1000)
    #expect(rotated.rekeyedAt == 1 && rekeyed.rekeyedAt == 3 && rekeyed.epoch == 3)
    let publicKeys = (
      password: [UInt8](repeating: 4, count: 32), recovery: [UInt8](repeating: 5, count: 32)
    )
    func vouch(_ keys: AccountKeys, epoch: UInt64) -> [UInt8] {
      keys.keysAuthenticator(
        epoch: epoch, passwordPublicKey: publicKeys.password,
        recoveryPublicKey: publicKeys.recovery, username: "ann")
    }
    // A rotation keeps the vouching key and the anchor; a re-keying replaces both.
    #expect(vouch(rotated, epoch: 3) == vouch(first, epoch: 3))
    #expect(vouch(rekeyed, epoch: 3) != vouch(first, epoch: 3))
    #expect(rotated.anchor(for: password) == first.anchor(for: password))
    #expect(rekeyed.anchor(for: password) != first.anchor(for: password))
    // Tags keep their names; events are authenticated with a new key, the old one retired.
    #expect(rekeyed.tagName("Paris") == first.tagName("Paris"))
    #expect(rotated.authenticationBytes == first.authenticationBytes)
    #expect(rekeyed.authenticationBytes != first.authenticationBytes)
    #expect(
      rekeyed.retiredEventKeys == [RetiredEventKey(before: 1000, key: first.authenticationBytes)])
    #expect(rekeyed.rawRepresentation.count == 153)
    #expect(try AccountKeys(rawRepresentation: rekeyed.rawRepresentation) == rekeyed)

    // Keys made before vouching keys: 72 bytes, sealed in 120, vouched for with the tag key,
    // anchored by the tag key alone; a re-keying gives them a vouching key.
    let legacy = try AccountKeys(rawRepresentation: Array(first.rawRepresentation.prefix(72)))
    #expect(legacy.rekeyedAt == 0 && legacy.rawRepresentation.count == 72)
    let sealed = try legacy.sealed(to: password.publicKey, username: "ann")
    #expect(sealed.count == 120)
    #expect(try AccountKeys(opening: sealed, with: password, username: "ann") == legacy)
    #expect(legacy.anchor(for: password) != first.anchor(for: password))
    #expect(vouch(legacy, epoch: 1) != vouch(first, epoch: 1))
    let upgraded = try legacy.rekeyed(random: counting(from: 30), retiringBefore: 1000)
    #expect(upgraded.rekeyedAt == 2 && upgraded.rawRepresentation.count == 153)
    #expect(upgraded.retiredEventKeys.map(\.key) == [legacy.authenticationBytes])
    // Keys made before events were authenticated with a key of the vouching key's: 112 bytes,
    // sealed in 160, authenticating with the tag key's, as every device of then did.
    let beforeRetiring = try AccountKeys(
      rawRepresentation: Array(first.rawRepresentation.prefix(112)))
    #expect(beforeRetiring.rawRepresentation.count == 112)
    #expect(beforeRetiring.authenticationBytes == legacy.authenticationBytes)
    #expect(try beforeRetiring.sealed(to: password.publicKey, username: "ann").count == 160)
    #expect(try legacy.rotated(random: counting(from: 30)).keys.rekeyedAt == 0)
    #expect(throws: AccountKeyError.self) {
      try AccountKeys(rawRepresentation: Array(first.rawRepresentation.prefix(100)))
    }
    // Keys no account has: an epoch counting on from would overflow, a re-keying after them.
    for (epoch, rekeyedAt) in [(UInt64.max, UInt64(1)), (0, 0), (2, 3), (2, 0)] {
      var bytes = first.rawRepresentation
      bytes.replaceSubrange(0..<8, with: withUnsafeBytes(of: epoch.bigEndian, Array.init))
      bytes.replaceSubrange(72..<80, with: withUnsafeBytes(of: rekeyedAt.bigEndian, Array.init))
      #expect(throws: AccountKeyError.self) { try AccountKeys(rawRepresentation: bytes) }
    }
  }

  @Test(
    "A rotation's link leads from the old content key to the new one, never back; the tag key stays"
  )
  func rotation() throws {
    let first = try AccountKeys(random: counting(from: 1))
    let (second, link) = try first.rotated(random: counting(from: 200))
    #expect(second.epoch == 2 && first.epoch == 1)
    #expect(second != first)
    #expect(try first.following(link) == second)
    #expect(second.tagName("Paris") == first.tagName("Paris"))
    // The new keys cannot follow the link back, nor can a stranger's keys follow it.
    #expect(throws: AccountKeyError.self) { try second.following(link) }
    let stranger = try AccountKeys(random: counting(from: 50))
    #expect(throws: AccountKeyError.self) { try stranger.following(link) }
    // A note's key wrapped in epoch 1 does not open in epoch 2: rewrapped, it does.
    let note = Identifier(high: 1, low: 2)
    let noteKey = try ObjectKey(random: counting(from: 9))
    let wrapped = try first.wrap(noteKey, of: note)
    #expect(wrapped.count == 60)
    #expect(try first.unwrap(wrapped, of: note) == noteKey)
    #expect(throws: AccountKeyError.self) { try second.unwrap(wrapped, of: note) }
    #expect(throws: AccountKeyError.self) {
      try first.unwrap(wrapped, of: Identifier(high: 1, low: 3))
    }
    #expect(try second.unwrap(try second.wrap(noteKey, of: note), of: note) == noteKey)
  }

  @Test(
    "A tag's name in an encrypted account is a keyed hash of its id: one for every spelling, another under another account's key"
  )
  func tagNames() throws {
    // Bytes 0 to 31 are the content key, 32 to 63 the tag key.
    let keys = try AccountKeys(random: counting(from: 0))
    #expect(keys.tagName("paris") == "4fc459a4f776b4201e21e3f254eebd64")
    #expect(keys.tagName(of: TagKey(name: "Paris")) == keys.tagName("paris"))
    #expect(keys.tagName("  Paris ") == keys.tagName("paris"))
    #expect(keys.tagName("London") != keys.tagName("paris"))
    let other = try AccountKeys(random: counting(from: 3))
    #expect(other.tagName("paris") != keys.tagName("paris"))
  }

  @Test("A sealed value opens only with its note's key and in its own context")
  func sealedValues() throws {
    let key = try ObjectKey(random: counting(from: 11))
    let context = Array("stamp kind ids".utf8)
    let plain = Array("Meet at noon".utf8)
    let sealed = try key.seal(plain, context: context)
    #expect(sealed.count == plain.count + 28)
    #expect(sealed.firstRange(of: plain) == nil)
    #expect(try key.open(sealed, context: context) == plain)
    #expect(throws: AccountKeyError.self) {
      try key.open(sealed, context: Array("another event".utf8))
    }
    #expect(throws: AccountKeyError.self) {
      try ObjectKey(random: counting(from: 12)).open(sealed, context: context)
    }
    var tampered = sealed
    tampered[tampered.count - 1] ^= 0x80
    #expect(throws: AccountKeyError.self) { try key.open(tampered, context: context) }
    #expect(throws: AccountKeyError.self) { try key.open([1, 2, 3], context: context) }
  }
}

extension AccountKeysTests {
  @Test(
    "A re-keying retires the key events were authenticated with: it still vouches for events stamped before the cutoff, and for none from it on, so the keys a lost device kept make nothing a device applies that is stamped after; every retired key is kept through later re-keyings and rotations, and keys that name more retired keys than they hold are refused"
  )
  func retiredEventKeys() throws {
    let first = try AccountKeys(random: counting(from: 1))
    let cutoff: UInt64 = 1_800_000_000_000
    func event(_ milliseconds: UInt64, _ keys: AccountKeys) -> Event {
      let event = Event(
        stamp: Stamp(
          time: HybridTime(milliseconds: milliseconds, counter: 0),
          replica: ReplicaID(Identifier(high: 1, low: 1))),
        change: .noteDeleted(NoteID(Identifier(high: 2, low: 2))))
      return event.withAuthenticator(keys.authenticator(of: event))
    }
    let second = try first.rekeyed(random: counting(from: 40), retiringBefore: cutoff)
    // What the account's devices authenticated before the re-keying still checks…
    try second.checkAuthenticator(of: event(cutoff - 1, first))
    // …but the lost keys vouch for nothing stamped from the cutoff on.
    #expect(throws: AccountKeyError.self) {
      try second.checkAuthenticator(of: event(cutoff, first))
    }
    try second.checkAuthenticator(of: event(cutoff + 1, second))
    try second.checkAuthenticator(of: event(1, second))
    // A second re-keying keeps both retired keys, each with its own cutoff; a rotation keeps
    // them all.
    let (rotated, _) = try second.rotated(random: counting(from: 70))
    let third = try rotated.rekeyed(random: counting(from: 80), retiringBefore: cutoff + 100)
    #expect(third.retiredEventKeys.map(\.before) == [cutoff, cutoff + 100])
    // A retired key that names a later cutoff than a re-keying's (keys a lost device made up)
    // vouches for nothing after that re-keying.
    let planted = try AccountKeys(
      rawRepresentation: Array(first.rawRepresentation.prefix(112)) + [1]
        + withUnsafeBytes(of: UInt64.max.bigEndian, Array.init) + [UInt8](repeating: 9, count: 32))
    let fourth = try planted.rekeyed(random: counting(from: 90), retiringBefore: cutoff)
    #expect(fourth.retiredEventKeys.map(\.before) == [cutoff, cutoff])
    // A clock far off gives a cutoff far off, never one that wraps around.
    #expect(
      RetiredEventKey.cutoff(deviceTime: Date(timeIntervalSince1970: -1e12))
        == RetiredEventKey.margin)
    #expect(
      RetiredEventKey.cutoff(
        deviceTime: Date(timeIntervalSince1970: 1e300), serverSkewMilliseconds: .max)
        > cutoff)
    try third.checkAuthenticator(of: event(cutoff - 1, first))
    try third.checkAuthenticator(of: event(cutoff + 99, second))
    #expect(throws: AccountKeyError.self) {
      try third.checkAuthenticator(of: event(cutoff + 100, second))
    }
    #expect(throws: AccountKeyError.self) {
      try third.checkAuthenticator(of: event(cutoff + 1, first))
    }
    #expect(try AccountKeys(rawRepresentation: third.rawRepresentation) == third)
    // Sealed, they open with the password, at 161 bytes and 40 for each retired key.
    let password = try PasswordKeys(username: "ann", password: "correct horse", cost: .testing)
    let sealed = try third.sealed(to: password.publicKey, username: "ann")
    #expect(sealed.count == 161 + 2 * 40 && NewAccountKeys.isSealedSize(sealed.count))
    #expect(try AccountKeys(opening: sealed, with: password, username: "ann") == third)
    // A count that disagrees with the bytes, and one past the most, are refused.
    var miscounted = third.rawRepresentation
    miscounted[112] = 3
    #expect(throws: AccountKeyError.self) { try AccountKeys(rawRepresentation: miscounted) }
    let tooMany =
      first.rawRepresentation.prefix(112) + [65] + [UInt8](repeating: 1, count: 65 * 40)
    #expect(throws: AccountKeyError.self) { try AccountKeys(rawRepresentation: Array(tooMany)) }
    #expect(!NewAccountKeys.isSealedSize(161 + 65 * 40) && !NewAccountKeys.isSealedSize(162))
  }
}

extension AccountKeysTests {
  @Test(
    "A re-keying by a tool takes the server's clock from its answer's Date header, within the cutoff's clamp"
  )
  func skewFromDateHeader() {
    let now = Date(timeIntervalSince1970: 1_796_000_000)
    let header = "Mon, 30 Nov 2026 00:53:20 GMT"
    let response = TransportResponse(status: 200, headers: ["date": header])
    let later = now.addingTimeInterval(-90)
    #expect(APICaller.clockSkew(of: response, at: later) == 90_000)
    #expect(APICaller.clockSkew(of: response, at: now) == 0)
    #expect(APICaller.clockSkew(of: TransportResponse(status: 200), at: now) == nil)
    #expect(
      APICaller.clockSkew(of: TransportResponse(status: 200, headers: ["date": "soon"]), at: now)
        == nil)
    // A server that says it is a day ahead moves the cutoff by an hour at most.
    let day: Int64 = 86_400_000
    #expect(
      RetiredEventKey.cutoff(deviceTime: now, serverSkewMilliseconds: day)
        == RetiredEventKey.cutoff(deviceTime: now, serverSkewMilliseconds: 3_600_000))
  }
}
