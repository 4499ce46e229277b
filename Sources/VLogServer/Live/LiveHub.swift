internal import Foundation
internal import LMDB
internal import Logging
internal import NIOCore
internal import ServiceLifecycle
internal import VLog
internal import VLogWire

/// The live channels (`GET /v1/live`) a server holds, by account: it admits them against its
/// caps, hands each the signals of its account (``LiveSignal``), pings them, and ends those
/// whose session ends.
///
/// The channels are counted here, apart from the request connections of the
/// ``ConnectionRegistry``: a channel leaves that registry when it opens, so devices that hold
/// channels never take the places of requests, and requests never take theirs.
final class LiveHub: Sendable {
  /// The bounds of the channels a server holds.
  struct Limits: Sendable {
    /// The most channels open at once on the server.
    var total: Int
    /// The most channels one account may hold open at once.
    var perAccount: Int
    /// How often an idle channel gets a ping.
    var keepAlive: Duration
  }

  private struct Channel {
    let account: UInt64
    let token: [UInt8]
    let expiresAt: Int64
    let mailbox: LiveMailbox
  }

  private struct State {
    var channels: [UInt64: Channel] = [:]
    var byAccount: [UInt64: Set<UInt64>] = [:]
    var nextID: UInt64 = 0
    /// The earliest expiry of an open channel's token, in milliseconds.
    var earliestExpiry = Int64.max
    var lastPing = ContinuousClock.now
    var shuttingDown = false
  }

  /// The bounds.
  let limits: Limits
  // `Locked`, not `Mutex`: ThreadSanitizer models its pthread mutex.
  private let state = Locked(State())
  private let now: @Sendable () -> Int64
  private let resynchronizations: AsyncStream<Void>
  private let resynchronize: AsyncStream<Void>.Continuation

  /// Creates a hub. `now` is the wall clock in milliseconds, against which tokens expire.
  init(limits: Limits, now: @escaping @Sendable () -> Int64) {
    self.limits = limits
    self.now = now
    (resynchronizations, resynchronize) = AsyncStream.makeStream(
      bufferingPolicy: .bufferingNewest(1))
  }

  /// Opens a channel for a session of `account` whose token has hash `token` and expires at
  /// `expiresAt` (milliseconds).
  ///
  /// - Returns: The channel's id, to ``close(_:)`` it by, and its mailbox.
  /// - Throws: ``ServerError``: 503 `unavailable` when the server holds its most channels or
  ///   is shutting down, 429 `tooManyRequests` when the account holds its most; both with
  ///   `Retry-After`.
  func open(account: UInt64, token: [UInt8], expiresAt: Int64) throws(ServerError) -> (
    id: UInt64, mailbox: LiveMailbox
  ) {
    let mailbox = LiveMailbox()
    let limits = limits
    let outcome = state.withLock { state -> Result<UInt64, ServerError> in
      guard !state.shuttingDown else {
        return .failure(.unavailable("the server is shutting down"))
      }
      guard state.channels.count < limits.total else {
        return .failure(
          .unavailable(
            "this server holds as many live channels as it can (\(limits.total)); sync "
              + "without one meanwhile", retryAfter: 30))
      }
      guard state.byAccount[account, default: []].count < limits.perAccount else {
        return .failure(
          .tooManyRequests(
            retryAfter: 30,
            "this account holds \(limits.perAccount) live channels, the most one account may; "
              + "close one, or sync without one"))
      }
      state.nextID += 1
      let id = state.nextID
      state.channels[id] = Channel(
        account: account, token: token, expiresAt: expiresAt, mailbox: mailbox)
      state.byAccount[account, default: []].insert(id)
      state.earliestExpiry = min(state.earliestExpiry, expiresAt)
      return .success(id)
    }
    return (try outcome.get(), mailbox)
  }

