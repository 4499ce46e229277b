import Foundation
import Testing
import VLog
import VLogWire

@testable import VLogSync

/// The sync client's logic, driven by hand: no network, no store.
@Suite("The sync state machine")
struct SyncMachineTests {
  static let replica = ReplicaID(Identifier(high: 0x5EC, low: 1))
  static let note = NoteID(Identifier(high: 7, low: 7))
  /// The device's clock in these tests, in milliseconds.
  static let deviceTime: Int64 = 1_790_000_000_000

  static func event(_ counter: UInt16, at milliseconds: Int64 = deviceTime) -> Event {
    Event(
      stamp: Stamp(
        time: HybridTime(milliseconds: UInt64(milliseconds), counter: counter), replica: replica),
      change: .textSet(note, text: "edit \(counter)"))
  }

  static func outbox(_ counters: ClosedRange<UInt16>) -> [LoggedEvent] {
    counters.map { LoggedEvent(sequence: UInt64($0), event: event($0)) }
  }

  static func page(
    cursor: UInt64, more: Bool = false, stored: Int = 0, digest: EventSetDigest = .empty
  ) -> SyncPage {
    SyncPage(
      events: [], cursor: cursor, more: more, serverTime: Date(milliseconds: deviceTime),
      stored: stored, eventSetDigest: digest)
  }

  static func machine(pushSize: Int = 1000) -> SyncMachine {
    SyncMachine(
      cursor: 0, encoding: .binary, pageSize: 100, pushSize: pushSize, pushBytes: 4 << 20,
      maximumClockSkew: .seconds(600))
  }

  static func refusal(_ status: Int, _ body: ErrorBody? = nil) -> APIError {
    APIError(.server, "refused", status: status, body: body)
  }

  /// The events of a `push` action, or nil for another action.
  static func pushed(_ action: SyncMachine.Action) -> [Event]? {
    guard case .push(let push, _, _) = action else { return nil }
    return push.events
  }

  @Test(
    "pushes the outbox, acknowledges it with the page that answered, pulls every page, ends in sync"
  )
  func pushAndPull() {
    var machine = Self.machine()
    guard case .readOutbox(let limit) = machine.start() else {
      Issue.record()
      return
    }
    #expect(limit == 1000)
    let outbox = Self.outbox(1...2)
    guard case .uploadBlobs(let events) = machine.outboxRead(outbox) else {
      Issue.record()
      return
    }
    #expect(events == outbox.map(\.event))
    let push = machine.blobsUploaded(0)
    guard case .push(let request, let encoding, let outboxThrough) = push else {
      Issue.record()
      return
    }
    #expect(request.cursor == 0 && request.events == events && encoding == .binary)
    #expect(outboxThrough == 2)
    let digest = EventSetDigest(high: 1, low: 2)
    let first = Self.page(cursor: 5, more: true, stored: 2, digest: digest)
    guard case .commit(_, let acknowledged, nil) = machine.pageReceived(first) else {
      Issue.record()
      return
    }
    #expect(acknowledged == 2)
    guard case .readOutbox = machine.committed(page: first, appended: 3, outbox: 0) else {
      Issue.record()
      return
    }
    // The next push starts from the committed cursor, acknowledging nothing.
    _ = machine.outboxRead([])
    guard case .push(let next, _, _) = machine.blobsUploaded(0) else {
      Issue.record()
      return
    }
    #expect(next.cursor == 5 && next.events.isEmpty)
    let last = Self.page(cursor: 7, digest: digest)
    guard case .commit(_, nil, nil) = machine.pageReceived(last) else {
      Issue.record()
      return
    }
    guard case .readDigest = machine.committed(page: last, appended: 2, outbox: 0) else {
      Issue.record()
      return
    }
    guard case .finish(let report) = machine.digestRead(digest) else {
      Issue.record()
      return
    }
    #expect(report.pushed == 2 && report.applied == 5 && report.calls == 2 && report.inSync)
    #expect(machine.cursor == 7)
  }

