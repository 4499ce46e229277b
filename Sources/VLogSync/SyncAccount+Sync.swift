internal import Foundation
internal import VLog
public import VLogWire

/// One sync: the outbox pushed and the server's log pulled, page by page, as ``SyncMachine``
/// decides.
extension SyncAccount {
  /// Pushes the outbox and pulls everything new, until the server has nothing more.
  ///
  /// One sync runs at a time: a call made while another runs waits for it to end, then syncs
  /// (so that what was written before the call is pushed by it). Calls never interleave, so an
  /// outbox is never pushed twice and the cursor never moves back.
  ///
  /// - Throws: ``APIError`` from the server (for example `clockSkew`, with the skew recorded in
  ///   ``state``) or the transport; `VLogError` from the store. The error is also recorded as
  ///   ``SyncState/lastError``.
  @discardableResult
  public func sync() async throws -> SyncReport {
    await waitForSyncAndRekeying()
    let task = Task {
      defer { running = nil }
      return try await self.syncOnce()
    }
    running = task
    return try await task.value
  }

  func syncOnce() async throws -> SyncReport {
    try store.checkAccount(binding)
    do {
      let report: SyncReport
      do {
        report = try await runSync()
      } catch let error as AccountKeyError where error.keysReplaced || error.serverBehind {
        if error.keysReplaced {
          // Re-keyed on another device: the new keys open with the password.
          try await reopenReplacedKeys()
        } else {
          // Restored from a backup taken before the keys rotated: brought forward.
          try await bringKeysForward()
        }
        report = try await runSync()
      }
      try await store.bringProjectionsUpToDate()
      state.lastError = nil
      state.lastSync = now()
      try saveState()
      try saveToken()
      return report
    } catch {
      state.lastError = "\(error)"
      // The pages a failed pull committed show now; if the store cannot project them, its
      // next write or open does.
      _ = try? await store.bringProjectionsUpToDate()
      // A store not bound to this account never signed in with it: a failed first sign-in
      // writes nothing. Otherwise, if the state cannot be saved either, that is the failure
      // to report: no sync can record its progress until it is fixed.
      if isBound {
        try saveState()
        try saveToken()
      }
      throw error
    }
  }

  /// The encoding sync calls use now.
  public var syncEncoding: SyncEncoding { encoding }