  /// Ends a channel's place: what its stream does when it ends, however it ends.
  func close(_ id: UInt64) {
    let channel = state.withLock { state -> Channel? in
      guard let channel = state.channels.removeValue(forKey: id) else { return nil }
      state.byAccount[channel.account]?.remove(id)
      if state.byAccount[channel.account]?.isEmpty == true {
        state.byAccount[channel.account] = nil
      }
      return channel
    }
    channel?.mailbox.finish()
  }

  /// The channels open now.
  var count: Int { state.withLock { $0.channels.count } }

  /// Hands a signal to the channels it concerns.
  func deliver(_ signal: LiveSignal) {
    switch signal {
    case .head(let account, let sequence):
      for mailbox in mailboxes(of: account) { mailbox.post(head: sequence) }
    case .tokenRevoked(let account, let hash):
      end(account: account, where: { $0.token == hash }, with: Self.revoked)
    case .passwordChanged(let account, let keeping):
      end(account: account, where: { $0.token != keeping }, with: Self.passwordChanged)
    case .accountDeleted(let account):
      end(account: account, where: { _ in true }, with: Self.accountDeleted)
    case .resynchronize:
      resynchronize.yield()
    }
  }

  private func mailboxes(of account: UInt64) -> [LiveMailbox] {
    state.withLock { state in
      state.byAccount[account, default: []].compactMap { state.channels[$0]?.mailbox }
    }
  }

  /// Sends `reason` to the account's channels that `matches` picks, and ends them.
  private func end(
    account: UInt64, where matches: (Channel) -> Bool, with reason: ErrorBody
  ) {
    let ending = state.withLock { state in
      state.byAccount[account, default: []].compactMap { id in
        state.channels[id].flatMap { matches($0) ? $0.mailbox : nil }
      }
    }
    for mailbox in ending { mailbox.post(closing: reason) }
  }

  /// Pings every channel if the keep-alive interval has passed, and ends those whose token has
  /// expired. The hub's service calls it every second.
  func tick() {
    let now = now()
    let (pinged, expired) = state.withLock { state -> ([LiveMailbox], [LiveMailbox]) in
      var expired: [LiveMailbox] = []
      if state.earliestExpiry <= now {
        expired = state.channels.values.filter { $0.expiresAt <= now }.map(\.mailbox)
        state.earliestExpiry =
          state.channels.values.lazy.map(\.expiresAt).filter { $0 > now }.min() ?? .max
      }
      guard ContinuousClock.now - state.lastPing >= limits.keepAlive else { return ([], expired) }
      state.lastPing = .now
      return (state.channels.values.map(\.mailbox), expired)
    }
    for mailbox in expired { mailbox.post(closing: Self.expired) }
    for mailbox in pinged { mailbox.postPing() }
  }

  /// Ends every channel, saying the server is shutting down, and admits no more.
  func shutDown() {
    let all = state.withLock { state in
      state.shuttingDown = true
      return state.channels.values.map(\.mailbox)
    }
    for mailbox in all { mailbox.post(closing: Self.shuttingDown) }
  }

  /// Checks every open channel's token against storage (ending those whose session ended) and
  /// sends each account its head: what follows signals that may have been missed.
  func resynchronize(with store: any SessionStorage & LogStorage) async throws {
    let open = state.withLock { state in
      Set(state.channels.values.map { Pair(account: $0.account, token: $0.token) })
    }
    let now = now()
    // A few queries whatever the number of channels: a thousand tokens or accounts in each.
    var sessions: [[UInt8]: TokenRecord] = [:]
    for batch in Self.batches(of: Set(open.map(\.token))) {
      for record in try await store.tokens(hashes: batch) { sessions[record.hash] = record }
    }
    for channel in open {
      if let session = sessions[channel.token], session.account == channel.account,
        session.expiresAt > now
      {
        continue
      }
      end(account: channel.account, where: { $0.token == channel.token }, with: Self.revoked)
    }
    for batch in Self.batches(of: Set(open.map(\.account))) {
      for (account, head) in try await store.heads(of: batch) {
        for mailbox in mailboxes(of: account) { mailbox.post(head: head) }
      }
    }
  }