  @Test(
    "a pull with more pages asks for the next while committing, taken only if the next call is that one; a failed one is made again"
  )
  func prefetch() {
    var machine = Self.machine()
    _ = machine.start()
    _ = machine.outboxRead([])
    guard case .push(let pull, _, nil) = machine.blobsUploaded(0) else {
      Issue.record()
      return
    }
    #expect(pull.events.isEmpty)
    let first = Self.page(cursor: 5, more: true)
    guard case .commit(_, nil, let ahead?) = machine.pageReceived(first) else {
      Issue.record()
      return
    }
    #expect(ahead == .init(push: SyncPush(cursor: 5, events: [], limit: 100), encoding: .binary))
    _ = machine.committed(page: first, appended: 0, outbox: 0)
    _ = machine.outboxRead([])
    guard case .takePrefetched = machine.blobsUploaded(0) else {
      Issue.record()
      return
    }
    // It failed: the same call is made as any other.
    guard case .push(let again, _, nil) = machine.prefetchFailed() else {
      Issue.record()
      return
    }
    #expect(again == ahead.push)
    let second = Self.page(cursor: 9, more: true)
    guard case .commit(_, nil, .some) = machine.pageReceived(second) else {
      Issue.record()
      return
    }
    // The user wrote meanwhile: the next call pushes, and the page asked ahead is not taken.
    _ = machine.committed(page: second, appended: 0, outbox: 1)
    let outbox = Self.outbox(1...1)
    _ = machine.outboxRead(outbox)
    guard case .push(let pushing, _, 1) = machine.blobsUploaded(0) else {
      Issue.record()
      return
    }
    #expect(pushing.cursor == 9 && pushing.events == outbox.map(\.event))
    // A push that carried events asks nothing ahead, even with more pages to pull.
    guard case .commit(_, 1, nil) = machine.pageReceived(Self.page(cursor: 12, more: true)) else {
      Issue.record()
      return
    }
  }

  @Test("a 413 halves the next push, down to one event; one event refused is a failure")
  func tooLarge() {
    var machine = Self.machine()
    _ = machine.start()
    _ = machine.outboxRead(Self.outbox(1...4))
    #expect(Self.pushed(machine.blobsUploaded(0))?.count == 4)
    guard case .readOutbox(let limit) = machine.pushRefused(Self.refusal(413), deviceTime: 0)
    else {
      Issue.record()
      return
    }
    #expect(limit == 2)
    _ = machine.outboxRead(Self.outbox(1...1))
    #expect(Self.pushed(machine.blobsUploaded(0))?.count == 1)
    guard case .fail(let error) = machine.pushRefused(Self.refusal(413), deviceTime: 0) else {
      Issue.record()
      return
    }
    #expect(error.status == 413)
  }

  @Test("a 415 sends the same push again as JSON, and JSON stays")
  func unsupportedEncoding() {
    var machine = Self.machine()
    _ = machine.start()
    _ = machine.outboxRead(Self.outbox(1...3))
    _ = machine.blobsUploaded(0)
    guard case .push(let push, .json, _) = machine.pushRefused(Self.refusal(415), deviceTime: 0)
    else {
      Issue.record()
      return
    }
    #expect(push.events.count == 3)
    #expect(machine.encoding == .json)
    // A second 415 (JSON refused too) is a failure, not a loop.
    guard case .fail = machine.pushRefused(Self.refusal(415), deviceTime: 0) else {
      Issue.record()
      return
    }
  }

