internal import Foundation
internal import VLog
internal import VLogWire

/// The proof of sync: which events, and so which notes, a device and its server do not share.
extension SyncAccount {
  /// The most differences a check names on each side; past it, ``SyncCheck/isComplete`` is
  /// false. A device far behind its server lacks every event after its cursor, which a sync
  /// pulls, and naming each would mean fetching them all.
  public static let checkedDifferencesLimit = 10_000

  /// Finds which events the store and the server do not share, the notes they are about, and
  /// what the next sync does about each: for an app's diagnostics screen, and
  /// `vlog sync --check`.
  ///
  /// Equal event-set digests end the check at once. Otherwise it sends the store's digest in
  /// 256 buckets, as a sync's repair does, and the server lists its ids in the buckets that
  /// differ; a server that stops at its limit of ids is asked again with the buckets it listed
  /// set to its own digests, until it has listed every bucket that differs. The events the
  /// server lacks are read from the store; those the device lacks are fetched (and, for an
  /// encrypted account, checked and opened with its keys) to name their notes. At most
  /// ``checkedDifferencesLimit`` are named on each side.
  ///
  /// It changes neither side's events, cursor or outbox. Like a sync, it signs in again when
  /// the token has expired (keeping the new token), and an encrypted account learns the keys
  /// it looks up. What it answers is what the two sides held while it ran: a change made or
  /// synced meanwhile may be listed as a difference, or not.
  ///
  /// - Throws: ``APIError`` when the server does not answer; `VLogError` from the store;
  ///   ``AccountKeyError`` when an encrypted account's keys changed meanwhile (check again).
  public func checkSync() async throws -> SyncCheck {
    try store.checkAccount(binding)
    let keyring = try await openKeys()
    let local = try bucketsCountingQuarantine()
    // What a server may list is bounded by what a device could lack: a lying one cannot make
    // the check hold more.
    let bound = try store.eventCount() + Self.checkedDifferencesLimit
    let listed = try await serverIDs(differingFrom: local, bound: bound)
    var check = SyncCheck(
      deviceDigest: local.total, serverDigest: listed.digest, differences: [],
      isComplete: listed.isComplete, quarantined: state.quarantined ?? [])
    guard !check.inSync else { return check }
    let ours = try idsCountingQuarantine(inBuckets: listed.ids.keys)
    var plan = RepairPlan(
      ours: ours, theirs: Set(listed.ids.values.joined()), deviceTime: now().milliseconds,
      skew: state.clockSkewMilliseconds ?? 0,
      skewBound: Int64(clamping: Milliseconds(store.maximumClockSkew).rawValue))
    let limit = Self.checkedDifferencesLimit
    if plan.push.count + plan.later.count > limit || plan.fetch.count > limit {
      check.isComplete = false
      plan.push = Array(plan.push.prefix(limit))
      plan.later = Array(plan.later.prefix(max(0, limit - plan.push.count)))
      plan.fetch = Array(plan.fetch.prefix(limit))
    }
    let later = Set(plan.later)
    let outbox = Set(try store.outbox().map(\.event.stamp))
    for event in try store.events(withIDs: plan.push + plan.later) {
      let id = event.stamp
      let repair: SyncDifference.Repair =
        switch (later.contains(id), outbox.contains(id)) {
        case (true, true): .restampAndPush
        case (true, false): .pushLater
        case (false, true): .pushFromOutbox
        case (false, false): .push
        }
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

  /// The server's ids in the buckets whose digests differ from `local`'s, its event-set
  /// digest, and whether it listed every such bucket (it did not if it listed more than
  /// `bound` ids in all).
  private func serverIDs(differingFrom local: EventSetBuckets, bound: Int) async throws -> (
    ids: [Int: [Stamp]], digest: EventSetDigest, isComplete: Bool
  ) {
    var asked = local.digests
    var theirs: [Int: [Stamp]] = [:]
    var count = 0
    while true {
      let buckets = EventSetBuckets(digests: asked) ?? local
      let comparison = try await call { caller, token in
        await caller.compare(buckets, token: token)
      }
      // An id listed in a bucket it does not fall in is the server's mistake, not a
      // difference.
      var new: [Int: [Stamp]] = [:]
      for (bucket, ids) in comparison.ids where theirs[bucket] == nil {
        new[bucket] = ids.filter { EventSetBuckets.bucket(of: $0) == bucket }
      }
      for (bucket, ids) in new {
        theirs[bucket] = ids
        count += ids.count
        // Asked again, the bucket carries the server's own digest, so that the next answer
        // lists the ones after it.
        asked[bucket] = ids.reduce(into: EventSetDigest.empty) { $0.add($1) }
      }
      if comparison.complete { return (theirs, comparison.eventSetDigest, true) }
      // An answer that lists nothing new, or more than any device could lack, ends it.
      if new.isEmpty || count > bound { return (theirs, comparison.eventSetDigest, false) }
    }
  }

  /// The events the server holds and the device lacks, fetched to name their notes and
  /// checked as a sync would check them. An answer holds what fits in the server's page:
  /// what comes after its last event is asked again, as a sync's repair does; an id is
  /// missing only when an answer holds none of those asked.
  private func fetchedDifferences(_ ids: [Stamp], keyring: AccountKeyring?) async throws
    -> [SyncDifference]
  {
    var differences: [SyncDifference] = []
    var remaining = ids[...]
    while !remaining.isEmpty {
      let asked = Array(remaining.prefix(max(1, pushSize)))
      // Each event asked for once: an answer may hold others, or one twice.
      var wanted = Set(asked)
      let fetched = try await call { caller, token in await caller.fetch(asked, token: token) }
        .filter { wanted.remove($0.stamp) != nil }
      guard let last = fetched.last, let position = asked.firstIndex(of: last.stamp) else {
        differences += remaining.map { id in
          SyncDifference(
            id: id, side: .missingOnDevice, kind: nil, note: nil,
            repair: .never(reason: "the server lists the event but does not return it"))
        }
        break
      }
      differences += try await self.differences(fetched: fetched, keyring: keyring)
      // Those before the last returned that it left out are not coming.
      let returned = Set(fetched.map(\.stamp))
      for id in asked[..<position] where !returned.contains(id) {
        differences.append(
          SyncDifference(
            id: id, side: .missingOnDevice, kind: nil, note: nil,
            repair: .never(reason: "the server lists the event but does not return it")))
      }
      remaining = remaining.dropFirst(position + 1)
    }
    return differences
  }

  /// Fetched events the device lacks, and whether the device would take each: checked and
  /// opened together, and one by one when that fails, to name those it refuses. Keys that
  /// changed meanwhile are no verdict on an event: that ends the check.
  private func differences(fetched events: [Event], keyring: AccountKeyring?) async throws
    -> [SyncDifference]
  {
    var refusals: [Stamp: String] = [:]
    if let keyring {
      var opened: [Event] = []
      do {
        opened = try await keyring.open(events, remembering: false)
      } catch let error as AccountKeyError where !error.keysReplaced && !error.changedMeanwhile {
        for event in events {
          do {
            opened += try await keyring.open([event], remembering: false)
          } catch let error as AccountKeyError
            where !error.keysReplaced && !error.changedMeanwhile
          {
            refusals[event.stamp] = "this device refuses it: \(error)"
          }
        }
      }
      // A redaction with nothing to show for it is set aside by a sync, as a refused event is.
      let unvouched = try store.redactionsLackingEvidence(in: opened)
      for event in opened where unvouched.contains(event.stamp) {
        refusals[event.stamp] = Self.unvouchedRedaction(event)
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
