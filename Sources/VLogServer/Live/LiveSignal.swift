internal import LMDB
internal import VLog

/// What the servers of one storage must tell the live channels they hold: a commit that grew
/// an account's log, and the ends of sessions that channels may be open under.
///
/// Storage sends each signal once its transaction has committed: ``LMDBStorage`` to the feed
/// of its one server; ``PostgresStorage`` by `NOTIFY` in the transaction itself, which
/// PostgreSQL delivers at commit to every server's `LISTEN` connection, this one's too. So a
/// server hears the same signals whichever server took the request.
enum LiveSignal: Sendable, Hashable {
  /// The account's log now ends at `sequence`.
  case head(account: UInt64, sequence: UInt64)
  /// The session of the token with this hash ended (signed out, revoked).
  case tokenRevoked(account: UInt64, hash: [UInt8])
  /// The account's password changed: every session but the one whose token has the hash
  /// `keeping` ended.
  case passwordChanged(account: UInt64, keeping: [UInt8]?)
  /// The account was deleted.
  case accountDeleted(account: UInt64)
  /// Signals may have been missed (the connection that hears them was lost and is back): every
  /// channel's token is checked again, and every account's head sent.
  case resynchronize

  /// The channel of PostgreSQL's `LISTEN`/`NOTIFY` that carries the signals.
  static let channel = "vlog_live"

  /// The signal as a `NOTIFY` payload: `h ACCOUNT SEQUENCE`, `t ACCOUNT HASH`, `p ACCOUNT
  /// [HASH]`, `d ACCOUNT` (hashes in hexadecimal), well under PostgreSQL's 8,000 bytes.
  var payload: String {
    switch self {
    case .head(let account, let sequence): "h \(account) \(sequence)"
    case .tokenRevoked(let account, let hash): "t \(account) \(Hex.string(hash))"
    case .passwordChanged(let account, let keeping):
      "p \(account)" + (keeping.map { " " + Hex.string($0) } ?? "")
    case .accountDeleted(let account): "d \(account)"
    case .resynchronize: "r"
    }
  }

  /// Reads a `NOTIFY` payload; nil for one this version does not know.
  init?(payload: String) {
    let parts = payload.split(separator: " ", omittingEmptySubsequences: false)
    guard let kind = parts.first else { return nil }
    let account = parts.count > 1 ? UInt64(parts[1]) : nil
    func hash(_ index: Int) -> [UInt8]? {
      guard parts.count > index, let bytes = Hex.bytes(parts[index]), bytes.count == 32 else {
        return nil
      }
      return bytes
    }
    switch (kind, account, parts.count) {
    case ("h", let account?, 3):
      guard let sequence = UInt64(parts[2]) else { return nil }
      self = .head(account: account, sequence: sequence)
    case ("t", let account?, 3):
      guard let hash = hash(2) else { return nil }
      self = .tokenRevoked(account: account, hash: hash)
    case ("p", let account?, 2): self = .passwordChanged(account: account, keeping: nil)
    case ("p", let account?, 3):
      guard let hash = hash(2) else { return nil }
      self = .passwordChanged(account: account, keeping: hash)
    case ("d", let account?, 2): self = .accountDeleted(account: account)
    case ("r", nil, 1): self = .resynchronize
    default: return nil
    }
  }
}

/// Where storage hands the signals of its commits to the server's ``LiveHub``: one receiver,
/// called on the committing thread (or the `LISTEN` connection's), which must not block.
final class LiveFeed: Sendable {
  /// The receiver, boxed: a function held directly as a lock's generic value is wrapped in
  /// two more reabstraction thunks each time the lock hands it out and takes it back, so every
  /// signal went through all the thunks of every signal before it (a server's pushes grew
  /// slower, and its stack deeper, with each one).
  private struct Receiver: Sendable {
    let body: @Sendable (LiveSignal) -> Void
  }

  // `Locked`, not `Mutex`: ThreadSanitizer models its pthread mutex.
  private let receiver = Locked<Receiver?>(nil)

  init() {}

  /// Sets the receiver of every signal from now on.
  func receive(_ body: @escaping @Sendable (LiveSignal) -> Void) {
    receiver.withLock { $0 = Receiver(body: body) }
  }

  /// Hands a signal to the receiver, if there is one.
  func send(_ signal: LiveSignal) {
    receiver.withLock { $0 }?.body(signal)
  }
}