  /// A channel's account and session.
  private struct Pair: Hashable {
    let account: UInt64
    let token: [UInt8]
  }

  /// How many tokens, or accounts, one query of a resynchronization reads.
  static let resynchronizationBatch = 1000

  /// `items` in batches of at most ``resynchronizationBatch``.
  private static func batches<T>(of items: Set<T>) -> [[T]] {
    let all = Array(items)
    return stride(from: 0, to: all.count, by: resynchronizationBatch).map {
      Array(all[$0..<min($0 + resynchronizationBatch, all.count)])
    }
  }

  /// Waits for resynchronization requests, one at a time, until cancelled. One that fails
  /// (the database just came back, and is slow or gone again) is tried again after 1 second,
  /// doubling up to 30, until it succeeds: devices catch up whenever the database lets them.
  func resynchronizing(with store: any SessionStorage & LogStorage, logger: Logger) async {
    for await _ in resynchronizations {
      var wait = 1.0
      while true {
        do {
          try await resynchronize(with: store)
          break
        } catch {
          guard !Task.isCancelled else { return }
          logger.warning(
            "resynchronizing the live channels failed; trying again",
            metadata: ["error": "\(error)", "retryIn": "\(wait) s"])
        }
        do { try await Task.sleep(for: .seconds(wait)) } catch { return }
        wait = min(30, wait * 2)
      }
    }
  }

  /// How long a server shutting down waits for its channels to end.
  static let shutdownGrace: Duration = .seconds(5)

  static let revoked = ErrorBody(
    code: .unauthorized, message: "the session ended (signed out or revoked); sign in again")
  static let passwordChanged = ErrorBody(
    code: .unauthorized, message: "the account's password changed; sign in again")
  static let accountDeleted = ErrorBody(code: .unauthorized, message: "the account was deleted")
  static let expired = ErrorBody(code: .tokenExpired, message: "the token expired; sign in again")
  static let shuttingDown = ErrorBody(
    code: .unavailable, message: "the server is shutting down; open the channel again")
}

/// What one live channel has yet to send: the newest head, a ping, or the message that ends
/// it. Only the newest head matters, so a device that reads slowly costs no more memory than
/// one that reads at once.
///
/// Once its connection is handed over (``start(on:)``), it writes its messages to the
/// connection itself, on the connection's event loop, one write at a time, and ends the
/// response and closes the connection after the closing message: no task runs or waits per
/// channel. (A task that waits keeps whatever its frames took for as long as it waits: 11 KiB
/// and more per channel.)
final class LiveMailbox: Sendable {
  private struct State {
    var head: UInt64?
    var ping = false
    var closing: ErrorBody?
    var closed = false
    /// The connection the messages go to, once it is handed over.
    var connection: LiveConnection?
    /// Whether a write is on its way to the socket: the next waits for it.
    var writing = false
    /// Whether the channel has ended: its closing message written, its connection gone, or
    /// its place given back.
    var finished = false
  }

  // `Locked`, not `Mutex`: ThreadSanitizer models its pthread mutex.
  private let state = Locked(State())

  init() {}

  /// Posts the account's head; a later head replaces one not yet sent.
  func post(head: UInt64) {
    state.withLock { $0.head = max($0.head ?? 0, head) }
    wake()
  }

  /// Posts a ping.
  func postPing() {
    state.withLock { $0.ping = true }
    wake()
  }

  /// Posts the message that ends the channel; nothing is sent after it.
  func post(closing reason: ErrorBody) {
    state.withLock { if $0.closing == nil { $0.closing = reason } }
    wake()
  }

  /// Marks the channel ended, its place given back: nothing more is written.
  func finish() {
    state.withLock { Self.end(&$0) }
  }

