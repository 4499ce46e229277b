internal import Foundation
internal import VLog
internal import VLogWire

/// The proof of sync: which events, and so which notes, a device and its server do not share.
extension SyncAccount {
  /// Finds which events the store and the server do not share, the notes they are about, and
  /// what the next sync does about each, changing neither side: for an app's diagnostics
  /// screen, and `vlog sync --check`.
  ///
  /// Equal event-set digests end the check at once. Otherwise it sends the store's digest in
  /// 256 buckets, as a sync's repair does, and the server lists its ids in the buckets that
  /// differ; a server that stops at its limit of ids is asked again with the buckets it listed
  /// set to its own digests, until it has listed every bucket that differs. The events the
  /// server lacks are read from the store; those the device lacks are fetched (and, for an
  /// encrypted account, checked and opened with its keys, not applied) to name their notes.
  /// What it answers is what the two sides held while it ran: a change made or synced
  /// meanwhile may be listed as a difference, or not.
  ///
  /// - Throws: ``APIError`` when the server does not answer; `VLogError` from the store.
  public func checkSync() async throws -> SyncCheck {
    try store.checkAccount(binding)
    let keyring = try await openKeys()
    let local = try store.eventSetBuckets()
    let (theirs, serverDigest, isComplete) = try await serverIDs(differingFrom: local)
    var check = SyncCheck(
      deviceDigest: local.total, serverDigest: serverDigest, differences: [],
      isComplete: isComplete)
    guard !check.inSync else { return check }
    let ours = Set(try store.eventIDs(inBuckets: theirs.keys))
    let plan = RepairPlan(
      ours: ours, theirs: Set(theirs.values.joined()), deviceTime: now().milliseconds,
      skew: state.clockSkewMilliseconds ?? 0,
      skewBound: Int64(clamping: Milliseconds(store.maximumClockSkew).rawValue))
    let outbox = Set(try store.outbox().map(\.event.stamp))
    for event in try store.events(withIDs: plan.push + plan.later) {
      let id = event.stamp
      let repair: SyncDifference.Repair =
        plan.later.contains(id) ? .pushLater : outbox.contains(id) ? .pushFromOutbox : .push
      check.differences.append(
        SyncDifference(
          id: id, side: .missingOnServer, kind: event.change.kind, note: event.change.noteID,
          repair: repair))
    }
    check.differences += try await fetchedDifferences(plan.fetch, keyring: keyring)
    check.differences.sort { $0.id < $1.id }
    // A sign-in the calls needed gave a new token: kept, as a sync keeps it.
    try saveToken()
    return check
  }

  /// The server's ids in every bucket whose digest differs from `local`'s, its event-set
  /// digest, and whether it listed them all.
  private func serverIDs(differingFrom local: EventSetBuckets) async throws -> (
    [Int: [Stamp]], EventSetDigest, Bool
  ) {
    var asked = local.digests
    var theirs: [Int: [Stamp]] = [:]
    while true {
      let buckets = EventSetBuckets(digests: asked) ?? local
      let comparison = try await call { caller, token in
        await caller.compare(buckets, token: token)
      }
      // An id listed in a bucket it does not fall in is the server's mistake, not a
      // difference.
      var listed: [Int: [Stamp]] = [:]
      for (bucket, ids) in comparison.ids {
        listed[bucket] = ids.filter { EventSetBuckets.bucket(of: $0) == bucket }
      }
      if comparison.complete { theirs.merge(listed) { $1 } }
      guard !comparison.complete else { return (theirs, comparison.eventSetDigest, true) }
      // Listed again: the buckets just listed now carry the server's own digests, so the
      // next answer lists the ones after them. An answer that lists nothing new ends it.
      let new = listed.filter { theirs[$0.key] == nil }
      guard !new.isEmpty else { return (theirs, comparison.eventSetDigest, false) }
      for (bucket, ids) in new {
        theirs[bucket] = ids
        asked[bucket] = ids.reduce(into: EventSetDigest.empty) { $0.add($1) }
      }
    }
  }

  /// The events the server holds and the device lacks, fetched to name their notes and
  /// checked as a sync would check them.
  private func fetchedDifferences(_ ids: [Stamp], keyring: AccountKeyring?) async throws
    -> [SyncDifference]
  {
    var differences: [SyncDifference] = []
    var start = 0
    while start < ids.count {
      let asked = Array(ids[start..<min(ids.count, start + max(1, pushSize))])
      start += asked.count
      // Each event asked for once: a server's answer may hold others, or one twice.
      var wanted = Set(asked)
      let fetched = try await call { caller, token in await caller.fetch(asked, token: token) }
        .filter { wanted.remove($0.stamp) != nil }
      let found = Set(fetched.map(\.stamp))
      differences += try await self.differences(fetched: fetched, keyring: keyring)
      for id in asked where !found.contains(id) {
        differences.append(
          SyncDifference(
            id: id, side: .missingOnDevice, kind: nil, note: nil,
            repair: .never(reason: "the server lists the event but does not return it")))
      }
    }
    return differences
  }

  /// Fetched events the device lacks, and whether the device would take each: checked and
  /// opened together, and one by one when that fails, to name those it refuses.
  private func differences(fetched events: [Event], keyring: AccountKeyring?) async throws
    -> [SyncDifference]
  {
    var refusals: [Stamp: String] = [:]
    if let keyring {
      do {
        _ = try await keyring.open(events, remembering: false)
      } catch is AccountKeyError {
        for event in events {
          do {
            _ = try await keyring.open([event], remembering: false)
          } catch let error as AccountKeyError {
            refusals[event.stamp] = "this device refuses it: \(error)"
          }
        }
      }
    }
    return events.map { event in
      SyncDifference(
        id: event.stamp, side: .missingOnDevice, kind: event.change.kind,
        note: event.change.noteID,
        repair: refusals[event.stamp].map { .never(reason: $0) } ?? .fetch)
    }
  }
}
