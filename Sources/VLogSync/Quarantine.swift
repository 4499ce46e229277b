public import Foundation
public import VLog

/// An event the server served that fails this device's check — no device of the account
/// vouched for it (its authenticator is missing or wrong), or its sealed values do not open
/// as its own: made up or changed by the server, or pushed by someone who holds a token and
/// not the account's keys. The device sets it aside instead of stopping: it stores and applies
/// none of it, syncs on, and counts its id as held when it compares event sets with the
/// server, so that the event is not fetched again and again. `vlog status` and
/// `vlog sync --check` list it. Each sync asks for it again once, and takes it if it then
/// passes.
public struct QuarantinedEvent: Codable, Sendable, Hashable {
  /// The event's id, as 48 hexadecimal digits (`Stamp.hex`).
  public var id: String
  /// Its kind, as the server named it.
  public var kind: String
  /// Why the device refused it.
  public var reason: String
  /// When the device first refused it.
  public var date: Date

  /// Creates an entry.
  public init(id: Stamp, kind: EventKind, reason: String, date: Date) {
    self.id = id.hex
    self.kind = "\(kind)"
    self.reason = reason
    self.date = date
  }

  /// The event's id; nil for an entry a state file holds malformed.
  public var stamp: Stamp? { Stamp(hex: id) }

  /// How many entries a state file keeps: the first ones refused. Past it, a refused event is
  /// still neither stored nor applied, but counted only in the sync's report, and fetched again
  /// by the next comparison of event sets.
  public static let limit = 1000
}

extension SyncState {
  /// `storeDigest`, a store's event-set digest, with the ids of the events this device
  /// quarantined added: what it compares with the server's (``SyncReport/inSync``).
  public func digest(counting storeDigest: EventSetDigest) -> EventSetDigest {
    var digest = storeDigest
    for id in quarantinedIDs { digest.add(id) }
    return digest
  }

  /// The ids of the events this device quarantined.
  var quarantinedIDs: [Stamp] { (quarantined ?? []).compactMap(\.stamp) }

  /// Adds `events`, refused for the reasons given, to the quarantine, each once, up to
  /// ``QuarantinedEvent/limit``.
  ///
  /// - Returns: How many were new.
  mutating func quarantine(_ events: [(Event, String)], at date: Date) -> Int {
    var list = quarantined ?? []
    var known = Set(list.map(\.id))
    var added = 0
    for (event, reason) in events where known.insert(event.stamp.hex).inserted {
      added += 1
      guard list.count < QuarantinedEvent.limit else { continue }
      list.append(
        QuarantinedEvent(id: event.stamp, kind: event.change.kind, reason: reason, date: date))
    }
    quarantined = list
    return added
  }
}

extension SyncAccount {
  /// `events` from the server, checked and opened by `keyring`: those it refuses are put in
  /// quarantine (``QuarantinedEvent``) — unless the store holds their ids already, as its own
  /// or from an earlier page — and left out. A redaction that neither the store nor `events`
  /// vouches for is held back until the pull ends (`settleRedactions()`).
  ///
  /// - Throws: What ``AccountKeyring/open(_:remembering:)`` throws but a refusal of an event:
  ///   keys that changed meanwhile, a server that does not answer.
  func openedOrQuarantined(_ events: [Event], by keyring: AccountKeyring) async throws
    -> [Event]
  {
    let (opened, refused) = try await keyring.openSettingAside(events)
    if !refused.isEmpty {
      let held = Set(try store.events(withIDs: refused.map(\.0.stamp)).map(\.stamp))
      quarantinedInSync += state.quarantine(
        refused.filter { !held.contains($0.0.stamp) }, at: now())
    }
    var lacking = try store.redactionsLackingEvidence(in: opened)
    guard !lacking.isEmpty else { return opened }
    // One the store holds already is skipped by the ingest as it is.
    lacking.subtract(try store.events(withIDs: Array(lacking)).map(\.stamp))
    pendingRedactions += opened.filter { lacking.contains($0.stamp) }
    return opened.filter { !lacking.contains($0.stamp) }
  }