  /// The next message to send, nil if there is none; the closing one ends the channel.
  func take() -> LiveMessage? {
    state.withLock { Self.take(&$0) }
  }

  /// Whether the closing message was taken.
  var isClosed: Bool { state.withLock { $0.closed } }

  /// Writes the channel's messages to `connection` as body parts of its response, as they
  /// come, until the closing one is written (then ends the response and closes the
  /// connection), the connection fails or ``finish()`` is called; on the connection's event
  /// loop.
  ///
  /// What was written before (the response's head, its first message) must have reached the
  /// connection's pipeline.
  func start(on connection: LiveConnection) {
    let closedAlready = state.withLock { state in
      guard !state.finished else { return false }
      // Its closing message was the first, and is written.
      guard !state.closed else {
        Self.end(&state)
        return true
      }
      state.connection = connection
      return false
    }
    if closedAlready { connection.finish() } else { pump(connection) }
  }

  /// Sends the next message, if one waits and no write is on its way; on the connection's event
  /// loop.
  private func pump(_ connection: LiveConnection) {
    guard connection.eventLoop.inEventLoop else {
      connection.eventLoop.execute { self.pump(connection) }
      return
    }
    let message = state.withLock { state -> LiveMessage? in
      guard !state.finished, !state.writing, let message = Self.take(&state) else { return nil }
      state.writing = true
      return message
    }
    guard let message else { return }
    guard let written = connection.send(ByteBuffer(bytes: message.encoded)) else {
      finish()
      return
    }
    written.whenComplete { result in
      let ended = self.state.withLock { state -> Bool in
        state.writing = false
        // Ended when the closing message is written, or when a write fails (the connection
        // is gone: its close gives the place back too).
        if case .success = result, !state.closed { return false }
        Self.end(&state)
        return true
      }
      if ended { connection.finish() } else { self.pump(connection) }
    }
  }

  /// Wakes the stream, if it has started, after a post.
  private func wake() {
    if let connection = state.withLock({ $0.connection }) { pump(connection) }
  }

  /// Marks the channel ended: no connection to write to any more.
  private static func end(_ state: inout State) {
    state.finished = true
    state.connection = nil
  }

  private static func take(_ state: inout State) -> LiveMessage? {
    guard !state.closed else { return nil }
    // An ended session hears nothing more, not even a head.
    if let closing = state.closing {
      state.closed = true
      return .closed(closing)
    }
    if let head = state.head {
      state.head = nil
      state.ping = false
      return .head(head)
    }
    if state.ping {
      state.ping = false
      return .ping
    }
    return nil
  }
}

/// Runs a server's ``LiveHub``: storage's listening for signals, a tick every second (pings
/// and expired tokens), the resynchronizations storage asks for, and at graceful shutdown,
/// the end of every channel.
struct LiveHubService: Service {
  let hub: LiveHub
  let store: any SessionStorage & LogStorage & SignalStorage
  let logger: Logger

  func run() async throws {
    await withTaskGroup(of: Void.self) { tasks in
      tasks.addTask { await store.listenForSignals() }
      tasks.addTask { await hub.resynchronizing(with: store, logger: logger) }
      tasks.addTask {
        while !Task.isCancelled {
          do { try await Task.sleep(for: .seconds(1)) } catch { return }
          hub.tick()
        }
      }
      // Until the server shuts down; then every channel ends, so that its connection can.
      do { try await gracefulShutdown() } catch {}  // cancelled: the server is ending anyway
      hub.shutDown()
      // No task waits for a channel: the service does, for a few seconds, so that devices
      // hear why their channels end before the process may exit.
      let clock = ContinuousClock()
      let deadline = clock.now + LiveHub.shutdownGrace
      while hub.count > 0, clock.now < deadline {
        do { try await Task.sleep(for: .milliseconds(10)) } catch { break }
      }
      tasks.cancelAll()
    }
  }
}
