internal import Foundation
public import VLog

/// The keys of an encrypted account's notes and attachments, each wrapped by the account's
/// content key of `epoch`: the body of `POST /v1/object-keys` and the answer of
/// `POST /v1/object-keys/lookup`. Keys are the objects' ids (UUIDs), values base64.
///
/// The server cannot open them: it keeps each until the object's deletion is stored, and then
/// erases it in the same transaction.
public struct ObjectKeys: Codable, Sendable, Hashable {
  /// The epoch of the content key that wrapped them.
  public var epoch: UInt64
  /// Each object's wrapped key (60 bytes), by id.
  public var keys: [String: String]

  /// The size of a wrapped key of an account never re-keyed: a 12-byte nonce, 32 bytes of
  /// key, a 16-byte tag. Each re-keying adds 32 bytes: the object's key before it.
  public static let wrappedBytes = 60

  /// The sizes a wrapped key may have: ``wrappedBytes``, and 32 more for each re-keying, up to
  /// 64 keys in all.
  public static func isWrappedSize(_ count: Int) -> Bool {
    count >= wrappedBytes && (count - wrappedBytes) % 32 == 0
      && (count - wrappedBytes) / 32 < maximumGenerations
  }

  /// The most keys one wrapped key holds: one, and one for each re-keying.
  public static let maximumGenerations = 64

  /// Creates the message from the keys' bytes.
  public init(epoch: UInt64, keys: [Identifier: [UInt8]]) {
    self.epoch = epoch
    self.keys = Dictionary(
      uniqueKeysWithValues: keys.map { ($0.key.description, Data($0.value).base64EncodedString()) }
    )
  }

  enum CodingKeys: String, CodingKey { case epoch, keys }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: ["epoch", "keys"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    epoch = try container.decode(UInt64.self, forKey: .epoch)
    keys = try container.decode([String: String].self, forKey: .keys)
  }

  /// The keys' bytes by object, checked: at most `maximum` of them, each id a UUID and each
  /// value base64 of a size ``isWrappedSize(_:)`` allows.
  ///
  /// - Throws: ``WireError`` naming the field, for example `keys.<id>`.
  public func validated(maximum: Int) throws(WireError) -> [Identifier: [UInt8]] {
    try Self.validate(keys, field: "keys", maximum: maximum)
  }

  /// Checks wrapped keys by object id.
  static func validate(_ keys: [String: String], field: String, maximum: Int) throws(WireError)
    -> [Identifier: [UInt8]]
  {
    guard keys.count <= maximum else {
      throw WireError(field, "\(keys.count) keys; one call carries at most \(maximum)")
    }
    var result: [Identifier: [UInt8]] = [:]
    result.reserveCapacity(keys.count)
    // In order of the ids, so that the first one at fault is named whatever the JSON's order.
    for (text, value) in keys.sorted(by: { $0.key < $1.key }) {
      guard let object = Identifier(text) else {
        throw WireError(field, "'\(text)' is not an object id (a UUID)")
      }
      guard let data = Data(base64Encoded: value) else {
        throw WireError("\(field).\(text)", "not base64")
      }
      guard isWrappedSize(data.count) else {
        throw WireError(
          "\(field).\(text)",
          "\(data.count) bytes, expected \(wrappedBytes), or 32 more for each re-keying")
      }
      let bytes = Array(data)
      guard result.updateValue(bytes, forKey: object) == nil else {
        throw WireError(field, "object \(object) is named twice")
      }
    }
    return result
  }
}

/// The body of `POST /v1/object-keys/lookup`: the notes and attachments whose keys a device
/// needs.
public struct ObjectKeysLookup: Codable, Sendable, Hashable {
  /// The objects' ids (UUIDs).
  public var objects: [String]

  /// Creates the body.
  public init(objects: [Identifier]) { self.objects = objects.map(\.description) }

  enum CodingKeys: String, CodingKey { case objects }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: ["objects"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    objects = try container.decode([String].self, forKey: .objects)
  }

  /// The ids, checked: at most `maximum`, each a UUID.
  ///
  /// - Throws: ``WireError`` naming the field, for example `objects[2]`.
  public func validated(maximum: Int) throws(WireError) -> [Identifier] {
    guard objects.count <= maximum else {
      throw WireError("objects", "\(objects.count) ids; one lookup asks at most \(maximum)")
    }
    var result: [Identifier] = []
    result.reserveCapacity(objects.count)
    for (index, text) in objects.enumerated() {
      guard let object = Identifier(text) else {
        throw WireError("objects[\(index)]", "'\(text)' is not an object id (a UUID)")
      }
      result.append(object)
    }
    return result
  }
}

