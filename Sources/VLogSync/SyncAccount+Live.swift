internal import Foundation
internal import VLog
internal import VLogWire

/// The live channel, by which the server says when the account's log moves.
extension SyncAccount {
  /// Opens the account's live channel (`GET /v1/live`), signing in first or again as a sync
  /// would: the server then says, within milliseconds of each commit to the account's log,
  /// how far the log reaches (`LiveMessage.head(_:)`), and the device syncs if it is behind.
  /// ``AutomaticSync`` holds one while it runs.
  ///
  /// - Parameter silenceLimit: How long the channel may stay silent before it counts as gone;
  ///   it must exceed the server's keep-alive interval (25 seconds by default).
  /// - Throws: ``APIError``: `transport` when the server cannot be reached or the transport
  ///   cannot stream, `server` with 429 or 503 (and `retryAfter`) when the server or the
  ///   account holds its most channels, 401 when signing in fails; `VLogError` for a store
  ///   bound to another account.
  public func openLiveChannel(silenceLimit: Duration = .seconds(30)) async throws -> LiveChannel {
    try store.checkAccount(binding)
    let stream = try await call { caller, token in await caller.openLive(token: token) }
    try bindStore()
    return LiveChannel(stream, server: binding.server, silenceLimit: silenceLimit)
  }
}
