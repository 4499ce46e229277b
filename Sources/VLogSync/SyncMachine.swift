internal import Foundation
internal import VLog
internal import VLogWire

/// The logic of one sync, as a pure state machine: each method takes what happened — the
/// outbox read, a page received, a push refused (413, 415, clock skew), digests compared,
/// repair answers — and returns the next ``Action``, which ``SyncAccount`` performs with the
/// store and the API and reports back. It touches neither, so every path is tested without a
/// network or a store (`SyncMachineTests`).
///
/// What it guarantees, whoever drives it:
/// 1. Pushed events are acknowledged only in the commit of the page that answered their push.
/// 2. The cursor moves only with a committed page (``Action/commit(_:acknowledgingThrough:prefetch:)``).
/// 3. A push the server finds too large (413) is sent again with half the events and bytes, down
///    to one event; a server that refuses the binary encoding (415) gets JSON from then on.
/// 4. An outbox refused for clock skew is restamped at most once a sync, by the server's clock
///    (the store stamps by it once it knows the device's clock is ahead).
/// 5. An outbox the server refuses because it holds other events under some of its ids
///    (`eventCollision`) is pushed up to the first of them, then given a new replica id, at
///    most once a sync.
/// 6. When the outbox is empty and no page remains but the digests differ, repair compares
///    buckets (at most ``repairRounds`` rounds), pushes what the server lacks that it would
///    take (not stamped past its skew bound) and fetches what the store lacks. Before each push
///    of repair, the keys that seal its events are confirmed on the server.
/// 7. Every push of the outbox or of repair carries at least one event (halving stops at one),
///    so a sync always progresses or fails; a pull carries none.
/// 8. It says when work may run ahead, and the driver only performs it: a pull that pushed
///    nothing and has more pages asks for the next page while the store commits this one
///    (``Action/commit(_:acknowledgingThrough:prefetch:)``), taken only if the next call is
///    that one; a push of the outbox names where it ends, so that the events after it may be
///    sealed while it is on its way (``Action/push(_:encoding:outboxThrough:)``).
///
/// An expired token is not its business: each API call signs in again once by itself
/// (``APICall``); what reaches the machine is what that could not fix.
struct SyncMachine {
  /// What the driver does next, then reports with the matching method.
  enum Action {
    /// Read up to `limit` outbox events; report with ``outboxRead(_:)``.
    case readOutbox(limit: Int)
    /// Upload the attachment bytes these events name; report with ``blobsUploaded(_:)``.
    case uploadBlobs([Event])
    /// Make sure the server holds the keys of the notes and attachments of these events (of
    /// an encrypted account; nothing to do for a clear one), events it lacks: a server
    /// restored from a backup lost the keys stored with them. Report with
    /// ``keysConfirmed(leaving:)``.
    case confirmKeys([Event])
    /// Send a sync call, dropping a page asked ahead; report with ``pageReceived(_:)`` (the
    /// page opened) or ``pushRefused(_:deviceTime:)``. `outboxThrough`: the push is the
    /// outbox's oldest events through this sequence number, and the next push will be those
    /// after it, which the driver may prepare (seal) while this one is on its way.
    case push(SyncPush, encoding: SyncEncoding, outboxThrough: UInt64?)
    /// Take the page asked ahead with the last commit: the call that comes next is that one.
    /// Report with ``pageReceived(_:)``, or ``prefetchFailed()`` if the call failed.
    case takePrefetched
    /// Give the outbox events stamped after this time (milliseconds) new stamps; report with
    /// ``restamped(_:)``.
    case restamp(after: Int64)
    /// Give the outbox a new replica id; report with ``replicaRenewed(_:)``.
    case renewReplica
    /// Ingest the page, acknowledging the local events through this sequence number in the same
    /// commit, and move the cursor; report with ``committed(page:appended:outbox:)``. With
    /// `prefetch`, make that call (and open its page) meanwhile: the pull likely to come next.
    case commit(SyncPage, acknowledgingThrough: UInt64?, prefetch: Call?)
    /// Read the store's event-set digest; report with ``digestRead(_:)``.
    case readDigest
    /// Send the store's bucket digests; report with ``compared(_:deviceTime:skew:)``.
    case compare
    /// Read the store's event ids in these buckets; report with ``idsRead(_:)``.
    case readIDs(buckets: [Int])
    /// Read the store's events with these ids; report with ``eventsRead(_:)``.
    case readEvents([Stamp])
    /// Fetch these events from the server; report with ``fetched(_:)``.
    case fetch([Stamp])
    /// Ingest fetched events; report with ``ingested(_:appended:)``.
    case ingest([Event])
    /// The sync is over.
    case finish(SyncReport)
    /// The sync failed with this error.
    case fail(APIError)
  }

