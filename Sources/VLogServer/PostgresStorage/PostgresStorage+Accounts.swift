internal import NIOCore
internal import PostgresNIO
internal import VLog
internal import VLogWire

/// Accounts and sign-in tokens.
extension PostgresStorage {
  func createAccount(named name: String, password: PasswordHash, encryption: EncryptionRecord?)
    async throws
  {
    try await transaction { [self] connection in
      let rows = try await connection.query(
        """
        INSERT INTO vlog_accounts (name, password)
        VALUES (\(name), \(ByteBuffer(bytes: password.encoded)))
        ON CONFLICT (name) DO NOTHING RETURNING number
        """, logger: logger)
      var number: Int64?
      for try await value in rows.decode(Int64.self) { number = value }
      guard let number else { throw StorageError.accountExists(name) }
      try await connection.query(
        """
        INSERT INTO vlog_heads (account, last_sequence, digest)
        VALUES (\(number), 0, \(ByteBuffer(bytes: EventSetDigest.empty.bytes)))
        """, logger: logger)
      if let encryption {
        try await connection.query(
          """
          INSERT INTO vlog_account_keys (account, record)
          VALUES (\(number), \(ByteBuffer(bytes: encryption.encoded)))
          """, logger: logger)
      }
    }
  }

  func account(named name: String) async throws -> AccountRecord? {
    try await withConnection { [self] connection in
      let rows = try await connection.query(
        "SELECT number, password FROM vlog_accounts WHERE name = \(name)", logger: logger)
      for try await (number, password) in rows.decode((Int64, ByteBuffer).self) {
        guard let number = UInt64(exactly: number),
          let hash = PasswordHash(decoding: Array(password.readableBytesView))
        else { return nil }
        return AccountRecord(number: number, name: name, password: hash)
      }
      return nil
    }
  }

  func storeToken(hash: [UInt8], account: UInt64, expiresAt milliseconds: Int64) async throws {
    _ = try await withConnection { [self] connection in
      do {
        let rows = try await connection.query(
          """
          INSERT INTO vlog_tokens (hash, account, expires_at)
          VALUES (\(ByteBuffer(bytes: hash)), \(Int64(clamping: account)), \(milliseconds))
          ON CONFLICT (hash) DO UPDATE SET account = EXCLUDED.account, expires_at = EXCLUDED.expires_at
          """, logger: logger)
        for try await _ in rows {}
      } catch {
        throw Self.deletedAccount(error)
      }
    }
  }

  func token(hash: [UInt8]) async throws -> TokenRecord? {
    try await tokens(hashes: [hash]).first
  }

  func tokens(hashes: [[UInt8]]) async throws -> [TokenRecord] {
    let keys = hashes.map { ByteBuffer(bytes: $0) }
    return try await withConnection { [self] connection in
      let rows = try await connection.execute(TokensQuery(hashes: keys), logger: logger)
      var found: [TokenRecord] = []
      for try await (hash, account, expiry) in rows {
        guard let account = UInt64(exactly: account) else { continue }
        found.append(
          TokenRecord(hash: Array(hash.readableBytesView), account: account, expiresAt: expiry))
      }
      return found
    }
  }

  func account(number: UInt64) async throws -> AccountRecord? {
    try await withConnection { [self] connection in
      let rows = try await connection.query(
        "SELECT name, password FROM vlog_accounts WHERE number = \(Int64(clamping: number))",
        logger: logger)
      for try await (name, password) in rows.decode((String, ByteBuffer).self) {
        guard let hash = PasswordHash(decoding: Array(password.readableBytesView)) else {
          return nil
        }
        return AccountRecord(number: number, name: name, password: hash)
      }
      return nil
    }
  }

  func tokens(of account: UInt64) async throws -> [TokenRecord] {
    try await withConnection { [self] connection in
      let rows = try await connection.query(
        "SELECT hash, expires_at FROM vlog_tokens WHERE account = \(Int64(clamping: account))",
        logger: logger)
      var tokens: [TokenRecord] = []
      for try await (hash, expiry) in rows.decode((ByteBuffer, Int64).self) {
        tokens.append(
          TokenRecord(hash: Array(hash.readableBytesView), account: account, expiresAt: expiry))
      }
      return tokens
    }
  }

