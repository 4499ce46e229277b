internal import Foundation
internal import VLog

/// Seals an encrypted account's pushes one push ahead: while a push is on its way to the
/// server, the outbox events that follow it are read and sealed, so that the device's cores
/// work while the network and the server do, and the next push finds its events sealed.
///
/// An event sealed ahead is sent only as it still is: one restamped (a new stamp) or redacted
/// meanwhile (the event changed) is sealed again. The keyring notes events as sent —
/// forgetting the keys of the notes and attachments they delete — only when they go in a
/// push, in the outbox's order, so that sealing ahead seals every event with the key sealing
/// in turn would.
struct OutboxSealer {
  /// A clear event, and the same event sealed.
  typealias Pair = (clear: Event, sealed: Event)

  let keyring: AccountKeyring
  let store: NoteStore
  /// The events of the last push, in order: a push sent again with fewer (after a 413) finds
  /// them sealed.
  private var sealed: [Pair] = []
  /// The outbox batch after the last push, being sealed.
  private var ahead: Task<[Pair], any Error>?

  init(keyring: AccountKeyring, store: NoteStore) {
    self.keyring = keyring
    self.store = store
  }

  /// `events`, a push, sealed: as sealed ahead where they are unchanged, the rest now; noted
  /// by the keyring as sent.
  mutating func seal(_ events: [Event]) async throws -> [Event] {
    var known: [Pair] = []
    if let ahead {
      self.ahead = nil
      // What failed ahead is not this push's error: those events are sealed in turn below,
      // where an error that still holds is thrown.
      known = (try? await ahead.value) ?? []
    }
    // A push is most often the batch sealed ahead, or the last push again, in the same order:
    // each event is looked for at its own place first, and by stamp only when it is not there.
    let candidates = [known, sealed]
    var byStamp: [Stamp: Pair]?
    var result = events.enumerated().map { index, event -> Event? in
      for pairs in candidates where index < pairs.count && pairs[index].clear.stamp == event.stamp {
        return pairs[index].clear == event ? pairs[index].sealed : nil
      }
      if byStamp == nil {
        byStamp = Dictionary(
          candidates.joined().map { ($0.clear.stamp, $0) }, uniquingKeysWith: { first, _ in first })
      }
      guard let pair = byStamp?[event.stamp], pair.clear == event else { return nil }
      return pair.sealed
    }
    let missing = result.indices.filter { result[$0] == nil }
    if !missing.isEmpty {
      let now = try await keyring.sealAhead(missing.map { events[$0] })
      for (index, event) in zip(missing, now) { result[index] = event }
    }
    let done = result.compactMap { $0 }
    sealed = zip(events, done).map { (clear: $0, sealed: $1) }
    await keyring.noteSealed(done)
    return done
  }

  /// Starts sealing, for the next push, the `limit` outbox events after the one numbered
  /// `sequence`: the last of a push on its way.
  mutating func sealAhead(after sequence: UInt64, limit: Int) {
    ahead?.cancel()
    let (keyring, store) = (keyring, store)
    ahead = Task {
      let next = try store.outbox(after: sequence, limit: limit).map(\.event)
      return Array(zip(next, try await keyring.sealAhead(next, background: true)))
    }
  }

  /// Stops sealing ahead: the sync is over.
  func cancel() { ahead?.cancel() }
}