  @Test(
    "an outbox refused for clock skew is restamped once a sync, after the server's time, however wrong the device's clock"
  )
  func clockSkew() {
    func skewRefusal(serverTime: Int64) -> APIError {
      Self.refusal(
        400,
        ErrorBody(
          code: .clockSkew, message: "ahead", field: "events[0].time",
          serverTime: ISO8601.format(milliseconds: serverTime)))
    }
    var machine = Self.machine()
    _ = machine.start()
    _ = machine.outboxRead(Self.outbox(1...2))
    _ = machine.blobsUploaded(0)
    let server = Self.deviceTime + 1000
    guard
      case .restamp(let after) = machine.pushRefused(
        skewRefusal(serverTime: server), deviceTime: Self.deviceTime)
    else {
      Issue.record()
      return
    }
    #expect(after == server)
    guard case .readOutbox = machine.restamped(2) else {
      Issue.record()
      return
    }
    #expect(machine.report.restamped == 2)
    _ = machine.outboxRead(Self.outbox(1...2))
    _ = machine.blobsUploaded(0)
    // Once a sync: a second refusal stands.
    guard
      case .fail = machine.pushRefused(skewRefusal(serverTime: server), deviceTime: Self.deviceTime)
    else {
      Issue.record()
      return
    }

    // A device whose own clock is ahead restamps too, after the server's time: the store
    // stamps by the server's clock once it knows.
    var wrong = Self.machine()
    _ = wrong.start()
    _ = wrong.outboxRead(Self.outbox(1...1))
    _ = wrong.blobsUploaded(0)
    guard
      case .restamp(let after) = wrong.pushRefused(
        skewRefusal(serverTime: Self.deviceTime), deviceTime: Self.deviceTime + 7_200_000)
    else {
      Issue.record()
      return
    }
    #expect(after == Self.deviceTime)

    // Nothing to restamp: the refusal stands.
    var nothing = Self.machine()
    _ = nothing.start()
    _ = nothing.outboxRead(Self.outbox(1...1))
    _ = nothing.blobsUploaded(0)
    _ = nothing.pushRefused(skewRefusal(serverTime: server), deviceTime: Self.deviceTime)
    guard case .fail(let error) = nothing.restamped(0) else {
      Issue.record()
      return
    }
    #expect(error.body?.code == .clockSkew)
  }

  @Test(
    "an outbox refused for ids another device used goes up to the first of them as it is, then under a new replica id, once a sync"
  )
  func collision() {
    func collisionRefusal(_ ids: [UInt16]) -> APIError {
      Self.refusal(
        409,
        ErrorBody(
          code: .eventCollision, message: "held with other bodies", field: "events",
          events: ids.map { Self.event($0).stamp.hex }))
    }
    var machine = Self.machine()
    _ = machine.start()
    _ = machine.outboxRead(Self.outbox(1...4))
    _ = machine.blobsUploaded(0)
    // Events 3 and 4 collide: 1 and 2 go first.
    guard
      case .readOutbox(let limit) = machine.pushRefused(
        collisionRefusal([3, 4]), deviceTime: Self.deviceTime)
    else {
      Issue.record()
      return
    }
    #expect(limit == 2)
    _ = machine.outboxRead(Self.outbox(1...2))
    #expect(Self.pushed(machine.blobsUploaded(0)) == Self.outbox(1...2).map(\.event))
    _ = machine.pageReceived(Self.page(cursor: 2, stored: 2))
    _ = machine.committed(page: Self.page(cursor: 2, stored: 2), appended: 0, outbox: 2)
    _ = machine.outboxRead(Self.outbox(3...4))
    _ = machine.blobsUploaded(0)
    // The first event collides: the outbox takes a new replica id.
    guard
      case .renewReplica = machine.pushRefused(
        collisionRefusal([3, 4]), deviceTime: Self.deviceTime)
    else {
      Issue.record()
      return
    }
    guard case .readOutbox(let limit) = machine.replicaRenewed(2) else {
      Issue.record()
      return
    }
    #expect(limit == 1000)
    #expect(machine.report.movedToNewReplica == 2)
    _ = machine.outboxRead(Self.outbox(3...4))
    _ = machine.blobsUploaded(0)
    // Once a sync: a server that says so again is refused.
    guard
      case .fail(let error) = machine.pushRefused(
        collisionRefusal([3]), deviceTime: Self.deviceTime)
    else {
      Issue.record()
      return
    }
    #expect(error.body?.code == .eventCollision)
  }