  /// A sync call: what is sent, and how.
  struct Call: Equatable {
    var push: SyncPush
    var encoding: SyncEncoding
  }

  /// The most rounds of comparing one sync repairs for; each round settles every bucket the
  /// server listed, so more than one is needed only when the differences pass the server's
  /// limit of ids per comparison.
  static let repairRounds = 8

  /// How much one push may carry: events and bytes of their binary encoding.
  struct Budget: Equatable {
    var events: Int
    var bytes: Int
  }

  private enum Phase {
    case idle
    /// Pushing the outbox: reading it, uploading, pushing, committing.
    case outbox(batch: [LoggedEvent])
    /// Restamping after the server refused the outbox for clock skew with this error.
    case restamping(refusal: APIError)
    /// Renewing the replica id after the server refused the outbox with this error.
    case renewing(refusal: APIError)
    /// Comparing the digests: after the outbox and the pages, or (`final`) after repair.
    case checkingDigest(final: Bool)
    /// Repair: comparing, reading ids, pushing what the server lacks, fetching what it has.
    case comparing(round: Int)
    case readingIDs(round: Int, theirs: Set<Stamp>, deviceTime: Int64, skew: Int64)
    case repairPushing(round: Int, remaining: ArraySlice<Stamp>, wanted: [Stamp], batch: [Event])
    case fetching(round: Int, remaining: ArraySlice<Stamp>, asked: [Stamp])
  }

  /// The cursor into the server's log, as committed.
  private(set) var cursor: UInt64
  /// How sync calls are encoded; JSON for good once a server refused the binary encoding.
  private(set) var encoding: SyncEncoding
  /// What the sync did so far.
  private(set) var report = SyncReport()
  private var budget: Budget
  private let initialBudget: Budget
  private let pageSize: Int
  /// How far ahead of the server's clock it takes events, in milliseconds.
  private let skewBound: Int64
  private var restampedOnce = false
  private var cursorResetOnce = false
  private var renewedOnce = false
  private var phase = Phase.idle
  /// The call asked ahead with the last commit, until the next push.
  private var prefetched: Call?

  /// A machine for one sync from `cursor`.
  init(
    cursor: UInt64, encoding: SyncEncoding, pageSize: Int, pushSize: Int, pushBytes: Int,
    maximumClockSkew: Duration
  ) {
    self.cursor = cursor
    self.encoding = encoding
    self.pageSize = pageSize
    initialBudget = Budget(events: max(1, pushSize), bytes: max(1, pushBytes))
    budget = initialBudget
    skewBound = Int64(clamping: Milliseconds(maximumClockSkew).rawValue)
  }

  /// Starts the sync.
  mutating func start() -> Action {
    phase = .outbox(batch: [])
    return .readOutbox(limit: budget.events)
  }

  // MARK: - The outbox

  /// The outbox events read, oldest first.
  mutating func outboxRead(_ outbox: [LoggedEvent]) -> Action {
    let batch = Array(outbox.prefix(Self.count(outbox.map(\.event), fittingIn: budget.bytes)))
    phase = .outbox(batch: batch)
    return .uploadBlobs(batch.map(\.event))
  }

