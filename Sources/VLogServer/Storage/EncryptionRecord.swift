internal import LMDB
internal import VLogWire

/// What the server keeps of an end-to-end encrypted account's keys: public keys, and the
/// account's keys sealed to them, which only the account's password or recovery key opens on a
/// device; and the recovery key's sign-in secret, hashed as passwords are. Nothing here opens
/// a note: the server stores it for the account's devices.
struct EncryptionRecord: Sendable, Equatable {
  /// The epoch of the account's current content key.
  var epoch: UInt64
  /// The public key of the password's key pair (32 bytes).
  var passwordPublicKey: [UInt8]
  /// The public key of the recovery key's key pair (32 bytes).
  var recoveryPublicKey: [UInt8]
  /// The account's current keys sealed to the password's public key (of a size
  /// `NewAccountKeys.isSealedSize(_:)` takes: 161 bytes and 40 for each retired event key).
  var sealedForPassword: [UInt8]
  /// The account's current keys sealed to the recovery key's public key (as large).
  var sealedForRecovery: [UInt8]
  /// What the password, and the recovery key, vouch for the keys with (32 bytes each; empty in
  /// a record of format 1, written before anchors).
  var passwordAnchor: [UInt8]
  var recoveryAnchor: [UInt8]
  /// What the account's devices vouch for the epoch and the two public keys with (32 bytes;
  /// empty in a record of format 1 or 2, written before a device vouched for them, until a
  /// recovery sets it).
  var keysAuthenticator: [UInt8]
  /// How the devices stretch the password (version 1, a salt from the name, in a record of
  /// format 1 to 3).
  var keyDerivation: KeyDerivation
  /// The recovery key's sign-in secret's scrypt hash.
  var recoverySecret: PasswordHash
  /// The public key the account's devices sign their writes with (32 bytes,
  /// `RequestSignature`); empty for an account an older device made, until it is re-keyed,
  /// whose writes a token alone then makes.
  var requestKey: [UInt8] = []
  /// Whether a note's or attachment's key was erased since the last rotation. Kept beside the
  /// record (``encoded`` leaves it out): a push sets it, a rotation clears it.
  var rotationDue = false

  /// The record of a new account's keys, with the recovery secret hashed already.
  init(_ keys: NewAccountKeys, recoverySecret: PasswordHash) throws(WireError) {
    epoch = 1
    passwordPublicKey = try NewAccountKeys.bytes(
      keys.passwordPublicKey, "keys.passwordPublicKey", count: NewAccountKeys.publicKeyBytes)
    recoveryPublicKey = try NewAccountKeys.bytes(
      keys.recoveryPublicKey, "keys.recoveryPublicKey", count: NewAccountKeys.publicKeyBytes)
    (sealedForPassword, sealedForRecovery) = try NewAccountKeys.seals(
      keys.sealedForPassword, keys.sealedForRecovery, "keys.sealedForPassword",
      "keys.sealedForRecovery")
    passwordAnchor = try NewAccountKeys.bytes(
      keys.passwordAnchor, "keys.passwordAnchor", count: NewAccountKeys.anchorBytes)
    recoveryAnchor = try NewAccountKeys.bytes(
      keys.recoveryAnchor, "keys.recoveryAnchor", count: NewAccountKeys.anchorBytes)
    keysAuthenticator = try NewAccountKeys.bytes(
      keys.keysAuthenticator, "keys.keysAuthenticator",
      count: NewAccountKeys.authenticatorBytes)
    keyDerivation = try keys.keyDerivation?.validated("keys.keyDerivation") ?? .versionOne
    self.recoverySecret = recoverySecret
    requestKey =
      try keys.requestKey.map { key throws(WireError) in
        try NewAccountKeys.bytes(key, "keys.requestKey", count: RequestSignature.publicKeyBytes)
      } ?? []
  }

  /// The answer to `GET /v1/accounts/current/keys`, with the links a device asked for.
  func body(links: [[UInt8]] = []) -> AccountKeysBody {
    AccountKeysBody(
      epoch: epoch, passwordPublicKey: passwordPublicKey, recoveryPublicKey: recoveryPublicKey,
      sealedForPassword: sealedForPassword, sealedForRecovery: sealedForRecovery,
      passwordAnchor: passwordAnchor, recoveryAnchor: recoveryAnchor, rotationDue: rotationDue,
      links: links, keysAuthenticator: keysAuthenticator.isEmpty ? nil : keysAuthenticator,
      requestKey: requestKey.isEmpty ? nil : requestKey)
  }

  /// Whether a write to the account (`method` on `route`, with `body`) is one of its
  /// devices': signed, in `signature` (the `VLog-Signature` header), by the private half of
  /// ``requestKey`` — or the account has no request key yet.
  func admits(signature: String?, method: String, route: String, body: [UInt8]) -> Bool {
    requestKey.isEmpty
      || RequestSignature.isValid(
        signature, method: method, route: route, body: body, publicKey: requestKey)
  }

  /// The record with the keys sealed to a new password.
  func resealed(by seal: PasswordSeal.Checked) -> EncryptionRecord {
    var next = self
    next.passwordPublicKey = seal.passwordPublicKey
    next.sealedForPassword = seal.sealedForPassword
    next.passwordAnchor = seal.passwordAnchor
    next.keysAuthenticator = seal.keysAuthenticator
    next.keyDerivation = seal.keyDerivation
    return next
  }