/// The answer to `GET /v1/object-keys`: a page of every key the account holds, in order of the
/// objects' ids, to re-wrap them all at a rotation.
public struct ObjectKeysPage: Codable, Sendable, Hashable {
  /// The epoch of the content key that wrapped them.
  public var epoch: UInt64
  /// Each object's wrapped key (60 bytes, base64), by id.
  public var keys: [String: String]
  /// Whether keys remain after this page: ask again with `after` the page's last id.
  public var more: Bool

  /// Creates the page from the keys' bytes.
  public init(epoch: UInt64, keys: [Identifier: [UInt8]], more: Bool) {
    self.epoch = epoch
    self.keys = ObjectKeys(epoch: epoch, keys: keys).keys
    self.more = more
  }

  enum CodingKeys: String, CodingKey { case epoch, keys, more }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: ["epoch", "keys", "more"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    epoch = try container.decode(UInt64.self, forKey: .epoch)
    keys = try container.decode([String: String].self, forKey: .keys)
    more = try container.decode(Bool.self, forKey: .more)
  }

  /// The keys' bytes by object, checked.
  ///
  /// - Throws: ``WireError`` naming the field.
  public func validated() throws(WireError) -> [Identifier: [UInt8]] {
    try ObjectKeys.validate(keys, field: "keys", maximum: .max)
  }
}

/// The body of `PUT /v1/accounts/current/keys`: a rotation of the account's content key, from
/// `epoch` to the next (or, bringing forward a record restored from a backup, to the epoch of
/// the keys the devices hold: ``nextEpoch``). It carries the new keys sealed to the password's and the recovery
/// key's public keys, and every note's and attachment's key the account holds, re-wrapped by
/// the new content key; a rotation carries the link from the old content key to the new, a
/// re-keying none (and may replace the recovery key). The server takes it only if its epoch
/// is still `epoch` and the keys cover every object it holds a key of, and then replaces them
/// all in one transaction: the keys wrapped by the old content key are gone.
public struct KeyRotation: Codable, Sendable, Hashable {
  /// The epoch rotated from: the account's current one.
  public var epoch: UInt64
  /// The epoch rotated to, past the next one: that of the keys the account's devices hold,
  /// when a device brings forward a record the server restored from a backup taken before
  /// they rotated. Only with a link. Nil for the next epoch.
  public var nextEpoch: UInt64?
  /// The new keys sealed to the password's public key (base64, of a size
  /// ``NewAccountKeys/isSealedSize(_:)`` takes).
  public var sealedForPassword: String
  /// The new keys sealed to the recovery key's public key (as large, base64): the new
  /// recovery key's, if ``recovery`` replaces it.
  public var sealedForRecovery: String
  /// The new content key sealed by the old one (60 bytes, base64): how a device that holds
  /// the old keys follows. Nil for a re-keying, which no old key leads to.
  public var link: String?
  /// A new recovery key, replacing the account's: its public key, what vouches for the keys
  /// sealed to it, and its sign-in secret. Nil to keep the recovery key.
  public var recovery: NewRecoveryKey?
  /// What the password vouches for the new keys with (32 bytes, base64), replacing the
  /// account's: a re-keying draws a new vouching key, which the anchor covers. Nil to keep it;
  /// only with ``password``.
  public var passwordAnchor: String?
  /// The account's password as the server knows it (an encrypted account's sign-in secret):
  /// required for a re-keying and for a new recovery key, which a token alone must not be
  /// able to make. Nil for a rotation with a link.
  public var password: String?
  /// Every object's key, wrapped by the new content key, by id.
  public var keys: [String: String]
  /// What the account's devices vouch for the new epoch and the two public keys with (32
  /// bytes, base64).
  public var keysAuthenticator: String
  /// The public key the account's devices sign their writes with from now on (32 bytes,
  /// base64, ``RequestSignature``), replacing the account's: a re-keying draws a new one. Nil
  /// to keep it; only with ``password``.
  public var requestKey: String?

  /// The size of a link.
  public static let linkBytes = 60

  /// Creates the body from the bytes.
  public init(
    epoch: UInt64, nextEpoch: UInt64? = nil, sealedForPassword: [UInt8],
    sealedForRecovery: [UInt8], link: [UInt8]?, recovery: NewRecoveryKey? = nil,
    passwordAnchor: [UInt8]? = nil, password: String? = nil, keys: [Identifier: [UInt8]],
    keysAuthenticator: [UInt8], requestKey: [UInt8]? = nil
  ) {
    self.epoch = epoch
    self.nextEpoch = nextEpoch
    self.requestKey = requestKey.map { Data($0).base64EncodedString() }
    self.sealedForPassword = Data(sealedForPassword).base64EncodedString()
    self.sealedForRecovery = Data(sealedForRecovery).base64EncodedString()
    self.link = link.map { Data($0).base64EncodedString() }
    self.recovery = recovery
    self.passwordAnchor = passwordAnchor.map { Data($0).base64EncodedString() }
    self.password = password
    self.keys = ObjectKeys(epoch: epoch + 1, keys: keys).keys
    self.keysAuthenticator = Data(keysAuthenticator).base64EncodedString()
  }

