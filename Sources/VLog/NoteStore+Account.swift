internal import Foundation
internal import LMDB

/// The account a store belongs to: the server and the user name it first signed in with.
///
/// A store's log and outbox only make sense against one account's log: its cursor, what the
/// server acknowledged, and the repair that pushes every event the server lacks all assume it.
/// Synced as another account, a store would upload its notes into that account. So the first
/// successful sign-in binds the store (``NoteStore/bind(to:)``), and every later sync checks
/// the binding (``NoteStore/checkAccount(_:)``) before it sends anything. To sync as another
/// account, start over: a new store, or this one erased.
public struct AccountBinding: Sendable, Hashable, CustomStringConvertible {
  /// The server's identity: its base URL, without a trailing slash, scheme and host
  /// lowercased.
  public let server: String
  /// The normalised user name.
  public let username: String

  /// Creates a binding, normalising the server's URL (`HTTP://Host:8080/` and
  /// `http://host:8080` are the same server).
  ///
  /// - Parameters:
  ///   - server: The server's base URL (or, for a transport without one, its name).
  ///   - username: The user name, normalised as the server normalises it.
  public init(server: String, username: String) {
    self.server = Self.normalized(server)
    self.username = username
  }

  /// `'ann' on http://127.0.0.1:8080`.
  public var description: String { "'\(username)' on \(server)" }

  /// The URL without trailing slashes, and with its scheme and host (everything before the
  /// path) lowercased.
  static func normalized(_ server: String) -> String {
    var url = Substring(server)
    while url.hasSuffix("/") { url = url.dropLast() }
    guard let scheme = url.range(of: "://") else { return String(url) }
    let path = url[scheme.upperBound...].firstIndex(of: "/") ?? url.endIndex
    return url[..<path].lowercased() + url[path...]
  }

  /// `server`, a zero byte, `username`: what `meta` keeps under `account`.
  var encoded: [UInt8] { Array(server.utf8) + [0] + Array(username.utf8) }

  init(decoding bytes: [UInt8]) throws(VLogError) {
    guard let zero = bytes.firstIndex(of: 0),
      let server = String(validating: bytes[..<zero], as: UTF8.self),
      let username = String(validating: bytes[(zero + 1)...], as: UTF8.self),
      !server.isEmpty, !username.isEmpty
    else { throw VLogError(.corruptStore, "the store's account record is malformed") }
    self.server = server
    self.username = username
  }
}

extension NoteStore {
  /// The account this store belongs to, or nil if it has never signed in to one.
  ///
  /// - Throws: ``VLogError/Code/corruptStore`` if the record cannot be read.
  public func account() throws -> AccountBinding? {
    try VLogError.wrapping {
      try environment.read { transaction in try storedAccount(in: transaction) }
    }
  }

  /// Throws unless the store may sync as `account`: it belongs to no account yet, or to this
  /// one. Changes nothing.
  ///
  /// - Throws: ``VLogError/Code/otherAccount`` saying which account the store belongs to and
  ///   how to start over.
  public func checkAccount(_ account: AccountBinding) throws {
    if let bound = try self.account(), bound != account {
      throw Self.otherAccount(bound: bound, requested: account)
    }
  }

  /// Binds the store to `account` if it belongs to none yet (durably, before the call
  /// returns); does nothing if it belongs to `account` already.
  ///
  /// - Throws: ``VLogError/Code/otherAccount`` if it belongs to another account, and then
  ///   changes nothing.
  public func bind(to account: AccountBinding) throws {
    try VLogError.wrapping {
      try environment.write { transaction in
        if let bound = try storedAccount(in: transaction) {
          guard bound == account else {
            throw Self.otherAccount(bound: bound, requested: account)
          }
          return
        }
        try transaction.put(account.encoded, forKey: Keys.Meta.account, in: schema.meta)
      }
    }
  }

  private func storedAccount(in transaction: borrowing some Transaction & ~Copyable) throws
    -> AccountBinding?
  {
    try transaction.value(forKey: Keys.Meta.account, in: schema.meta).map {
      bytes throws(VLogError) in try AccountBinding(decoding: bytes)
    }
  }

  private static func otherAccount(bound: AccountBinding, requested: AccountBinding)
    -> VLogError
  {
    VLogError(
      .otherAccount,
      "this store belongs to \(bound) and cannot sync as \(requested): its notes would go "
        + "into that account. To sync as \(requested), use a new store, or erase this one "
        + "(its notes not yet synced to \(bound) are then lost)")
  }
}
