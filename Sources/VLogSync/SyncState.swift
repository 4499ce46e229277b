public import Foundation
public import VLog

/// What an account remembers between syncs, kept in a JSON file next to the store.
public struct SyncState: Codable, Sendable, Hashable {
  /// The server's base URL, if the account was given one.
  public var server: String?
  /// The user name.
  public var username: String
  /// The position in the server's log of the account up to which this store has every event.
  public var cursor: UInt64 = 0
  /// When the last sync finished successfully.
  public var lastSync: Date?
  /// The server's clock minus this device's, in milliseconds, as last measured.
  public var clockSkewMilliseconds: Int64?
  /// The last sync's error, cleared by a successful sync.
  public var lastError: String?
  /// The server's event-set digest at the last sync.
  public var serverEventSetDigest: String?
  /// Whether the account was end-to-end encrypted when this device last signed in to it; nil
  /// until it signs in. A device that knows an account is encrypted never sends its password
  /// to a server that says otherwise.
  public var encrypted: Bool?
  /// The highest key derivation version (`KeyDerivation`) this device has seen for an
  /// encrypted account.
  public var keyDerivationVersion: Int?
  /// The key derivation the server last accepted a secret of this device's drawn with: the
  /// device takes no other salt for the account from the server, nor less memory or work
  /// (`KeyDerivation.checked(own:encrypted:pinned:seenVersion:allowingVersionOne:)`). Nil until it signs
  /// in.
  public var keyDerivation: KeyDerivation?
  /// The epoch of the newest re-keying (``AccountKeys/rekeyedAt``) whose keys this device has
  /// opened: it refuses keys of an earlier one, which a server holding a lost device's keys
  /// could make up.
  public var keysRekeyedAt: UInt64?
  /// The highest epoch of the account's keys this device has opened: it refuses older keys,
  /// whose content key a deletion's rotation retired.
  public var keysEpoch: UInt64?
  /// The device credential the server gave this device at its last sign-in
  /// (`SessionBody.device`), sent with the next: the server then judges that sign-in by this
  /// device's failed attempts, not by everyone's at the user name. Nil before the first.
  public var deviceCredential: String?
  /// Events the server served that this device refused and set aside, the first
  /// ``QuarantinedEvent/limit`` of them; nil if none ever was.
  public var quarantined: [QuarantinedEvent]?
  /// The last time the server refused this store's outbox as stamped too far ahead of its
  /// clock and the events were given new stamps; nil if that never happened.
  public var restamped: Restamp?

  /// Outbox events given new stamps because the server refused them for clock skew.
  public struct Restamp: Codable, Sendable, Hashable {
    /// How many events were restamped.
    public var events: Int
    /// The latest of their old stamps' times, ISO 8601.
    public var latestOldTime: String
    /// When they were restamped (the time their new stamps carry).
    public var date: Date

    /// Creates a record.
    public init(events: Int, latestOldTime: String, date: Date) {
      self.events = events
      self.latestOldTime = latestOldTime
      self.date = date
    }
  }

  /// The account the state is of: its server and user name; nil if it names no server.
  public var binding: AccountBinding? {
    server.map { AccountBinding(server: $0, username: username) }
  }

  /// Creates the state of an account that has never synced.
  public init(username: String, server: String? = nil) {
    self.username = username
    self.server = server
  }

  /// The state for a store rebuilt from this one's events (`NoteStore.salvage(from:to:options:)`):
  /// the same account, and the cursor back at the start, so that the next sync reads every
  /// event of the account again (the store skips those it has) and compares event sets anew.
  public func restarted() -> SyncState {
    var state = self
    state.cursor = 0
    state.serverEventSetDigest = nil
    state.lastError = nil
    return state
  }

  /// Reads a state file, or nil if there is none.
  ///
  /// - Throws: When the file exists but is not a state file.
  public static func load(from path: String) throws -> SyncState? {
    guard FileManager.default.fileExists(atPath: path) else { return nil }
    let data = try Data(contentsOf: URL(fileURLWithPath: path))
    do {
      let decoder = JSONDecoder()
      decoder.dateDecodingStrategy = .iso8601
      return try decoder.decode(SyncState.self, from: data)
    } catch {
      throw APIError(.invalidResponse, "'\(path)' is not a sync state file: \(error)")
    }
  }

  /// Writes the state file: pretty JSON with sorted keys, replacing the old file atomically
  /// (a crash leaves one or the other, whole).
  public func write(to path: String) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
    encoder.dateEncodingStrategy = .iso8601
    try encoder.encode(self).write(to: URL(fileURLWithPath: path), options: .atomic)
  }
}
