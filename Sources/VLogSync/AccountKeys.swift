internal import Crypto
internal import Foundation
public import VLog
internal import _CryptoExtras

#if canImport(Glibc)
  internal import Glibc
#endif

/// The keys a device of an encrypted account holds once signed in: the content key of the
/// account's current epoch, which wraps each note's key, the tag key, which names tags, and
/// the vouching key, with which the account's devices vouch for its public keys.
///
/// The content key is replaced by a new random one (``rotated(random:)``) after a deletion has
/// synced, and the old one is forgotten everywhere: a copy of the server's files taken before
/// the deletion then holds the deleted note's key wrapped by a key nobody has. The tag key
/// never changes: it only names tags, which must keep their ids. The vouching key is drawn
/// anew at each re-keying (``rekeyed(random:retiringBefore:)``), and with it the key events
/// are authenticated with, so that a lost device's keys can vouch for nothing after it.
public struct AccountKeys: Sendable, Equatable {
  /// Which content key this is: 1 for the account's first, one more at each rotation.
  public let epoch: UInt64
  /// Wraps the notes' keys: 32 bytes.
  private let contentBytes: [UInt8]
  /// Names tags (``tagName(_:)``) and seals what names a tag apart from a note: 32 bytes.
  private let tagBytes: [UInt8]
  /// What the account's devices vouch for its public keys with, and what the password's and
  /// the recovery key's anchors cover (32 bytes): random, drawn at the account's creation and
  /// at each re-keying, kept by a rotation. Empty in keys made before it had one, which vouch
  /// with ``authenticationBytes``.
  private let vouchingBytes: [UInt8]
  /// The epoch of the re-keying (or the creation) that drew the vouching key; 0 for keys made
  /// before they had one. A device that held keys refuses, in their place, keys of an earlier
  /// re-keying: a server with a lost device's keys could make those up.
  public let rekeyedAt: UInt64
  /// Whether the key events are authenticated with is drawn from the vouching key, as in
  /// keys made or re-keyed by this version, or from the tag key, as in keys made before.
  private let eventKeyFromVouching: Bool
  /// The keys events were authenticated with before each re-keying since the account's keys
  /// had their own, oldest first, each good only for events stamped before its re-keying.
  let retiredEventKeys: [RetiredEventKey]
  /// The key the devices vouch for events with: drawn from the vouching key (or, in keys made
  /// before this version, from the tag key).
  let authenticationBytes: [UInt8]

  var contentKey: SymmetricKey { SymmetricKey(data: contentBytes) }
  var tagKey: SymmetricKey { SymmetricKey(data: tagBytes) }
  /// The key of the keys' authenticator (``keysAuthenticator(epoch:passwordPublicKey:recoveryPublicKey:username:)``).
  var vouchingKey: SymmetricKey {
    SymmetricKey(data: vouchingBytes.isEmpty ? authenticationBytes : vouchingBytes)
  }

  /// The keys of a new account: epoch 1, from 96 bytes of `random`.
  public init(random: (Int) -> [UInt8]) throws(AccountKeyError) {
    let bytes = random(96)
    guard bytes.count == 96 else {
      throw AccountKeyError("account keys need 96 random bytes, got \(bytes.count)")
    }
    self.init(
      epoch: 1, contentBytes: Array(bytes[0..<32]), tagBytes: Array(bytes[32..<64]),
      vouchingBytes: Array(bytes[64..<96]), rekeyedAt: 1, eventKeyFromVouching: true,
      retiredEventKeys: [])
  }

