internal import Foundation
internal import LMDB
internal import VLog
internal import VLogWire

/// Accounts, their passwords and sign-in tokens, in `accounts`, `accountNames`, `tokens` and
/// `accountTokens`.
extension LMDBStorage {
  // MARK: - Accounts and tokens

  /// Creates an account.
  ///
  /// - Throws: ``StorageError`` `accountExists` if the name is taken.
  func createAccount(named name: String, password: PasswordHash, encryption: EncryptionRecord?)
    async throws
  {
    try await onWriter { [self] in
      try write { transaction in
        let key = Array(name.utf8)
        guard try !transaction.containsValue(forKey: key, in: accounts) else {
          throw StorageError.accountExists(name)
        }
        let counterKey = Array("nextAccount".utf8)
        let number =
          try transaction.value(forKey: counterKey, in: meta).flatMap {
            BigEndian.read(UInt64.self, from: $0)
          } ?? 1
        try transaction.put(BigEndian.bytes(number + 1), forKey: counterKey, in: meta)
        try transaction.put(
          BigEndian.bytes(number) + password.encoded, forKey: key, in: accounts)
        try transaction.put(key, forKey: BigEndian.bytes(number), in: accountNames)
        if let encryption {
          try transaction.put(encryption.encoded, forKey: BigEndian.bytes(number), in: accountKeys)
        }
      }
    }
  }

  /// The name and password of an account, by number.
  func account(number: UInt64) async throws -> AccountRecord? {
    try read { transaction in
      guard let name = try transaction.value(forKey: BigEndian.bytes(number), in: accountNames),
        let record = try transaction.value(forKey: name, in: accounts), record.count > 8,
        let password = PasswordHash(decoding: record[8...])
      else { return nil }
      return AccountRecord(
        number: number, name: String(decoding: name, as: UTF8.self), password: password)
    }
  }

  /// An account's tokens.
  func tokens(of account: UInt64) async throws -> [TokenRecord] {
    try read { transaction in
      try tokenHashes(of: account, in: transaction).compactMap { hash in
        guard let record = try transaction.value(forKey: hash, in: tokens), record.count == 16,
          let expiry = BigEndian.read(Int64.self, from: record, at: 8)
        else { return nil }
        return TokenRecord(hash: hash, account: account, expiresAt: expiry)
      }
    }
  }

  /// Replaces an account's password and revokes every token of it but `keeping`.
  func setPassword(
    account: UInt64, password: PasswordHash, keeping: [UInt8]?, seal: PasswordSeal.Checked?
  ) async throws {
    try await onWriter { [self] in
      try write { transaction in
        let name = try self.name(of: account, in: transaction)
        if let seal {
          let record = try checkEpoch(seal.epoch, of: account, in: transaction)
          try transaction.put(
            record.resealed(by: seal).encoded, forKey: BigEndian.bytes(account), in: accountKeys)
        }
        try transaction.put(
          BigEndian.bytes(account) + password.encoded, forKey: name, in: accounts)
        for hash in try tokenHashes(of: account, in: transaction) where hash != keeping {
          _ = try transaction.delete(forKey: hash, in: tokens)
          _ = try transaction.delete(forKey: BigEndian.bytes(account) + hash, in: accountTokens)
        }
      }
    }
    liveFeed.send(.passwordChanged(account: account, keeping: keeping))
  }

  func serverSecret() async throws -> [UInt8] {
    let key = Array("secret".utf8)
    if let secret = try read({ try $0.value(forKey: key, in: meta) }) {
      return Array(secret)
    }
    return try await onWriter { [self] in
      try write { transaction in
        if let secret = try transaction.value(forKey: key, in: meta) { return Array(secret) }
        var generator = SystemRandomNumberGenerator()
        let secret = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        try transaction.put(secret, forKey: key, in: meta)
        return secret
      }
    }
  }

  func rehashPassword(account: UInt64, from current: PasswordHash, to new: PasswordHash)
    async throws -> Bool
  {
    try await onWriter { [self] in
      try write { transaction in
        let name = try self.name(of: account, in: transaction)
        guard let record = try transaction.value(forKey: name, in: accounts),
          Array(record) == BigEndian.bytes(account) + current.encoded
        else { return false }
        try transaction.put(BigEndian.bytes(account) + new.encoded, forKey: name, in: accounts)
        return true
      }
    }
  }