  func setPassword(
    account: UInt64, password: PasswordHash, keeping: [UInt8]?, seal: PasswordSeal.Checked?
  ) async throws {
    let number = Int64(clamping: account)
    try await transaction { [self] connection in
      if let seal { try await reseal(account: number, by: seal, on: connection) }
      let rows = try await connection.query(
        """
        UPDATE vlog_accounts SET password = \(ByteBuffer(bytes: password.encoded))
        WHERE number = \(number) RETURNING number
        """, logger: logger)
      var updated = false
      for try await _ in rows { updated = true }
      guard updated else { throw StorageError.accountDeleted }
      try await connection.query(
        """
        DELETE FROM vlog_tokens
        WHERE account = \(number) AND hash IS DISTINCT FROM \(keeping.map { ByteBuffer(bytes: $0) })
        """, logger: logger)
      try await notify(.passwordChanged(account: account, keeping: keeping), on: connection)
    }
  }

  func serverSecret() async throws -> [UInt8] {
    var generator = SystemRandomNumberGenerator()
    let made = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
    return try await withConnection { [self] connection in
      try await connection.query(
        """
        INSERT INTO vlog_server_secret (secret) VALUES (\(ByteBuffer(bytes: made)))
        ON CONFLICT DO NOTHING
        """, logger: logger)
      let rows = try await connection.query(
        "SELECT secret FROM vlog_server_secret", logger: logger)
      for try await secret in rows.decode(ByteBuffer.self) {
        return Array(secret.readableBytesView)
      }
      throw StorageError.damaged("the server's secret is missing")
    }
  }

  func rehashPassword(account: UInt64, from current: PasswordHash, to new: PasswordHash)
    async throws -> Bool
  {
    try await withConnection { [self] connection in
      let rows = try await connection.query(
        """
        UPDATE vlog_accounts SET password = \(ByteBuffer(bytes: new.encoded))
        WHERE number = \(Int64(clamping: account))
          AND password = \(ByteBuffer(bytes: current.encoded))
        RETURNING number
        """, logger: logger)
      var updated = false
      for try await _ in rows { updated = true }
      return updated
    }
  }

  func deleteAccount(_ account: UInt64) async throws {
    let number = Int64(clamping: account)
    try await transaction { [self] connection in
      // The head row's lock waits for a push in progress and makes the next one find no
      // account; the account row's, for a blob being stored.
      try await connection.query(
        "SELECT 1 FROM vlog_heads WHERE account = \(number) FOR UPDATE", logger: logger)
      for table in [
        "vlog_events", "vlog_objects", "vlog_deletions", "vlog_blob_references", "vlog_fields",
        "vlog_superseded", "vlog_blobs",
      ] {
        try await connection.query(
          PostgresQuery(
            unsafeSQL: "DELETE FROM \(table) WHERE account = $1",
            binds: {
              var binds = PostgresBindings()
              binds.append(number)
              return binds
            }()), logger: logger)
      }
      // Tokens and the head go with the account row (ON DELETE CASCADE).
      let rows = try await connection.query(
        "DELETE FROM vlog_accounts WHERE number = \(number) RETURNING number", logger: logger)
      var deleted = false
      for try await _ in rows { deleted = true }
      guard deleted else { throw StorageError.accountDeleted }
      try await notify(.accountDeleted(account: account), on: connection)
    }
  }

  @discardableResult
  func deleteToken(hash: [UInt8]) async throws -> Bool {
    try await transaction { [self] connection in
      let rows = try await connection.query(
        "DELETE FROM vlog_tokens WHERE hash = \(ByteBuffer(bytes: hash)) RETURNING account",
        logger: logger)
      var account: Int64?
      for try await number in rows.decode(Int64.self) { account = number }
      guard let account, let number = UInt64(exactly: account) else { return false }
      try await notify(.tokenRevoked(account: number, hash: hash), on: connection)
      return true
    }
  }
}
