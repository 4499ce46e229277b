internal import NIOCore
internal import PostgresNIO
internal import VLog
internal import VLogWire

/// An encrypted account's keys: its record, its notes' and attachments' keys, the links of its
/// epochs. A write locks the record's row first (`FOR UPDATE`), as a push that erases keys
/// does (``PostgresLogWriter``), so that they apply one at a time and in one order.
extension PostgresStorage {
  func encryption(of account: UInt64) async throws -> EncryptionRecord? {
    try await withConnection { [self] connection in
      try await encryption(of: Int64(clamping: account), on: connection, locking: false)
    }
  }

  private func encryption(of account: Int64, on connection: PostgresConnection, locking: Bool)
    async throws -> EncryptionRecord?
  {
    let rows = try await connection.query(
      locking
        ? "SELECT record, rotation_due FROM vlog_account_keys WHERE account = \(account) FOR UPDATE"
        : "SELECT record, rotation_due FROM vlog_account_keys WHERE account = \(account)",
      logger: logger)
    for try await (bytes, due) in rows.decode((ByteBuffer, Bool).self) {
      guard var record = EncryptionRecord(decoding: bytes.readableBytesView) else {
        throw StorageError.damaged("account \(account)'s keys are not a record of keys")
      }
      record.rotationDue = due
      return record
    }
    return nil
  }

  /// The account's record, locked for this transaction.
  ///
  /// - Throws: ``StorageError`` `keysChanged` if its epoch is not `expected` (or the account is
  ///   not encrypted).
  private func lockedRecord(
    of account: Int64, epoch expected: UInt64, on connection: PostgresConnection
  ) async throws -> EncryptionRecord {
    guard let record = try await encryption(of: account, on: connection, locking: true) else {
      throw StorageError.keysChanged("the account is not end-to-end encrypted")
    }
    guard record.epoch == expected else {
      throw StorageError.keysChanged(
        "the account's keys are at epoch \(record.epoch), not \(expected)")
    }
    return record
  }

  /// Replaces an encrypted account's keys' seal to the password, at its epoch.
  ///
  /// - Throws: ``StorageError`` `keysChanged` if the account's epoch is not the seal's.
  func reseal(account: Int64, by seal: PasswordSeal.Checked, on connection: PostgresConnection)
    async throws
  {
    let record = try await lockedRecord(of: account, epoch: seal.epoch, on: connection)
    try await connection.query(
      """
      UPDATE vlog_account_keys SET record = \(ByteBuffer(bytes: record.resealed(by: seal).encoded))
      WHERE account = \(account)
      """, logger: logger)
  }

  func storeObjectKeys(_ keys: [Identifier: [UInt8]], account: UInt64, epoch: UInt64)
    async throws -> Int
  {
    let account = Int64(clamping: account)
    let pairs = Array(keys)
    return try await transaction { [self] connection in
      _ = try await lockedRecord(of: account, epoch: epoch, on: connection)
      let rows = try await connection.query(
        """
        INSERT INTO vlog_object_keys (account, object, wrapped)
        SELECT \(account), u.object, u.wrapped
        FROM UNNEST(\(pairs.map { ByteBuffer(bytes: $0.key.bytes) })::bytea[],
          \(pairs.map { ByteBuffer(bytes: $0.value) })::bytea[]) AS u(object, wrapped)
        WHERE NOT EXISTS (
          SELECT 1 FROM vlog_deletions AS d
          WHERE d.account = \(account) AND d.object = u.object AND d.sequence IS NOT NULL)
        ON CONFLICT (account, object) DO NOTHING
        RETURNING 1
        """, logger: logger)
      var stored = 0
      for try await _ in rows { stored += 1 }
      return stored
    }
  }

  func objectKeys(of objects: [Identifier], account: UInt64) async throws -> ObjectKeyPage {
    let account = Int64(clamping: account)
    return try await withConnection { [self] connection in
      let epoch = try await encryption(of: account, on: connection, locking: false)?.epoch ?? 0
      let rows = try await connection.query(
        """
        SELECT object, wrapped FROM vlog_object_keys
        WHERE account = \(account) AND object = ANY(\(objects.map { ByteBuffer(bytes: $0.bytes) })::bytea[])
        """, logger: logger)
      return ObjectKeyPage(epoch: epoch, keys: try await Self.keys(rows))
    }
  }