  /// The record after `rotation`: the next epoch, its seals, no rotation due.
  func rotated(by rotation: KeyRotation.Checked, recoverySecret: PasswordHash?)
    -> EncryptionRecord
  {
    var next = self
    next.epoch = rotation.nextEpoch
    next.sealedForPassword = rotation.sealedForPassword
    next.sealedForRecovery = rotation.sealedForRecovery
    next.keysAuthenticator = rotation.keysAuthenticator
    if let anchor = rotation.passwordAnchor { next.passwordAnchor = anchor }
    if let key = rotation.requestKey { next.requestKey = key }
    if let recovery = rotation.recovery, let recoverySecret {
      next.recoveryPublicKey = recovery.recoveryPublicKey
      next.recoveryAnchor = recovery.recoveryAnchor
      next.recoverySecret = recoverySecret
    }
    next.rotationDue = false
    return next
  }

  /// The stored form, the same on both backends: a format byte (7), the epoch (8 bytes,
  /// big-endian), the two public keys, the two seals (each after its length, two bytes,
  /// big-endian), the two
  /// anchors, the keys' authenticator's length (a byte: 0 or 32) and bytes, the key derivation
  /// (version, log₂ N, r, p, the salt's length: a byte each, then the salt), the request key's
  /// length (a byte: 0 or 32) and bytes, then the recovery secret's hash. Format 6 had a byte
  /// for each seal's length; format 5 no request key either; format 4 seals of 120 bytes and no lengths; format 3 no key
  /// derivation; format 2 no authenticator; format 1 no anchors either.
  var encoded: [UInt8] {
    var bytes: [UInt8] = [7]
    BigEndian.append(epoch, to: &bytes)
    bytes += passwordPublicKey + recoveryPublicKey
    for seal in [sealedForPassword, sealedForRecovery] {
      BigEndian.append(UInt16(clamping: seal.count), to: &bytes)
      bytes += seal
    }
    bytes += passwordAnchor + recoveryAnchor
    bytes.append(UInt8(keysAuthenticator.count))
    bytes += keysAuthenticator
    let salt = keyDerivation.saltBytes
    bytes += [keyDerivation.version, keyDerivation.logRounds, keyDerivation.blockSize]
      .map { UInt8(clamping: $0) }
    bytes += [UInt8(clamping: keyDerivation.parallelism), UInt8(clamping: salt.count)] + salt
    bytes.append(UInt8(clamping: requestKey.count))
    bytes += requestKey
    bytes += recoverySecret.encoded
    return bytes
  }

  /// Reads what ``encoded`` wrote, in format 7 to 1; nil for bytes of another form.
  init?(decoding bytes: some Collection<UInt8>) {
    let bytes = Array(bytes)
    guard let format = bytes.first, (1...7).contains(format),
      let epoch = BigEndian.read(UInt64.self, from: bytes, at: 1)
    else { return nil }
    var offset = 9
    /// The next `count` bytes, or nil past the end.
    func take(_ count: Int) -> [UInt8]? {
      guard count >= 0, bytes.count - offset >= count else { return nil }
      defer { offset += count }
      return Array(bytes[offset..<(offset + count)])
    }
    /// A length byte, then as many bytes, which must be of one of `counts`.
    func sized(_ counts: [Int]) -> [UInt8]? {
      guard let length = take(1)?.first, counts.contains(Int(length)) else { return nil }
      return take(Int(length))
    }
    /// A seal after its length: a byte in formats 5 and 6, two (big-endian) from format 7.
    func seal() -> [UInt8]? {
      guard format >= 7 else {
        return sized([
          NewAccountKeys.sealedBytesBeforeRetiring, NewAccountKeys.sealedBytesBeforeVouching,
        ])
      }
      guard let length = take(2), case let count = Int(length[0]) << 8 | Int(length[1]),
        NewAccountKeys.isSealedSize(count)
      else { return nil }
      return take(count)
    }
    let before = NewAccountKeys.sealedBytesBeforeVouching
    guard let passwordKey = take(NewAccountKeys.publicKeyBytes),
      let recoveryKey = take(NewAccountKeys.publicKeyBytes),
      let forPassword = format >= 5 ? seal() : take(before),
      let forRecovery = format >= 5 ? seal() : take(before),
      let anchors = take(format >= 2 ? 2 * NewAccountKeys.anchorBytes : 0),
      let authenticator = format >= 3 ? sized([0, NewAccountKeys.authenticatorBytes]) : []
    else { return nil }
    keyDerivation = .versionOne
    if format >= 4 {
      guard let fields = take(5), let salt = take(Int(fields[4])) else { return nil }
      let derivation = KeyDerivation(
        version: Int(fields[0]), logRounds: Int(fields[1]), blockSize: Int(fields[2]),
        parallelism: Int(fields[3]), salt: salt)
      guard let valid = try? derivation.validated() else { return nil }
      keyDerivation = valid
    }
    guard let requestKey = format >= 6 ? sized([0, RequestSignature.publicKeyBytes]) : [] else {
      return nil
    }
    self.requestKey = requestKey
    guard offset < bytes.count, let hash = PasswordHash(decoding: bytes[offset...]) else {
      return nil
    }
    self.epoch = epoch
    passwordPublicKey = passwordKey
    recoveryPublicKey = recoveryKey
    sealedForPassword = forPassword
    sealedForRecovery = forRecovery
    passwordAnchor = Array(anchors.prefix(NewAccountKeys.anchorBytes))
    recoveryAnchor = Array(anchors.dropFirst(NewAccountKeys.anchorBytes))
    keysAuthenticator = authenticator
    recoverySecret = hash
  }
}
