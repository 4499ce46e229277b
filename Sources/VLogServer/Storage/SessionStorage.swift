/// The slice of ``ServerStorage`` that keeps sign-in tokens, by their hashes.
protocol SessionStorage: Sendable {
  /// An account's tokens, expired ones included.
  func tokens(of account: UInt64) async throws -> [TokenRecord]

  /// Stores the hash of a new token.
  ///
  /// - Throws: ``StorageError`` `accountDeleted` if the account no longer exists.
  func storeToken(hash: [UInt8], account: UInt64, expiresAt milliseconds: Int64) async throws

  /// A token, by its hash.
  func token(hash: [UInt8]) async throws -> TokenRecord?

  /// The tokens of `hashes` that exist, read at once (one query on a database): what
  /// resynchronizing every live channel checks.
  func tokens(hashes: [[UInt8]]) async throws -> [TokenRecord]

  /// Revokes a token. Returns whether it existed.
  @discardableResult
  func deleteToken(hash: [UInt8]) async throws -> Bool
}

/// A sign-in token as storage keeps it: only its hash.
struct TokenRecord: Sendable, Hashable {
  /// The SHA-256 of the token.
  var hash: [UInt8]
  /// The account it signs in.
  var account: UInt64
  /// When it stops working, in milliseconds since 1970.
  var expiresAt: Int64
}