  /// The keys as a device keeps them between launches (in a ``CredentialStore``) and as they
  /// are sealed: the epoch (8 bytes, big-endian), the content key and the tag key, then the
  /// epoch of the last re-keying and the vouching key, then the count of retired event keys
  /// (a byte) and each (8 bytes of the time before which it vouches, 32 of key) — 113 bytes and 40
  /// for each retired key. Keys made before their event key was drawn from the vouching key
  /// end before the count (112 bytes), and keys made before they had a vouching key after the
  /// tag key (72). Whoever holds them reads every note of the account.
  public var rawRepresentation: [UInt8] {
    var bytes = BigEndianBytes.of(epoch) + contentBytes + tagBytes
    if !vouchingBytes.isEmpty { bytes += BigEndianBytes.of(rekeyedAt) + vouchingBytes }
    if eventKeyFromVouching {
      bytes.append(UInt8(clamping: retiredEventKeys.count))
      for retired in retiredEventKeys { bytes += BigEndianBytes.of(retired.before) + retired.key }
    }
    return bytes
  }

  /// Keys read back from ``rawRepresentation``.
  ///
  /// - Throws: ``AccountKeyError`` for bytes that are not keys: not 113 and 40 for each
  ///   retired key (at most `NewAccountKeys.maximumRetiredEventKeys`), nor 112 or 72.
  public init(rawRepresentation bytes: [UInt8]) throws(AccountKeyError) {
    guard Self.isPlainSize(bytes.count) else {
      throw AccountKeyError(
        "account keys are \(Self.plainBytes + 1) bytes and \(RetiredEventKey.bytes) for each "
          + "retired event key (or \(Self.plainBytes), or \(Self.plainBytesBeforeVouching)), "
          + "these are \(bytes.count)")
    }
    let eventKeyFromVouching = bytes.count > Self.plainBytes
    var retired: [RetiredEventKey] = []
    if eventKeyFromVouching {
      let count = Int(bytes[Self.plainBytes])
      guard bytes.count == Self.plainBytes + 1 + count * RetiredEventKey.bytes else {
        throw AccountKeyError(
          "account keys name \(count) retired event keys, and are \(bytes.count) bytes")
      }
      for index in 0..<count {
        let start = Self.plainBytes + 1 + index * RetiredEventKey.bytes
        retired.append(
          RetiredEventKey(
            before: BigEndianBytes.uint64(bytes[start..<(start + 8)]),
            key: Array(bytes[(start + 8)..<(start + RetiredEventKey.bytes)])))
      }
    }
    let vouching = bytes.count >= Self.plainBytes
    let epoch = BigEndianBytes.uint64(bytes.prefix(8))
    let rekeyedAt = vouching ? BigEndianBytes.uint64(bytes[72..<80]) : 0
    // Whatever sealed them, no epoch is past what a count of rotations reaches, and no
    // re-keying is later than the keys.
    guard (1...Self.maximumEpoch).contains(epoch), rekeyedAt <= epoch, !vouching || rekeyedAt > 0
    else {
      throw AccountKeyError(
        "account keys of epoch \(epoch), re-keyed at epoch \(rekeyedAt), are not keys of an "
          + "account")
    }
    self.init(
      epoch: epoch, contentBytes: Array(bytes[8..<40]), tagBytes: Array(bytes[40..<72]),
      vouchingBytes: vouching ? Array(bytes[80..<112]) : [], rekeyedAt: rekeyedAt,
      eventKeyFromVouching: eventKeyFromVouching, retiredEventKeys: retired)
  }

  /// Whether `count` bytes can be keys' ``rawRepresentation``.
  static func isPlainSize(_ count: Int) -> Bool {
    if count == plainBytes || count == plainBytesBeforeVouching { return true }
    let retired = count - plainBytes - 1
    return retired >= 0 && retired % RetiredEventKey.bytes == 0
      && retired / RetiredEventKey.bytes <= NewAccountKeys.maximumRetiredEventKeys
  }

  /// The highest epoch keys may have: far past any number of rotations, and far from the
  /// end of the numbers, so that counting on from it never overflows.
  static let maximumEpoch: UInt64 = 1 << 48

  /// The size of ``rawRepresentation``, and of what a seal holds.
  static let plainBytes = 112
  /// The size of ``rawRepresentation`` of keys made before they had a vouching key.
  static let plainBytesBeforeVouching = 72

