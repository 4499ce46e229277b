internal import Crypto
internal import Foundation
public import VLog

/// The key of one note or attachment: random, made on the device that creates the object,
/// wrapped by the account's content key on the server, and erased with the object. A note's
/// key seals the values of its events; an attachment's seals its metadata and its bytes.
public struct ObjectKey: @unchecked Sendable, Equatable {
  /// 32 bytes, kept as the key itself: made once, not at each use. (`SymmetricKey` is not
  /// declared `Sendable`, but it is an immutable value: nothing mutates its bytes once made,
  /// so sharing it between threads is safe.)
  let key: SymmetricKey
  /// The keys it had before, newest first: each re-keying of the account
  /// (``AccountKeys/rekeyed(random:retiringBefore:)``) gives every note and attachment a new key for what is
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

  /// `plain` sealed as ``seal(_:context:)`` seals it, under a nonce that is a keyed hash of
  /// `context` and `plain`: the same value sealed in the same context gives the same bytes
  /// (a retried push is the same push, and a server tells it from another event under the
  /// same id), and different values or contexts never share a nonce. `context` names the
  /// event (its stamp), so equal bytes say only that an event was sent again.
  func sealValue(_ plain: [UInt8], context: some DataProtocol) throws -> Data {
    var hash = HMAC<SHA256>(key: subkey("vlog value nonce"))
    withUnsafeBytes(of: UInt64(context.count).bigEndian) { hash.update(data: $0) }
    hash.update(data: context)
    hash.update(data: plain)
    let nonce = Array(hash.finalize())[..<12]
    return try seal(plain, context: context, nonce: nonce)
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