  /// The attachment bytes of the batch are on the server.
  mutating func blobsUploaded(_ count: Int) -> Action {
    report.blobsUploaded += count
    switch phase {
    case .outbox(let batch):
      return push(batch.map(\.event))
    case .repairPushing(_, _, _, let batch):
      return push(batch)
    default:
      return unexpected("blobs uploaded")
    }
  }

  /// The push of these events: the page asked ahead if it is that call.
  private mutating func push(_ events: [Event]) -> Action {
    let call = Call(
      push: SyncPush(cursor: cursor, events: events, limit: pageSize), encoding: encoding)
    defer { prefetched = nil }
    if call == prefetched { return .takePrefetched }
    var outboxThrough: UInt64?
    if case .outbox(let batch) = phase { outboxThrough = batch.last?.sequence }
    return .push(call.push, encoding: call.encoding, outboxThrough: outboxThrough)
  }

  /// The page asked ahead could not be had: the same call is made as any other, and fails
  /// there if the failure holds.
  mutating func prefetchFailed() -> Action {
    guard case .outbox(let batch) = phase else { return unexpected("a failed prefetch") }
    return push(batch.map(\.event))
  }

  /// The server stored the push and answered with the page after the cursor.
  mutating func pageReceived(_ page: SyncPage) -> Action {
    report.calls += 1
    switch phase {
    case .outbox(let batch):
      // A pull with more to pull: the next page is asked while this one is committed.
      if batch.isEmpty && page.more {
        prefetched = Call(
          push: SyncPush(cursor: page.cursor, events: [], limit: pageSize), encoding: encoding)
      }
      return .commit(page, acknowledgingThrough: batch.last?.sequence, prefetch: prefetched)
    case .repairPushing:
      report.repaired += page.stored
      return .commit(page, acknowledgingThrough: nil, prefetch: nil)
    default:
      return unexpected("a page")
    }
  }

  /// The server refused the push. `deviceTime` is this device's clock now (milliseconds).
  mutating func pushRefused(_ error: APIError, deviceTime: Int64) -> Action {
    let events: [Event]
    switch phase {
    case .outbox(let batch): events = batch.map(\.event)
    case .repairPushing(_, _, _, let batch): events = batch
    default: return unexpected("a refused push")
    }
    if error.status == 415, encoding != .json {
      encoding = .json
      return push(events)
    }
    // A cursor past the end of the server's log: the server lost events this device saw
    // (restored from a backup). Pulled again from the start, what the store holds is skipped,
    // and the comparison of digests at the end pushes back what the server lost — from the
    // store's log, not only its outbox — and fetches what it lacks.
    if error.body?.code == .invalidCursor, !cursorResetOnce {
      cursorResetOnce = true
      cursor = 0
      report.cursorReset = true
      return again()
    }
    if case .outbox(let batch) = phase, error.body?.code == .eventCollision {
      // Under ids another device used: the events before the first go as they are, then
      // the rest under a new replica id.
      let first = error.body?.events?.first.flatMap { Stamp(hex: $0) }
      if let first, let index = batch.firstIndex(where: { $0.event.stamp == first }), index > 0 {
        budget = Budget(events: index, bytes: budget.bytes)
        return again()
      }
      if !renewedOnce {
        renewedOnce = true
        phase = .renewing(refusal: error)
        return .renewReplica
      }
    }
    if error.status == 413, events.count > 1 {
      budget = Budget(events: max(1, events.count / 2), bytes: max(1, budget.bytes / 2))
      return again()
    }
    // Stamped ahead of the server's clock: by a device whose clock was ahead (which the store
    // now corrects by the server's), or before the device's clock was set right.
    if case .outbox = phase, !restampedOnce, error.body?.code == .clockSkew,
      let text = error.body?.serverTime, let serverTime = ISO8601.parse(text)
    {
      restampedOnce = true
      phase = .restamping(refusal: error)
      return .restamp(after: serverTime)
    }
    return .fail(error)
  }

  /// The push of the same place again, with the budget as it is now.
  private mutating func again() -> Action {
    switch phase {
    case .repairPushing(let round, let remaining, let wanted, _):
      phase = .repairPushing(round: round, remaining: remaining, wanted: wanted, batch: [])
      return .readEvents(Array(remaining.prefix(budget.events)))
    default:
      phase = .outbox(batch: [])
      return .readOutbox(limit: budget.events)
    }
  }