  private init(
    epoch: UInt64, contentBytes: [UInt8], tagBytes: [UInt8], vouchingBytes: [UInt8],
    rekeyedAt: UInt64, eventKeyFromVouching: Bool, retiredEventKeys: [RetiredEventKey]
  ) {
    self.epoch = epoch
    self.contentBytes = contentBytes
    self.tagBytes = tagBytes
    self.vouchingBytes = vouchingBytes
    self.rekeyedAt = rekeyedAt
    self.eventKeyFromVouching = eventKeyFromVouching
    self.retiredEventKeys = retiredEventKeys
    // Drawn once: every event sealed or opened is authenticated with it.
    authenticationBytes =
      eventKeyFromVouching
      ? HKDF<SHA256>.expand(
        pseudoRandomKey: SymmetricKey(data: vouchingBytes),
        info: Array("vlog event authentication".utf8), outputByteCount: 32
      ).bytes
      : HKDF<SHA256>.expand(
        pseudoRandomKey: SymmetricKey(data: tagBytes),
        info: Array("vlog account authentication".utf8), outputByteCount: 32
      ).bytes
  }

  /// These keys at `epoch` with `contentBytes` in place of their content key.
  private func with(epoch: UInt64, contentBytes: [UInt8]) -> AccountKeys {
    AccountKeys(
      epoch: epoch, contentBytes: contentBytes, tagBytes: tagBytes, vouchingBytes: vouchingBytes,
      rekeyedAt: rekeyedAt, eventKeyFromVouching: eventKeyFromVouching,
      retiredEventKeys: retiredEventKeys)
  }

  /// The HPKE suite of the keys' seals: X25519, HKDF-SHA256, ChaCha20-Poly1305.
  private static var suite: HPKE.Ciphersuite {
    HPKE.Ciphersuite(kem: .Curve25519_HKDF_SHA256, kdf: .HKDF_SHA256, aead: .chaChaPoly)
  }

  /// The keys sealed to `publicKey` (a password's or a recovery key's) for the account
  /// `username`: what the server stores, 32 bytes of encapsulated key then the ciphertext of
  /// ``rawRepresentation``, 48 bytes more than it (161 bytes and 40 for each retired event
  /// key). Only the private half of `publicKey` opens it, and only for that account name.
  public func sealed(to publicKey: [UInt8], username: String) throws -> [UInt8] {
    let recipient = try Curve25519.KeyAgreement.PublicKey(rawRepresentation: publicKey)
    var sender = try HPKE.Sender(
      recipientKey: recipient, ciphersuite: Self.suite, info: Data(Self.info(username)))
    return Array(sender.encapsulatedKey) + Array(try sender.seal(rawRepresentation))
  }

  /// Opens keys ``sealed(to:username:)`` sealed to `keys`' public key for `username`.
  ///
  /// - Throws: ``AccountKeyError`` when they do not open: another password or recovery key,
  ///   another account, or bytes changed.
  public init(opening sealed: [UInt8], with keys: PasswordKeys, username: String)
    throws(AccountKeyError)
  {
    guard NewAccountKeys.isSealedSize(sealed.count) else {
      throw AccountKeyError(
        "sealed account keys are \(NewAccountKeys.sealedBytes) bytes and "
          + "\(NewAccountKeys.retiredEventKeyBytes) for each retired event key (or "
          + "\(NewAccountKeys.sealedBytesBeforeRetiring), or "
          + "\(NewAccountKeys.sealedBytesBeforeVouching)), these are \(sealed.count)")
    }
    let plain: [UInt8]
    do {
      var recipient = try HPKE.Recipient(
        privateKey: try keys.privateKey(), ciphersuite: Self.suite, info: Data(Self.info(username)),
        encapsulatedKey: Data(sealed.prefix(32)))
      plain = Array(try recipient.open(sealed.dropFirst(32)))
    } catch {
      throw AccountKeyError(
        "the account's keys do not open with this password or recovery key")
    }
    guard plain.count == sealed.count - 48 else {
      throw AccountKeyError(
        "the account's keys opened to \(plain.count) bytes, not \(sealed.count - 48)")
    }
    try self.init(rawRepresentation: plain)
  }