  @Test(
    "digests that differ: repair pushes what the server lacks, defers what it would refuse, fetches what the store lacks"
  )
  func repair() {
    var machine = Self.machine()
    _ = machine.start()
    _ = machine.outboxRead([])
    _ = machine.blobsUploaded(0)
    let server = EventSetDigest(high: 9, low: 9)
    let page = Self.page(cursor: 3, digest: server)
    _ = machine.pageReceived(page)
    _ = machine.committed(page: page, appended: 0, outbox: 0)
    guard case .compare = machine.digestRead(.empty) else {
      Issue.record()
      return
    }
    let theirs = Self.event(1)
    let shared = Self.event(2)
    let ours = Self.event(3)
    let ahead = Self.event(4, at: Self.deviceTime + 3_600_000)
    let comparison = Comparison(
      ids: [7: [theirs.stamp, shared.stamp]], complete: true, eventSetDigest: server)
    guard
      case .readIDs(let buckets) = machine.compared(
        comparison, deviceTime: Self.deviceTime, skew: 0)
    else {
      Issue.record()
      return
    }
    #expect(buckets == [7])
    guard case .readEvents(let ids) = machine.idsRead([shared.stamp, ours.stamp, ahead.stamp])
    else {
      Issue.record()
      return
    }
    #expect(ids == [ours.stamp])
    #expect(machine.report.deferred == 1)
    // The keys of what it pushes back are confirmed on the server first: it may have lost
    // them with the events (restored from a backup).
    guard case .confirmKeys([ours]) = machine.eventsRead([ours]),
      case .uploadBlobs([ours]) = machine.keysConfirmed()
    else {
      Issue.record()
      return
    }
    let repairPush = machine.blobsUploaded(0)
    #expect(Self.pushed(repairPush) == [ours])
    // Not the outbox's: nothing after it is prepared meanwhile.
    guard case .push(_, _, nil) = repairPush else {
      Issue.record()
      return
    }
    let repaired = Self.page(cursor: 4, stored: 1, digest: server)
    guard case .commit(_, nil, nil) = machine.pageReceived(repaired) else {
      Issue.record()
      return
    }
    guard case .fetch(let wanted) = machine.committed(page: repaired, appended: 0, outbox: 0)
    else {
      Issue.record()
      return
    }
    #expect(wanted == [theirs.stamp])
    guard case .ingest(let events) = machine.fetched([theirs]) else {
      Issue.record()
      return
    }
    guard case .compare = machine.ingested(events, appended: 1) else {
      Issue.record()
      return
    }
    let settled = Comparison(ids: [:], complete: true, eventSetDigest: server)
    guard case .readDigest = machine.compared(settled, deviceTime: Self.deviceTime, skew: 0)
    else {
      Issue.record()
      return
    }
    guard case .finish(let report) = machine.digestRead(server) else {
      Issue.record()
      return
    }
    #expect(report.repaired == 1 && report.fetched == 1 && report.inSync)
    #expect(machine.cursor == 4)
  }

  @Test("repair stops after its rounds, and says the store is not in sync")
  func repairRounds() {
    var machine = Self.machine()
    _ = machine.start()
    _ = machine.outboxRead([])
    _ = machine.blobsUploaded(0)
    let server = EventSetDigest(high: 1, low: 1)
    let page = Self.page(cursor: 1, digest: server)
    _ = machine.pageReceived(page)
    _ = machine.committed(page: page, appended: 0, outbox: 0)
    var action = machine.digestRead(.empty)
    var rounds = 0
    // A server that lists an event in every comparison but never sends it.
    let missing = Self.event(1)
    while case .compare = action {
      rounds += 1
      let comparison = Comparison(
        ids: [1: [missing.stamp]], complete: false, eventSetDigest: server)
      _ = machine.compared(comparison, deviceTime: Self.deviceTime, skew: 0)
      _ = machine.idsRead([])
      _ = machine.fetched([])
      action = machine.ingested([], appended: 0)
    }
    #expect(rounds == SyncMachine.repairRounds)
    guard case .readDigest = action, case .finish(let report) = machine.digestRead(.empty) else {
      Issue.record()
      return
    }
    #expect(!report.inSync)
  }

  @Test("a report the machine did not ask for is a failure, not a crash")
  func unexpected() {
    var machine = Self.machine()
    _ = machine.start()
    guard case .fail(let error) = machine.fetched([]) else {
      Issue.record()
      return
    }
    #expect(error.message.contains("did not wait for"))
  }
}