  func objectKeys(account: UInt64, after: Identifier?, limit: Int) async throws -> ObjectKeyPage {
    let account = Int64(clamping: account)
    let start = ByteBuffer(bytes: after?.bytes ?? [])
    return try await withConnection { [self] connection in
      let epoch = try await encryption(of: account, on: connection, locking: false)?.epoch ?? 0
      let rows = try await connection.query(
        """
        SELECT object, wrapped FROM vlog_object_keys
        WHERE account = \(account) AND object > \(start)
        ORDER BY object LIMIT \(min(Int64(clamping: limit), .max - 1) + 1)
        """, logger: logger)
      var keys = try await Self.keys(rows)
      let more = keys.count > limit
      if more, let last = keys.keys.max() { keys[last] = nil }
      return ObjectKeyPage(epoch: epoch, keys: keys, more: more)
    }
  }

  private static func keys(_ rows: PostgresRowSequence) async throws -> [Identifier: [UInt8]] {
    var keys: [Identifier: [UInt8]] = [:]
    for try await (object, wrapped) in rows.decode((ByteBuffer, ByteBuffer).self) {
      keys[try PostgresLogWriter.identifier(object)] = Array(wrapped.readableBytesView)
    }
    return keys
  }

  func rotateKeys(
    account: UInt64, by rotation: KeyRotation.Checked, recoverySecret: PasswordHash?,
    keeping: [UInt8]?
  ) async throws
    -> EncryptionRecord
  {
    let account = Int64(clamping: account)
    return try await transaction { [self] connection in
      let record = try await lockedRecord(of: account, epoch: rotation.epoch, on: connection)
      let rows = try await connection.query(
        "SELECT object FROM vlog_object_keys WHERE account = \(account)", logger: logger)
      var held: [Identifier] = []
      for try await object in rows.decode(ByteBuffer.self) {
        held.append(try PostgresLogWriter.identifier(object))
      }
      var wrapped: [ByteBuffer] = []
      for object in held {
        guard let key = rotation.keys[object] else {
          throw StorageError.keysChanged(
            "the rotation lacks the key of object \(object), which the account holds")
        }
        wrapped.append(ByteBuffer(bytes: key))
      }
      let next = record.rotated(by: rotation, recoverySecret: recoverySecret)
      try await connection.query(
        """
        UPDATE vlog_object_keys AS k SET wrapped = u.wrapped
        FROM UNNEST(\(held.map { ByteBuffer(bytes: $0.bytes) })::bytea[], \(wrapped)::bytea[])
          AS u(object, wrapped)
        WHERE k.account = \(account) AND k.object = u.object
        """, logger: logger)
      // A re-keying has no link: nothing leads to its keys from the epochs before.
      if let link = rotation.link {
        try await connection.query(
          """
          INSERT INTO vlog_key_links (account, epoch, link)
          VALUES (\(account), \(Int64(clamping: next.epoch)), \(ByteBuffer(bytes: link)))
          """, logger: logger)
      }
      try await connection.query(
        """
        UPDATE vlog_account_keys SET record = \(ByteBuffer(bytes: next.encoded)), rotation_due = false
        WHERE account = \(account)
        """, logger: logger)
      if rotation.link == nil {
        // A re-keying signs out every other session, as a password change does.
        try await connection.query(
          """
          DELETE FROM vlog_tokens
          WHERE account = \(account) AND hash IS DISTINCT FROM \(keeping.map { ByteBuffer(bytes: $0) })
          """, logger: logger)
        try await notify(
          .passwordChanged(account: UInt64(account), keeping: keeping), on: connection)
      }
      return next
    }
  }

  func links(account: UInt64, after epoch: UInt64) async throws -> [[UInt8]] {
    try await withConnection { [self] connection in
      let rows = try await connection.query(
        """
        SELECT link FROM vlog_key_links
        WHERE account = \(Int64(clamping: account)) AND epoch > \(Int64(clamping: epoch))
        ORDER BY epoch
        """, logger: logger)
      var links: [[UInt8]] = []
      for try await link in rows.decode(ByteBuffer.self) {
        links.append(Array(link.readableBytesView))
      }
      return links
    }
  }
}