  enum CodingKeys: String, CodingKey {
    case epoch, nextEpoch, sealedForPassword, sealedForRecovery, link, recovery, passwordAnchor
    case password, keys, keysAuthenticator, requestKey
  }

  /// Decodes the JSON types, refusing keys this version does not know; `link` and `recovery`
  /// may be absent, not null.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(
      in: decoder,
      allowed: [
        "epoch", "nextEpoch", "sealedForPassword", "sealedForRecovery", "link", "recovery",
        "passwordAnchor", "password", "keys", "keysAuthenticator", "requestKey",
      ])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    epoch = try container.decode(UInt64.self, forKey: .epoch)
    nextEpoch =
      container.contains(.nextEpoch)
      ? try container.decode(UInt64.self, forKey: .nextEpoch) : nil
    sealedForPassword = try container.decode(String.self, forKey: .sealedForPassword)
    sealedForRecovery = try container.decode(String.self, forKey: .sealedForRecovery)
    link = container.contains(.link) ? try container.decode(String.self, forKey: .link) : nil
    recovery =
      container.contains(.recovery)
      ? try container.decode(NewRecoveryKey.self, forKey: .recovery) : nil
    passwordAnchor =
      container.contains(.passwordAnchor)
      ? try container.decode(String.self, forKey: .passwordAnchor) : nil
    password =
      container.contains(.password) ? try container.decode(String.self, forKey: .password) : nil
    keys = try container.decode([String: String].self, forKey: .keys)
    keysAuthenticator = try container.decode(String.self, forKey: .keysAuthenticator)
    requestKey =
      container.contains(.requestKey)
      ? try container.decode(String.self, forKey: .requestKey) : nil
  }

  /// Encodes the JSON types, leaving out what is nil.
  public func encode(to encoder: any Encoder) throws {
    var container = encoder.container(keyedBy: CodingKeys.self)
    try container.encode(epoch, forKey: .epoch)
    try container.encodeIfPresent(nextEpoch, forKey: .nextEpoch)
    try container.encode(sealedForPassword, forKey: .sealedForPassword)
    try container.encode(sealedForRecovery, forKey: .sealedForRecovery)
    try container.encodeIfPresent(link, forKey: .link)
    try container.encodeIfPresent(recovery, forKey: .recovery)
    try container.encodeIfPresent(passwordAnchor, forKey: .passwordAnchor)
    try container.encodeIfPresent(password, forKey: .password)
    try container.encode(keys, forKey: .keys)
    try container.encode(keysAuthenticator, forKey: .keysAuthenticator)
    try container.encodeIfPresent(requestKey, forKey: .requestKey)
  }

  /// A rotation, checked: its bytes decoded and their sizes right.
  public struct Checked: Sendable, Hashable {
    /// The epoch rotated from.
    public var epoch: UInt64
    /// The epoch rotated to: `epoch` + 1 unless the rotation named a later one.
    public var nextEpoch: UInt64
    /// The new keys sealed to the password's public key.
    public var sealedForPassword: [UInt8]
    /// The new keys sealed to the recovery key's public key.
    public var sealedForRecovery: [UInt8]
    /// The link from the old content key to the new; nil for a re-keying.
    public var link: [UInt8]?
    /// The new recovery key's public key, anchor and sign-in secret; nil to keep it.
    public var recovery: NewRecoveryKey.Checked?
    /// The password's new anchor; nil to keep it.
    public var passwordAnchor: [UInt8]?
    /// The account's password, for a re-keying or a new recovery key.
    public var password: String?
    /// Every object's wrapped key, by id.
    public var keys: [Identifier: [UInt8]]
    /// What vouches for the new epoch and the public keys.
    public var keysAuthenticator: [UInt8]
    /// The devices' new request key; nil to keep it.
    public var requestKey: [UInt8]?
  }

  /// The rotation, checked.
  ///
  /// - Throws: ``WireError`` naming the field that is wrong.
  public func validated() throws(WireError) -> Checked {
    guard epoch < .max else { throw WireError("epoch", "\(epoch) is the last epoch") }
    if let nextEpoch {
      guard nextEpoch > epoch, nextEpoch < .max else {
        throw WireError("nextEpoch", "\(nextEpoch) is not an epoch after \(epoch)")
      }
      guard link != nil else {
        throw WireError("nextEpoch", "a rotation past the next epoch needs a link")
      }
    }
    if let password {
      guard Credentials.passwordLengths.contains(password.unicodeScalars.count) else {
        throw WireError("password", "a password is 8 to 1024 characters long")
      }
    } else if link == nil || recovery != nil || passwordAnchor != nil || requestKey != nil {
      throw WireError(
        "password",
        "a re-keying (no link), a new recovery key, a new anchor or a new request key needs the "
          + "account's password")
    }
    let seals = try NewAccountKeys.seals(
      sealedForPassword, sealedForRecovery, "sealedForPassword", "sealedForRecovery")
    return Checked(
      epoch: epoch, nextEpoch: nextEpoch ?? epoch + 1, sealedForPassword: seals.first,
      sealedForRecovery: seals.second,
      link: try link.map { link throws(WireError) in
        try NewAccountKeys.bytes(link, "link", count: Self.linkBytes)
      },
      recovery: try recovery?.validated(),
      passwordAnchor: try passwordAnchor.map { anchor throws(WireError) in
        try NewAccountKeys.bytes(anchor, "passwordAnchor", count: NewAccountKeys.anchorBytes)
      },
      password: password,
      keys: try ObjectKeys.validate(keys, field: "keys", maximum: .max),
      keysAuthenticator: try NewAccountKeys.bytes(
        keysAuthenticator, "keysAuthenticator", count: NewAccountKeys.authenticatorBytes),
      requestKey: try requestKey.map { key throws(WireError) in
        try NewAccountKeys.bytes(key, "requestKey", count: RequestSignature.publicKeyBytes)
      })
  }
}