  /// Drives a ``SyncMachine`` through one sync: performs each action it asks for with the
  /// store and the API, and reports the outcome back, until it finishes or fails.
  func runSync() async throws -> SyncReport {
    let keyring = try await openKeys()
    // Re-keyed elsewhere since this device last looked: found before anything is sealed with
    // keys the re-keying replaced.
    if let keyring {
      let epoch = await keyring.keys.epoch
      try await keyring.follow(
        try await call { caller, token in await caller.accountKeys(since: epoch, token: token) })
      try await retryQuarantine(by: keyring)
    }
    quarantinedInSync = 0
    pendingRedactions = []
    var machine = SyncMachine(
      cursor: state.cursor, encoding: encoding, pageSize: pageSize, pushSize: pushSize,
      pushBytes: pushBytes, maximumClockSkew: store.maximumClockSkew)
    // An encrypted account's outbox is sealed one push ahead.
    var sealer = keyring.map { OutboxSealer(keyring: $0, store: store) }
    // The page the machine asked for ahead, opened, while the store commits the one before.
    var prefetch: Task<SyncPage, any Error>?
    // A server that refused the binary encoding gets JSON from now on, whatever the outcome.
    defer {
      encoding = machine.encoding
      sealer?.cancel()
      prefetch?.cancel()
    }
    var action = machine.start()
    while true {
      switch action {
      case .readDigest, .compare, .readIDs, .finish:
        // The pull is over: the redactions held back are judged before anything counts ids.
        try await settleRedactions()
      default: break
      }
      switch action {
      case .readOutbox(let limit):
        action = machine.outboxRead(try store.outbox(limit: limit))
      case .confirmKeys(let events):
        var unsealable = Set<Stamp>()
        if let keyring { unsealable = try await confirmKeys(of: events, keyring: keyring) }
        action = machine.keysConfirmed(leaving: unsealable)
      case .uploadBlobs(let events):
        action = machine.blobsUploaded(try await uploadBlobs(for: events, keyring: keyring))
      case .takePrefetched:
        let asked = prefetch
        prefetch = nil
        // A prefetch that failed is not this sync's error: the machine has the call made again,
        // as any call, which fails there if the failure still holds.
        if let page = try? await asked?.value {
          action = machine.pageReceived(page)
        } else {
          action = machine.prefetchFailed()
        }
      case .push(let clear, let encoding, let outboxThrough):
        prefetch?.cancel()
        prefetch = nil
        var push = clear
        if var outboxSealer = sealer {
          push.events = try await outboxSealer.seal(clear.events)
          // While this push is on its way, the outbox events after it are sealed.
          if let outboxThrough {
            outboxSealer.sealAhead(after: outboxThrough, limit: clear.events.count)
          }
          sealer = outboxSealer
        }
        let sent = push
        // An encrypted account's server takes its events only signed by its devices' keys.
        let signingKey = await keyring?.keys.requestSigningKey
        var page: SyncPage
        do {
          page = try await call { caller, token in
            await caller.signingWrites(with: signingKey).sync(
              sent, encoding: encoding, token: token)
          }
        } catch {
          // A refusal other than of the credentials (a clock too far ahead, say) comes from a
          // server that accepted them.
          if let status = error.status, status != 401 {
            try bindStore()
          }
          let reset = machine.report.cursorReset
          action = machine.pushRefused(error, deviceTime: now().milliseconds)
          if !reset, machine.report.cursorReset, let keyring {
            // The server was restored: the keys this device remembers storing may be lost,
            // or stored again by another device; what was sealed with them is sealed again.
            try await keyring.confirmHeldKeys()
            sealer?.cancel()
            sealer = OutboxSealer(keyring: keyring, store: store)
          }
          continue
        }
        try bindStore()
        if let keyring { page.events = try await openedOrQuarantined(page.events, by: keyring) }
        action = machine.pageReceived(page)
      case .restamp(let time):
        action = machine.restamped(try await restampOutbox(after: time))
      case .renewReplica:
        action = machine.replicaRenewed(try await store.renewReplica().count)
      case .commit(let page, let sequence, let ahead):
        if let ahead {
          prefetch = Task {
            var page = try await call { caller, token in
              await caller.sync(ahead.push, encoding: ahead.encoding, token: token)
            }
            if let keyring {
              page.events = try await self.openedOrQuarantined(page.events, by: keyring)
            }
            return page
          }
        }
        measuredClockSkew(page.serverTime.milliseconds - now().milliseconds)
        // A page that more follow leaves the projections to the pull's last one, which then
        // writes each note's record once for the whole pull.
        let ingested = try await store.ingest(
          page.events, acknowledgingThrough: sequence, deferringProjections: page.more)
        state.cursor = page.cursor
        state.serverEventSetDigest = page.eventSetDigest.description
        action = machine.committed(
          page: page, appended: ingested.appended, outbox: try store.outboxCount())
        // Progress survives an interruption; the last page's is saved by the caller.
        if case .readOutbox = action { try saveState() }
      case .readDigest:
        action = machine.digestRead(try bucketsCountingQuarantine().total)
      case .compare:
        let local = try bucketsCountingQuarantine()
        let comparison = try await call { caller, token in
          await caller.compare(local, token: token)
        }
        state.serverEventSetDigest = comparison.eventSetDigest.description
        action = machine.compared(
          comparison, deviceTime: now().milliseconds, skew: state.clockSkewMilliseconds ?? 0)
      case .readIDs(let buckets):
        action = machine.idsRead(try idsCountingQuarantine(inBuckets: buckets))
      case .readEvents(let ids):
        action = machine.eventsRead(try store.events(withIDs: ids))
      case .fetch(let ids):
        let fetched = try await call { caller, token in await caller.fetch(ids, token: token) }
        if let keyring {
          action = machine.fetched(try await openedOrQuarantined(fetched, by: keyring))
        } else {
          action = machine.fetched(fetched)
        }
      case .ingest(let events):
        action = machine.ingested(events, appended: try await store.ingest(events).appended)
      case .finish(var report):
        report.quarantined = quarantinedInSync
        // A deletion stored since the last rotation: the content key that wrapped the
        // deleted notes' keys is replaced, so that copies of the server's data made before
        // cannot open them.
        if let keyring {
          try await keyring.rotateIfDue(username: username)
          try await keepKeys()
        }
        return report
      case .fail(let error):
        throw error
      }
    }
  }

  /// Gives the outbox events stamped after `time` (milliseconds, the later of the server's
  /// clock and this device's) the stamps of changes made now, and records it in ``state``.
  ///
  /// - Returns: How many events were restamped.
  func restampOutbox(after time: Int64) async throws -> Int {
    let restamped = try await store.restampOutbox(after: Date(milliseconds: time))
    guard let latest = restamped.map(\.old.time.milliseconds).max() else { return 0 }
    state.restamped = SyncState.Restamp(
      events: restamped.count, latestOldTime: ISO8601.format(milliseconds: Int64(latest)),
      date: now())
    return restamped.count
  }
}