  private static func info(_ username: String) -> [UInt8] {
    Array("vlog account keys v1\u{0}\(username.lowercased())".utf8)
  }

  /// The next epoch's keys — a new random content key, the same tag and vouching keys — and
  /// the link that
  /// takes a device holding these to them: the new content key sealed by the old one. A link
  /// leads forward only: nothing opens an older key from a newer one.
  public func rotated(random: (Int) -> [UInt8]) throws -> (keys: AccountKeys, link: [UInt8]) {
    let bytes = random(32)
    guard bytes.count == 32 else {
      throw AccountKeyError("a content key needs 32 random bytes, got \(bytes.count)")
    }
    let next = with(epoch: epoch + 1, contentBytes: bytes)
    return (next, try link(to: next))
  }

  /// The link that takes a device holding these keys to `next`, keys of a later epoch that
  /// differ from these in their content key alone (``rotated(random:)``): its content key
  /// sealed by this one, bound to its epoch. A device follows a link to the next epoch only;
  /// one past it (bringing a restored record forward) opens with the password.
  ///
  /// - Throws: ``AccountKeyError`` when `next` is not such keys.
  func link(to next: AccountKeys) throws -> [UInt8] {
    guard next.epoch > epoch, isRotation(to: next) else {
      throw AccountKeyError(
        "the keys of epoch \(next.epoch) are not a rotation of those of epoch \(epoch)")
    }
    return Array(
      try ChaChaPoly.seal(
        next.contentBytes, using: contentKey, authenticating: Self.linkData(next.epoch)
      ).combined)
  }

  /// Whether `later` are these keys after rotations only (``rotated(random:)``), no
  /// re-keying: the same tag and vouching keys, and the same retired event keys.
  func isRotation(to later: AccountKeys) -> Bool {
    later.epoch >= epoch && later.tagBytes == tagBytes && later.vouchingBytes == vouchingBytes
      && later.rekeyedAt == rekeyedAt && later.eventKeyFromVouching == eventKeyFromVouching
      && later.retiredEventKeys == retiredEventKeys
  }

  /// The next epoch's keys with no way to them from these: a new random content key, a new
  /// random vouching key, the same tag key, and no link. A device holding these (a lost
  /// phone's) cannot follow: it opens nothing wrapped by the new content key, and every note's
  /// and attachment's key is renewed under it (``ObjectKey/renewed(random:)``), so that nothing
  /// sealed later opens with a key these unwrap. Nor can it vouch for public keys any more,
  /// nor make the anchors of keys a device would take in place of these, nor authenticate
  /// an event stamped from `cutoff` on: the new keys authenticate events with a key drawn
  /// from the new vouching key, and keep this one, retired, for events stamped before
  /// `cutoff` (the device's time at the re-keying, with a margin for clocks).
  ///
  /// - Throws: ``AccountKeyError`` past `NewAccountKeys.maximumRetiredEventKeys` re-keyings,
  ///   or without the random bytes.
  public func rekeyed(random: (Int) -> [UInt8], retiringBefore cutoff: UInt64) throws
    -> AccountKeys
  {
    let bytes = random(64)
    guard bytes.count == 64 else {
      throw AccountKeyError("a re-keying needs 64 random bytes, got \(bytes.count)")
    }
    guard retiredEventKeys.count < NewAccountKeys.maximumRetiredEventKeys else {
      throw AccountKeyError(
        "the account was re-keyed \(retiredEventKeys.count) times, as often as its keys hold")
    }
    // No key retired before vouches past this re-keying, whatever cutoff it came with: keys
    // a device held before (a lost one's) could have named any.
    let inherited = retiredEventKeys.map {
      RetiredEventKey(before: min($0.before, cutoff), key: $0.key)
    }
    return AccountKeys(
      epoch: epoch + 1, contentBytes: Array(bytes.prefix(32)), tagBytes: tagBytes,
      vouchingBytes: Array(bytes.suffix(32)), rekeyedAt: epoch + 1, eventKeyFromVouching: true,
      retiredEventKeys: inherited + [RetiredEventKey(before: cutoff, key: authenticationBytes)])
  }