  /// Deletes an account and everything of it — its log and indexes, blobs, tokens, name — in one
  /// transaction. Its number is never given again.
  func deleteAccount(_ account: UInt64) async throws {
    try await onWriter { [self] in
      try write { transaction in
        let name = try self.name(of: account, in: transaction)
        let prefix = BigEndian.bytes(account)
        for hash in try tokenHashes(of: account, in: transaction) {
          _ = try transaction.delete(forKey: hash, in: tokens)
        }
        for database in [
          accountTokens, log, eventIDs, heads, objects, blobReferences, fields, superseded,
          blobs, releasedBlobs, accountKeys, objectKeys, keyLinks,
        ] {
          var keys: [[UInt8]] = []
          try transaction.forEach(in: database, range: .prefix(prefix)) { key, _ in
            keys.append(Array(key))
          }
          for key in keys { _ = try transaction.delete(forKey: key, in: database) }
        }
        _ = try transaction.delete(forKey: prefix, in: accountNames)
        _ = try transaction.delete(forKey: name, in: accounts)
      }
    }
    liveFeed.send(.accountDeleted(account: account))
  }

  /// The stored name of an account that exists.
  ///
  /// - Throws: ``StorageError`` `accountDeleted` when it does not (deleted by another request
  ///   after this one's token was checked).
  func name(of account: UInt64, in transaction: borrowing some Transaction & ~Copyable)
    throws -> [UInt8]
  {
    guard let name = try transaction.value(forKey: BigEndian.bytes(account), in: accountNames)
    else { throw StorageError.accountDeleted }
    return name
  }

  func tokenHashes(
    of account: UInt64, in transaction: borrowing some Transaction & ~Copyable
  )
    throws -> [[UInt8]]
  {
    var hashes: [[UInt8]] = []
    try transaction.forEach(in: accountTokens, range: .prefix(BigEndian.bytes(account))) {
      key, _ in
      if key.count == 40 { hashes.append(Array(key[8...])) }
    }
    return hashes
  }

  /// The account stored under a normalised user name.
  func account(named name: String) async throws -> AccountRecord? {
    try read { transaction in
      guard let record = try transaction.value(forKey: Array(name.utf8), in: accounts),
        record.count > 8, let number = BigEndian.read(UInt64.self, from: record),
        let password = PasswordHash(decoding: record[8...])
      else { return nil }
      return AccountRecord(number: number, name: name, password: password)
    }
  }

  /// Stores the hash of a new token.
  func storeToken(hash: [UInt8], account: UInt64, expiresAt milliseconds: Int64) async throws {
    try await onWriter { [self] in
      try write { transaction in
        _ = try name(of: account, in: transaction)
        try transaction.put(
          BigEndian.bytes(account) + BigEndian.bytes(milliseconds), forKey: hash,
          in: tokens)
        try transaction.put([], forKey: BigEndian.bytes(account) + hash, in: accountTokens)
      }
    }
  }

  /// The account and expiry of a token, by the token's hash.
  func token(hash: [UInt8]) async throws -> TokenRecord? {
    try await tokens(hashes: [hash]).first
  }

  /// The tokens of `hashes` that exist, in one read transaction.
  func tokens(hashes: [[UInt8]]) async throws -> [TokenRecord] {
    try read { transaction in
      try hashes.compactMap { hash in
        guard let record = try transaction.value(forKey: hash, in: tokens), record.count == 16,
          let account = BigEndian.read(UInt64.self, from: record, at: 0),
          let expiry = BigEndian.read(Int64.self, from: record, at: 8)
        else { return nil }
        return TokenRecord(hash: hash, account: account, expiresAt: expiry)
      }
    }
  }

  /// Revokes a token. Returns whether it existed.
  @discardableResult
  func deleteToken(hash: [UInt8]) async throws -> Bool {
    let (existed, account) = try await onWriter { [self] () -> (Bool, UInt64?) in
      try write { transaction in
        guard let record = try transaction.value(forKey: hash, in: tokens) else {
          return (false, nil)
        }
        let account = record.count == 16 ? BigEndian.read(UInt64.self, from: record) : nil
        if let account {
          _ = try transaction.delete(forKey: BigEndian.bytes(account) + hash, in: accountTokens)
        }
        return (try transaction.delete(forKey: hash, in: tokens), account)
      }
    }
    if let account { liveFeed.send(.tokenRevoked(account: account, hash: hash)) }
    return existed
  }
}
