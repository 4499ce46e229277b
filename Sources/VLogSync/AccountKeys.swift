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
/// anew at each re-keying (``rekeyed(random:)``), so that a lost device's keys can vouch for
/// nothing after it.
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
  /// The key the devices vouch for events with, drawn from the tag key.
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
      vouchingBytes: Array(bytes[64..<96]), rekeyedAt: 1)
  }

  /// The keys as a device keeps them between launches (in a ``CredentialStore``) and as they
  /// are sealed: the epoch (8 bytes, big-endian), the content key and the tag key, then the
  /// epoch of the last re-keying and the vouching key — 112 bytes; 72 for keys made before
  /// they had a vouching key. Whoever holds them reads every note of the account.
  public var rawRepresentation: [UInt8] {
    var bytes = BigEndianBytes.of(epoch) + contentBytes + tagBytes
    if !vouchingBytes.isEmpty { bytes += BigEndianBytes.of(rekeyedAt) + vouchingBytes }
    return bytes
  }

  /// Keys read back from ``rawRepresentation``.
  ///
  /// - Throws: ``AccountKeyError`` for bytes that are not 112 (or 72) of them.
  public init(rawRepresentation bytes: [UInt8]) throws(AccountKeyError) {
    guard bytes.count == Self.plainBytes || bytes.count == Self.plainBytesBeforeVouching else {
      throw AccountKeyError(
        "account keys are \(Self.plainBytes) bytes (or \(Self.plainBytesBeforeVouching)), "
          + "these are \(bytes.count)")
    }
    let vouching = bytes.count == Self.plainBytes
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
      vouchingBytes: vouching ? Array(bytes[80..<112]) : [], rekeyedAt: rekeyedAt)
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
    rekeyedAt: UInt64
  ) {
    self.epoch = epoch
    self.contentBytes = contentBytes
    self.tagBytes = tagBytes
    self.vouchingBytes = vouchingBytes
    self.rekeyedAt = rekeyedAt
    // Drawn once: every event sealed or opened is authenticated with it.
    authenticationBytes =
      HKDF<SHA256>.expand(
        pseudoRandomKey: SymmetricKey(data: tagBytes),
        info: Array("vlog account authentication".utf8), outputByteCount: 32
      ).bytes
  }

  /// These keys at `epoch` with `contentBytes` in place of their content key.
  private func with(epoch: UInt64, contentBytes: [UInt8]) -> AccountKeys {
    AccountKeys(
      epoch: epoch, contentBytes: contentBytes, tagBytes: tagBytes, vouchingBytes: vouchingBytes,
      rekeyedAt: rekeyedAt)
  }

  /// The HPKE suite of the keys' seals: X25519, HKDF-SHA256, ChaCha20-Poly1305.
  private static var suite: HPKE.Ciphersuite {
    HPKE.Ciphersuite(kem: .Curve25519_HKDF_SHA256, kdf: .HKDF_SHA256, aead: .chaChaPoly)
  }

  /// The keys sealed to `publicKey` (a password's or a recovery key's) for the account
  /// `username`: what the server stores, 32 bytes of encapsulated key then the ciphertext of
  /// ``rawRepresentation`` (160 bytes in all; 120 for keys made before they had a vouching
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
    guard NewAccountKeys.sealedSizes.contains(sealed.count) else {
      throw AccountKeyError(
        "sealed account keys are \(NewAccountKeys.sealedBytes) bytes (or "
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
    let link = try ChaChaPoly.seal(
      bytes, using: contentKey, authenticating: Self.linkData(epoch + 1)
    ).combined
    return (next, Array(link))
  }

  /// The next epoch's keys with no way to them from these: a new random content key, a new
  /// random vouching key, the same tag key, and no link. A device holding these (a lost
  /// phone's) cannot follow: it opens nothing wrapped by the new content key, and every note's
  /// and attachment's key is renewed under it (``ObjectKey/renewed(random:)``), so that nothing
  /// sealed later opens with a key these unwrap. Nor can it vouch for public keys any more,
  /// nor make the anchors of keys a device would take in place of these.
  public func rekeyed(random: (Int) -> [UInt8]) throws -> AccountKeys {
    let bytes = random(64)
    guard bytes.count == 64 else {
      throw AccountKeyError("a re-keying needs 64 random bytes, got \(bytes.count)")
    }
    return AccountKeys(
      epoch: epoch + 1, contentBytes: Array(bytes.prefix(32)), tagBytes: tagBytes,
      vouchingBytes: Array(bytes.suffix(32)), rekeyedAt: epoch + 1)
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

/// The key of one note or attachment: random, made on the device that creates the object,
/// wrapped by the account's content key on the server, and erased with the object. A note's
/// key seals the values of its events; an attachment's seals its metadata and its bytes.
public struct ObjectKey: @unchecked Sendable, Equatable {
  /// 32 bytes, kept as the key itself: made once, not at each use. (`SymmetricKey` is not
  /// declared `Sendable`, but it is an immutable value: nothing mutates its bytes once made,
  /// so sharing it between threads is safe.)
  let key: SymmetricKey
  /// The keys it had before, newest first: each re-keying of the account
  /// (``AccountKeys/rekeyed(random:)``) gives every note and attachment a new key for what is
  /// sealed from then on, and keeps the old ones to open what they sealed.
  let older: [SymmetricKey]

  /// The most keys one object has: one, and one for each re-keying.
  public static let maximumGenerations = 64

  init(_ key: SymmetricKey, older: [SymmetricKey] = []) {
    self.key = key
    self.older = older
  }

  /// This object's key after a re-keying: a new random one seals from now on, and this one,
  /// with those before it, opens what they sealed.
  ///
  /// - Throws: ``AccountKeyError`` past ``maximumGenerations``.
  public func renewed(random: (Int) -> [UInt8]) throws(AccountKeyError) -> ObjectKey {
    guard older.count + 2 <= Self.maximumGenerations else {
      throw AccountKeyError(
        "a key has been renewed \(older.count + 1) times; at most \(Self.maximumGenerations - 1)")
    }
    return ObjectKey(try ObjectKey(random: random).key, older: [key] + older)
  }

  /// A new key from 32 bytes of `random`.
  public init(random: (Int) -> [UInt8]) throws(AccountKeyError) {
    let bytes = random(32)
    guard bytes.count == 32 else {
      throw AccountKeyError("an object key needs 32 random bytes, got \(bytes.count)")
    }
    key = SymmetricKey(data: bytes)
    older = []
  }

  /// `plain` sealed (ChaCha20-Poly1305, a random nonce) and bound to `context` — the event's
  /// stamp, kind and ids — so that it opens only there: 28 bytes more than `plain`.
  public func seal(_ plain: [UInt8], context: [UInt8]) throws -> [UInt8] {
    Array(try seal(plain, context: context, nonce: nil))
  }

  /// `plain` sealed as ``seal(_:context:)`` seals it, with `nonce`: 12 bytes from a
  /// cryptographically secure generator, drawn with others at once rather than one call to
  /// the system's generator for each seal, and used for nothing else.
  func seal(_ plain: [UInt8], context: some DataProtocol, nonce: ArraySlice<UInt8>?) throws
    -> Data
  {
    try ChaChaPoly.seal(
      plain, using: key, nonce: nonce.map { try ChaChaPoly.Nonce(data: $0) },
      authenticating: context
    ).combined
  }

  /// What ``seal(_:context:)`` sealed with this key in `context`.
  ///
  /// - Throws: ``AccountKeyError`` when it does not open: another key or context, or bytes
  ///   changed.
  public func open(_ sealed: [UInt8], context: [UInt8]) throws(AccountKeyError) -> [UInt8] {
    Array(try open(sealed[...], context: context))
  }

  /// What ``seal(_:context:)`` sealed with this key in `context`, from `sealed`, a part of a
  /// larger buffer.
  func open(_ sealed: ArraySlice<UInt8>, context: some DataProtocol) throws(AccountKeyError)
    -> Data
  {
    do {
      let box = try ChaChaPoly.SealedBox(combined: sealed)
      do {
        return try ChaChaPoly.open(box, using: key, authenticating: context)
      } catch {
        // Sealed before a re-keying: by a key this object had then.
        for older in older {
          if let opened = try? ChaChaPoly.open(box, using: older, authenticating: context) {
            return opened
          }
        }
        throw error
      }
    } catch {
      throw AccountKeyError("a sealed value does not open with its object's key")
    }
  }

  /// The bytes of `attachment` (this key's attachment), sealed as the server stores them:
  /// padded (``Padding``), then ChaCha20-Poly1305 under a key drawn from this one, bound to the
  /// attachment's id: at most ``SealedBlob/overhead`` bytes more than a Padmé size of `bytes`.
  ///
  /// The seal is deterministic: its nonce is a keyed hash of the clear bytes' SHA-256
  /// (`attachment.blobHash`), so sealing the same bytes again — a retried upload, a restart
  /// between the upload and the push — gives the same ciphertext and the same hash, and one
  /// key never seals two different plaintexts under one nonce.
  ///
  /// - Parameters:
  ///   - bytes: The attachment's bytes, whose SHA-256 is `attachment.blobHash`.
  ///   - attachment: The attachment whose key this is.
  public func sealBlob(_ bytes: [UInt8], of attachment: Attachment) throws -> [UInt8] {
    // Padded bytes draw their nonce apart from the unpadded ones versions before sealed: the
    // same bytes sealed both ways must not share a nonce under one key.
    let nonce = HMAC<SHA256>.authenticationCode(
      for: attachment.blobHash.bytes, using: subkey("vlog blob nonce, padded"))
    return Array(
      try ChaChaPoly.seal(
        Padding.paddedBlob(bytes), using: subkey("vlog blob"),
        nonce: ChaChaPoly.Nonce(data: Array(nonce)[..<12]),
        authenticating: Self.blobContext(attachment.id)
      ).combined)
  }

  /// The bytes of `attachment` that ``sealBlob(_:of:)`` sealed, checked against the
  /// attachment's clear hash.
  ///
  /// - Throws: ``AccountKeyError`` when they do not open with this key as that attachment's,
  ///   or are not the bytes the attachment names.
  public func openBlob(_ sealed: [UInt8], of attachment: Attachment) throws(AccountKeyError)
    -> [UInt8]
  {
    var opened: [UInt8]?
    if let box = try? ChaChaPoly.SealedBox(combined: sealed) {
      // With the key the attachment has, or one it had before a re-keying.
      for key in [key] + older where opened == nil {
        opened = try? Array(
          ChaChaPoly.open(
            box, using: Self.subkey("vlog blob", of: key),
            authenticating: Self.blobContext(attachment.id)))
      }
    }
    guard let opened else {
      throw AccountKeyError("the bytes of attachment \(attachment.id) do not open with its key")
    }
    // Bytes sealed before padding are the attachment's as they are; others, once unpadded.
    let names = { (bytes: ArraySlice<UInt8>) in
      Array(SHA256.hash(data: bytes)) == attachment.blobHash.bytes
    }
    if names(opened[...]) { return opened }
    guard let bytes = Padding.blobBytes(opened), names(bytes) else {
      throw AccountKeyError(
        "the bytes of attachment \(attachment.id) open, but are not the bytes it names")
    }
    return Array(bytes)
  }

  private func subkey(_ purpose: String) -> SymmetricKey {
    Self.subkey(purpose, of: key)
  }

  private static func subkey(_ purpose: String, of key: SymmetricKey) -> SymmetricKey {
    HKDF<SHA256>.expand(pseudoRandomKey: key, info: Array(purpose.utf8), outputByteCount: 32)
  }

  private static func blobContext(_ attachment: AttachmentID) -> [UInt8] {
    Array("vlog blob\u{0}".utf8) + attachment.identifier.bytes
  }
}

/// The name under which a server stores an encrypted account's attachment bytes: the SHA-256
/// and size of the bytes as ``ObjectKey/sealBlob(_:of:)`` sealed them, which the attachment's
/// sealed addition carries in clear in place of the clear bytes' own.
public struct SealedBlob: Sendable, Hashable {
  /// The SHA-256 of the sealed bytes.
  public let hash: BlobHash
  /// The number of sealed bytes: the clear ones padded, and the nonce and tag.
  public let byteCount: Int

  /// A name of sealed bytes.
  public init(hash: BlobHash, byteCount: Int) {
    self.hash = hash
    self.byteCount = byteCount
  }

  /// The name of `sealed`, the bytes ``ObjectKey/sealBlob(_:of:)`` returned.
  public init(naming sealed: [UInt8]) {
    hash = BlobHash(bytes: Array(SHA256.hash(data: sealed)))!
    byteCount = sealed.count
  }

  /// What sealing adds to the padded bytes: a nonce (12) and a tag (16).
  public static let overhead = 28
}

/// Why an encrypted account's key could not be made, read or opened.
public struct AccountKeyError: Error, Sendable, Equatable, CustomStringConvertible {
  /// What is wrong.
  public let description: String
  /// Whether the account was re-keyed since the epoch this device holds
  /// (``AccountKeys/rekeyed(random:)``): no link leads to its keys, which open with the
  /// password (or the recovery key) alone.
  public let keysReplaced: Bool
  /// Whether the keys changed while this device used them: a later attempt may succeed. Not
  /// a verdict on what was being opened.
  let changedMeanwhile: Bool

  init(_ description: String, keysReplaced: Bool = false, changedMeanwhile: Bool = false) {
    self.description = description
    self.keysReplaced = keysReplaced
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