/// A recovery key that replaces an encrypted account's, in a re-keying (``KeyRotation``): its
/// public key, what the account's devices vouch for the keys sealed to it with, and its
/// sign-in secret, which the server hashes as it does a password.
public struct NewRecoveryKey: Codable, Sendable, Hashable, CustomStringConvertible {
  /// The recovery key's public key (32 bytes, base64).
  public var recoveryPublicKey: String
  /// What vouches for the keys sealed to it (32 bytes, base64).
  public var recoveryAnchor: String
  /// Its sign-in secret, for `POST /v1/accounts/recovery-keys`.
  public var recoverySecret: String

  /// Creates the body from the bytes.
  public init(recoveryPublicKey: [UInt8], recoveryAnchor: [UInt8], recoverySecret: String) {
    self.recoveryPublicKey = Data(recoveryPublicKey).base64EncodedString()
    self.recoveryAnchor = Data(recoveryAnchor).base64EncodedString()
    self.recoverySecret = recoverySecret
  }

  enum CodingKeys: String, CodingKey { case recoveryPublicKey, recoveryAnchor, recoverySecret }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(
      in: decoder, allowed: ["recoveryPublicKey", "recoveryAnchor", "recoverySecret"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    recoveryPublicKey = try container.decode(String.self, forKey: .recoveryPublicKey)
    recoveryAnchor = try container.decode(String.self, forKey: .recoveryAnchor)
    recoverySecret = try container.decode(String.self, forKey: .recoverySecret)
  }

  /// A new recovery key, checked.
  public struct Checked: Sendable, Hashable {
    /// The public key.
    public var recoveryPublicKey: [UInt8]
    /// What vouches for the keys sealed to it.
    public var recoveryAnchor: [UInt8]
    /// The sign-in secret.
    public var recoverySecret: String
  }

  /// The recovery key, checked.
  ///
  /// - Throws: ``WireError`` naming the field that is wrong.
  public func validated() throws(WireError) -> Checked {
    guard Credentials.passwordLengths.contains(recoverySecret.unicodeScalars.count) else {
      throw WireError("recovery.recoverySecret", "a recovery secret is 8 to 1024 characters long")
    }
    return Checked(
      recoveryPublicKey: try NewAccountKeys.bytes(
        recoveryPublicKey, "recovery.recoveryPublicKey", count: NewAccountKeys.publicKeyBytes),
      recoveryAnchor: try NewAccountKeys.bytes(
        recoveryAnchor, "recovery.recoveryAnchor", count: NewAccountKeys.anchorBytes),
      recoverySecret: recoverySecret)
  }

  /// The key; the secret is not shown.
  public var description: String { "new recovery key (secret hidden)" }
}

/// The answer to `POST /v1/object-keys`: how many of the keys were stored. A key is not stored
/// for an object that holds one already (the first stands: its events are sealed by it) or
/// whose deletion the server holds.
public struct StoredObjectKeys: Codable, Sendable, Hashable {
  /// How many keys were stored.
  public var stored: Int

  /// Creates the answer.
  public init(stored: Int) { self.stored = stored }

  enum CodingKeys: String, CodingKey { case stored }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: ["stored"])
    stored = try decoder.container(keyedBy: CodingKeys.self).decode(Int.self, forKey: .stored)
  }
}