  /// The next epoch's keys, from the link ``rotated(random:)`` made from these.
  ///
  /// - Throws: ``AccountKeyError`` when the link is not from these keys to the next epoch.
  public func following(_ link: [UInt8]) throws(AccountKeyError) -> AccountKeys {
    do {
      let box = try ChaChaPoly.SealedBox(combined: link)
      let key = try ChaChaPoly.open(
        box, using: contentKey, authenticating: Self.linkData(epoch + 1))
      return with(epoch: epoch + 1, contentBytes: Array(key))
    } catch {
      throw AccountKeyError("the link to epoch \(epoch + 1) does not open with epoch \(epoch)")
    }
  }

  private static func linkData(_ epoch: UInt64) -> [UInt8] {
    Array("vlog content key\u{0}".utf8) + BigEndianBytes.of(epoch)
  }

  /// The key of `object` (a note or an attachment) wrapped by this epoch's content key, with
  /// the keys it had before re-keyings: 28 bytes and 32 for each, which open only as
  /// `object`'s key of this epoch.
  public func wrap(_ key: ObjectKey, of object: Identifier) throws -> [UInt8] {
    var plain = key.key.bytes
    for older in key.older { plain += older.bytes }
    return Array(
      try ChaChaPoly.seal(plain, using: contentKey, authenticating: objectKeyData(object))
        .combined)
  }

  /// The key of `object` that ``wrap(_:of:)`` wrapped with this epoch's content key.
  ///
  /// - Throws: ``AccountKeyError`` when it does not open: another object, another epoch, or
  ///   bytes changed.
  public func unwrap(_ wrapped: [UInt8], of object: Identifier) throws(AccountKeyError)
    -> ObjectKey
  {
    let plain: [UInt8]
    do {
      let box = try ChaChaPoly.SealedBox(combined: wrapped)
      plain = Array(
        try ChaChaPoly.open(box, using: contentKey, authenticating: objectKeyData(object)))
    } catch {
      throw AccountKeyError("the key of \(object) does not open with the keys of epoch \(epoch)")
    }
    guard !plain.isEmpty, plain.count % 32 == 0, plain.count / 32 <= ObjectKey.maximumGenerations
    else {
      throw AccountKeyError("the key of \(object) opens to \(plain.count) bytes, not keys")
    }
    let keys = stride(from: 0, to: plain.count, by: 32).map {
      SymmetricKey(data: plain[$0..<($0 + 32)])
    }
    return ObjectKey(keys[0], older: Array(keys.dropFirst()))
  }

  private func objectKeyData(_ object: Identifier) -> [UInt8] {
    Array("vlog note key\u{0}".utf8) + BigEndianBytes.of(epoch) + object.bytes
  }

  /// What `keys` (a password's or a recovery key's) vouch for these keys with: the HMAC-SHA-256,
  /// under a key drawn from the password or the recovery key, of the tag key, the vouching key
  /// and the epoch of the re-keying that drew it, which a rotation keeps (32 bytes). The server
  /// keeps it beside the seal to `keys`' public key; a device that opens keys checks it, so
  /// keys a server sealed to that public key itself — which it can, knowing the public key —
  /// are refused: the server cannot make their anchor, and one it kept from before a re-keying
  /// covers a vouching key of an earlier re-keying, which a device that held keys since
  /// refuses. (Keys made before they had a vouching key: of the tag key alone.)
  public func anchor(for keys: PasswordKeys) -> [UInt8] {
    let message =
      vouchingBytes.isEmpty
      ? Array("vlog anchor\u{0}".utf8) + tagBytes
      : Array("vlog anchor v2\u{0}".utf8) + tagBytes + vouchingBytes
        + BigEndianBytes.of(rekeyedAt)
    return Array(HMAC<SHA256>.authenticationCode(for: message, using: keys.anchorKey))
  }