  /// The outbox events stamped ahead were given new stamps (`count` of them; 0 if none were).
  mutating func restamped(_ count: Int) -> Action {
    guard case .restamping(let refusal) = phase else { return unexpected("a restamp") }
    // Nothing to restamp: the refusal stands.
    guard count > 0 else { return .fail(refusal) }
    report.restamped = count
    phase = .outbox(batch: [])
    return .readOutbox(limit: budget.events)
  }

  /// The outbox was given a new replica id: `count` events moved (0 if there were none).
  mutating func replicaRenewed(_ count: Int) -> Action {
    guard case .renewing(let refusal) = phase else { return unexpected("a new replica id") }
    guard count > 0 else { return .fail(refusal) }
    report.movedToNewReplica += count
    budget = initialBudget
    phase = .outbox(batch: [])
    return .readOutbox(limit: budget.events)
  }

  /// The page is committed, with `appended` events the store did not have; `outbox` local
  /// events remain unacknowledged.
  mutating func committed(page: SyncPage, appended: Int, outbox: Int) -> Action {
    cursor = page.cursor
    report.pulled += page.events.count
    report.applied += appended
    report.serverEventSetDigest = page.eventSetDigest
    switch phase {
    case .outbox(let batch):
      report.pushed += batch.count
      // An outbox that counts events but gives none would be read again for ever.
      if batch.isEmpty, !page.more, outbox > 0 {
        return .fail(
          APIError(
            .invalidRequest,
            "the store counts \(outbox) unacknowledged events but its outbox gives none: "
              + "verify the store (vlog verify)"))
      }
      guard !page.more && outbox == 0 else {
        phase = .outbox(batch: [])
        return .readOutbox(limit: budget.events)
      }
      phase = .checkingDigest(final: false)
      return .readDigest
    case .repairPushing(let round, let remaining, let wanted, let batch):
      let rest = remaining.dropFirst(batch.count)
      return repairPush(round: round, remaining: rest, wanted: wanted)
    default:
      return unexpected("a commit")
    }
  }

  // MARK: - Repair

  /// The store's event-set digest: once the outbox is pushed and every page pulled, and
  /// again after repair.
  mutating func digestRead(_ local: EventSetDigest) -> Action {
    guard case .checkingDigest(let final) = phase else { return unexpected("a digest") }
    report.inSync = local == report.serverEventSetDigest
    return report.inSync || final ? .finish(report) : compare(round: 0)
  }

  private mutating func compare(round: Int) -> Action {
    guard round < Self.repairRounds else { return checkAgain() }
    phase = .comparing(round: round)
    return .compare
  }

  /// Repair is over: the last comparison of the digests.
  private mutating func checkAgain() -> Action {
    phase = .checkingDigest(final: true)
    return .readDigest
  }

  /// The server's answer to the bucket digests. `deviceTime` is this device's clock and
  /// `skew` the server's clock minus it, as last measured (milliseconds).
  mutating func compared(_ comparison: Comparison, deviceTime: Int64, skew: Int64) -> Action {
    guard case .comparing(let round) = phase else { return unexpected("a comparison") }
    report.calls += 1
    report.serverEventSetDigest = comparison.eventSetDigest
    guard !comparison.ids.isEmpty else { return checkAgain() }
    let buckets = comparison.ids.keys.sorted()
    phase = .readingIDs(
      round: round, theirs: Set(comparison.ids.values.joined()), deviceTime: deviceTime,
      skew: skew)
    return .readIDs(buckets: buckets)
  }