  /// Judges the redactions held back during the pull, now that all its pages are in: those the
  /// store or the others vouch for are ingested, the rest put in quarantine — the device keeps
  /// what it shows rather than take a server's word that a value was erased, and asks again
  /// at the next sync. Before the event sets are compared and when the sync ends.
  func settleRedactions() async throws {
    guard !pendingRedactions.isEmpty else { return }
    let pending = pendingRedactions
    pendingRedactions = []
    let lacking = try store.redactionsLackingEvidence(in: pending)
    let vouched = pending.filter { !lacking.contains($0.stamp) }
    if !vouched.isEmpty { _ = try await store.ingest(vouched) }
    // One a later page brought as it is is held already: nothing to set aside.
    let held = Set(try store.events(withIDs: Array(lacking)).map(\.stamp))
    let unvouched = pending.filter { lacking.contains($0.stamp) && !held.contains($0.stamp) }
      .map { event in (event, Self.unvouchedRedaction(event)) }
    quarantinedInSync += state.quarantine(unvouched, at: now())
  }

  /// Why a redaction was refused.
  static func unvouchedRedaction(_ event: Event) -> String {
    let reason = event.redaction.map { "\($0)" } ?? "redacted"
    return
      "served redacted (\(reason)), but this device holds no deletion of its object"
      + (event.redaction == .superseded ? " and no newer change that replaced it" : "")
  }

  /// Asks the server again for the events in quarantine, and takes those that now pass the
  /// check (a man in the middle that changed a page has gone, say) out of it, into the store.
  /// Once per sync, before it compares event sets, in batches a server takes (at most
  /// ``retryBatch`` ids a call). A server that refuses a batch (4xx) leaves the rest for the
  /// next sync: a retry never stops a sync that would otherwise go on.
  func retryQuarantine(by keyring: AccountKeyring) async throws {
    let ids = state.quarantinedIDs
    guard !ids.isEmpty else { return }
    var released = Set<String>()
    var start = 0
    while start < ids.count {
      let batch = Array(ids[start..<min(start + Self.retryBatch, ids.count)])
      start += Self.retryBatch
      let answer = await fetchForRetry(batch)
      if let refusal = answer.refusal {
        state.lastError = "the server refused to serve quarantined events again: \(refusal)"
        break
      }
      var (opened, _) = try await keyring.openSettingAside(try answer.events.get())
      // A redaction still needs evidence, however often the server serves it.
      let lacking = try store.redactionsLackingEvidence(in: opened)
      opened.removeAll { lacking.contains($0.stamp) }
      guard !opened.isEmpty else { continue }
      _ = try await store.ingest(opened)
      released.formUnion(opened.map(\.stamp.hex))
    }
    state.quarantined?.removeAll { released.contains($0.id) }
  }

  /// `ids` fetched from the server: the events, or the server's refusal (4xx), which ends the
  /// retry for this sync; another failure is the sync's.
  private func fetchForRetry(_ ids: [Stamp]) async -> (
    events: Result<[Event], APIError>, refusal: APIError?
  ) {
    let result: Result<[Event], APIError>
    do {
      result = .success(
        try await call { caller, token in await caller.fetch(ids, token: token) })
    } catch {
      result = .failure(error)
    }
    if case .failure(let error) = result, (400..<500).contains(error.status ?? 0) {
      return (result, error)
    }
    return (result, nil)
  }

  /// The most quarantined ids asked for again in one call: a tenth of a server's default
  /// page of events, well under any push or fetch limit a server sets.
  static let retryBatch = 100

  /// Takes out of quarantine the ids the store now holds (the true event arrived after a
  /// forged one was set aside), so that no id counts twice in the digests.
  func pruneQuarantine() throws {
    let ids = state.quarantinedIDs
    guard !ids.isEmpty else { return }
    let held = Set(try store.events(withIDs: ids).map(\.stamp.hex))
    guard !held.isEmpty else { return }
    state.quarantined?.removeAll { held.contains($0.id) }
  }

  /// The store's bucket digests with the quarantined ids added: what the device compares with
  /// the server's.
  func bucketsCountingQuarantine() throws -> EventSetBuckets {
    try pruneQuarantine()
    var buckets = try store.eventSetBuckets()
    for id in state.quarantinedIDs { buckets.add(id) }
    return buckets
  }

  /// The store's ids in `buckets`, with the quarantined ones that fall in them.
  func idsCountingQuarantine(inBuckets buckets: some Collection<Int>) throws -> Set<Stamp> {
    try pruneQuarantine()
    let wanted = Set(buckets)
    var ids = Set(try store.eventIDs(inBuckets: wanted))
    for id in state.quarantinedIDs where wanted.contains(EventSetBuckets.bucket(of: id)) {
      ids.insert(id)
    }
    return ids
  }
}