  /// The key that seals the values of events that name a tag apart from any note (a rename, a
  /// deletion): drawn from the tag key, so it never changes either.
  var tagValuesKey: ObjectKey {
    ObjectKey(
      HKDF<SHA256>.expand(
        pseudoRandomKey: tagKey, info: Array("vlog tag values".utf8), outputByteCount: 32))
  }

  /// The name a tag has in an encrypted account's events, in place of its display name: 32
  /// hexadecimal digits of a keyed hash (HMAC-SHA-256 under the tag key) of its key, so that
  /// "Paris" and "paris" are one tag to the server, which cannot tell which.
  public func tagName(_ name: String) -> String { tagName(of: TagKey(name: name)) }

  /// The name in an encrypted account's events of the tag whose key is `tag`: what a tag's
  /// removal or deletion, which name it by key, is sealed with, whether or not the device
  /// still knows its name.
  public func tagName(of tag: TagKey) -> String {
    let code = HMAC<SHA256>.authenticationCode(
      for: Array("vlog tag\u{0}".utf8) + tag.identifier.bytes, using: tagKey)
    return Hex.string(Array(code.prefix(16)))
  }
}

/// Why an encrypted account's key could not be made, read or opened.
public struct AccountKeyError: Error, Sendable, Equatable, CustomStringConvertible {
  /// What is wrong.
  public let description: String
  /// Whether the account was re-keyed since the epoch this device holds
  /// (``AccountKeys/rekeyed(random:retiringBefore:)``): no link leads to its keys, which open with the
  /// password (or the recovery key) alone.
  public let keysReplaced: Bool
  /// Whether the server's record of the account's keys is of an older epoch than the keys
  /// this device holds: the server was restored from a backup taken before they last
  /// rotated (or lies). The device brings the record forward with the password
  /// (``AccountKeyring/bringForward(from:username:isDeleted:)``); it never goes back to older keys.
  public let serverBehind: Bool
  /// Whether the keys changed while this device used them: a later attempt may succeed. Not
  /// a verdict on what was being opened.
  let changedMeanwhile: Bool

  init(
    _ description: String, keysReplaced: Bool = false, serverBehind: Bool = false,
    changedMeanwhile: Bool = false
  ) {
    self.description = description
    self.keysReplaced = keysReplaced
    self.serverBehind = serverBehind
    self.changedMeanwhile = changedMeanwhile
  }
}

extension ContiguousBytes {
  /// The bytes.
  var bytes: [UInt8] { withUnsafeBytes { Array($0) } }
}

/// Unsigned integers as 8 big-endian bytes.
private enum BigEndianBytes {
  static func of(_ value: UInt64) -> [UInt8] {
    (0..<8).map { UInt8(truncatingIfNeeded: value >> (56 - 8 * $0)) }
  }
  static func uint64(_ bytes: some Collection<UInt8>) -> UInt64 {
    bytes.reduce(0) { $0 << 8 | UInt64($1) }
  }
}

#if canImport(Glibc)
  /// `/dev/urandom`, opened once for the process (reads of it from any thread are safe), or
  /// -1 if it cannot be.
  private let urandom = open("/dev/urandom", O_RDONLY | O_CLOEXEC)
#endif

/// Cryptographically secure random bytes from the system (`/dev/urandom` on Linux, the
/// system's generator elsewhere or if it cannot be read): what keys and nonces are drawn from
/// unless a test gives a source.
public func systemRandomBytes(_ count: Int) -> [UInt8] {
  guard count > 0 else { return [] }
  return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
    var filled = 0
    #if canImport(Glibc)
      // In one system call: a batch's nonces are thousands of bytes, and the system
      // generator's words (a call each) are eight.
      if urandom >= 0 {
        while filled < count {
          let got = read(urandom, buffer.baseAddress! + filled, count - filled)
          guard got > 0 else { break }
          filled += got
        }
      }
    #endif
    var generator = SystemRandomNumberGenerator()
    while filled < count {
      let word: UInt64 = generator.next()
      withUnsafeBytes(of: word) { word in
        for byte in word.prefix(count - filled) {
          buffer[filled] = byte
          filled += 1
        }
      }
    }
    initialized = count
  }
}