  /// The store's ids in the buckets the server listed.
  mutating func idsRead(_ ours: Set<Stamp>) -> Action {
    guard case .readingIDs(let round, let theirs, let deviceTime, let skew) = phase else {
      return unexpected("ids")
    }
    // What the server would refuse as stamped too far ahead waits for a later sync.
    let plan = RepairPlan(
      ours: ours, theirs: theirs, deviceTime: deviceTime, skew: skew, skewBound: skewBound)
    report.deferred = plan.later.count
    budget = initialBudget
    if plan.push.isEmpty && plan.fetch.isEmpty { return checkAgain() }
    return repairPush(round: round, remaining: plan.push[...], wanted: plan.fetch)
  }

  private mutating func repairPush(
    round: Int, remaining: ArraySlice<Stamp>, wanted: [Stamp]
  ) -> Action {
    guard !remaining.isEmpty else { return fetch(round: round, remaining: wanted[...]) }
    phase = .repairPushing(round: round, remaining: remaining, wanted: wanted, batch: [])
    return .readEvents(Array(remaining.prefix(budget.events)))
  }

  /// The store's events read for a repair push.
  mutating func eventsRead(_ events: [Event]) -> Action {
    guard case .repairPushing(let round, let remaining, let wanted, _) = phase else {
      return unexpected("events")
    }
    let batch = Array(events.prefix(Self.count(events, fittingIn: budget.bytes)))
    guard !batch.isEmpty else { return fetch(round: round, remaining: wanted[...]) }
    phase = .repairPushing(round: round, remaining: remaining, wanted: wanted, batch: batch)
    return .confirmKeys(batch)
  }

  /// The server holds the keys of the repair batch's events. Those in `unsealable` (an
  /// encrypted account's attachment additions whose bytes this device never had) are left to
  /// a device that has the bytes.
  mutating func keysConfirmed(leaving unsealable: Set<Stamp> = []) -> Action {
    guard case .repairPushing(let round, var remaining, let wanted, var batch) = phase else {
      return unexpected("keys confirmed")
    }
    if !unsealable.isEmpty {
      remaining = ArraySlice(remaining.filter { !unsealable.contains($0) })
      batch.removeAll { unsealable.contains($0.stamp) }
      report.deferred += unsealable.count
      guard !batch.isEmpty else {
        return repairPush(round: round, remaining: remaining, wanted: wanted)
      }
      phase = .repairPushing(round: round, remaining: remaining, wanted: wanted, batch: batch)
    }
    return .uploadBlobs(batch)
  }

  private mutating func fetch(round: Int, remaining: ArraySlice<Stamp>) -> Action {
    guard !remaining.isEmpty else { return compare(round: round + 1) }
    let asked = Array(remaining.prefix(initialBudget.events))
    phase = .fetching(round: round, remaining: remaining, asked: asked)
    return .fetch(asked)
  }

  /// The server's answer to a fetch: what it holds of the ids asked, in the order asked.
  mutating func fetched(_ events: [Event]) -> Action {
    guard case .fetching = phase else { return unexpected("fetched events") }
    report.calls += 1
    report.pulled += events.count
    return .ingest(events)
  }

  /// The fetched events are in the store, `appended` of them new.
  mutating func ingested(_ events: [Event], appended: Int) -> Action {
    guard case .fetching(let round, let remaining, let asked) = phase else {
      return unexpected("an ingest")
    }
    report.applied += appended
    report.fetched += appended
    // What comes after the last one sent is asked again; nothing sent means the server holds
    // none of them.
    guard let last = events.last, let position = asked.firstIndex(of: last.stamp) else {
      return compare(round: round + 1)
    }
    return fetch(round: round, remaining: remaining.dropFirst(position + 1))
  }

  // MARK: - Unexpected reports

  private func unexpected(_ what: String) -> Action {
    .fail(APIError(.invalidResponse, "the sync got \(what) it did not wait for (\(phase))"))
  }

  // MARK: - Batches

  /// How many of the oldest `events` have encodings that add up to at most `bytes`, and at
  /// least one, so that every push makes progress.
  static func count(_ events: [Event], fittingIn bytes: Int) -> Int {
    var total = 0
    var count = 0
    for event in events {
      total += event.encoded().count
      guard count == 0 || total <= bytes else { break }
      count += 1
    }
    return count
  }
}
