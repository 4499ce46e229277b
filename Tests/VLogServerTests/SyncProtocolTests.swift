import Foundation
import ServerTestSupport
import Synchronization
import Testing
import VLogServerTesting
import VLogSync
import VLogTesting

@testable import VLog
@testable import VLogServer

/// Delivers every request, but loses the response of the first sync call: the server commits, the
/// client hears nothing.
final class LoseFirstSyncResponse: Transport {
  let base: any Transport
  var server: String { base.server }
  private let lost = Mutex(false)
  private let responses = Mutex<[SyncPage]>([])
  init(_ base: any Transport) { self.base = base }

  struct Lost: Error {}

  func send(_ request: TransportRequest) async throws -> TransportResponse {
    let response = try await base.send(request)
    guard request.path == "/v1/sync" else { return response }
    let decoded = try Endpoints.Sync(SyncPush(cursor: 0, events: [])).value(from: response)
    responses.withLock { $0.append(decoded) }
    let loseThis = lost.withLock { lost in
      defer { lost = true }
      return !lost
    }
    if loseThis { throw Lost() }
    return response
  }

  var syncResponses: [SyncPage] { responses.withLock { $0 } }
}

/// Answers 415 to sync bodies that are not JSON and ignores `Accept`, as a server that speaks
/// only JSON would.
struct JSONOnlyServer: Transport {
  let base: any Transport
  var server: String { base.server }
  func send(_ request: TransportRequest) async throws -> TransportResponse {
    guard request.path == "/v1/sync" else { return try await base.send(request) }
    guard request.headers["content-type"] == "application/json" else {
      return TransportResponse(
        status: 415, headers: ["content-type": "application/json"],
        body: Array(#"{"code":"unsupportedMediaType","message":"JSON only"}"#.utf8))
    }
    var request = request
    request.headers["accept"] = nil
    return try await base.send(request)
  }
}

/// Records the size of every sync answer.
final class SyncAnswerSizes: Transport {
  let base: any Transport
  var server: String { base.server }
  private let sizes = Mutex<[Int]>([])
  init(_ base: any Transport) { self.base = base }
  func send(_ request: TransportRequest) async throws -> TransportResponse {
    let response = try await base.send(request)
    if request.path == "/v1/sync" { sizes.withLock { $0.append(response.body.count) } }
    return response
  }
  var values: [Int] { sizes.withLock { $0 } }
}

/// Holds every sync call a while before sending it, so that calls overlap.
struct SlowSyncCalls: Transport {
  let base: any Transport
  var server: String { base.server }
  func send(_ request: TransportRequest) async throws -> TransportResponse {
    if request.path == "/v1/sync" { try await Task.sleep(for: .milliseconds(50)) }
    return try await base.send(request)
  }
}

@Suite("Sync protocol")
struct SyncProtocolTests {
  static let ann = Credentials(username: "ann", password: "correct horse battery")

  @Test(
    "A push whose response is lost after the server committed is applied once when retried",
    arguments: Backend.allCases)
  func lostResponse(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      try await withTemporaryDirectory { root in
        let lossy = LoseFirstSyncResponse(InProcessTransport(server: server))
        let sender = try openDevice(
          0, root: root, transport: lossy, credentials: Self.ann, seed: 1, clock: ManualClock())
        let receiver = try openDevice(
          1, root: root, transport: InProcessTransport(server: server), credentials: Self.ann,
          seed: 1, clock: ManualClock())
        defer {
          sender.store.close()
          receiver.store.close()
        }
        try await sender.account.createAccount()
        for index in 0..<5 { try await sender.store.write { $0.createNote(text: "note \(index)") } }
        let events = try sender.store.outboxCount()
        await #expect(throws: APIError.self) { try await sender.account.sync() }
        #expect(try sender.store.outboxCount() == events, "acknowledged without an answer")
        let report = try await sender.account.sync()
        #expect(report.pushed == events && report.inSync)
        #expect(lossy.syncResponses.map(\.stored) == [events, 0])
        let received = try await receiver.account.sync()
        #expect(received.applied == events)
        #expect(try receiver.store.lastSequence() == UInt64(events))
        #expect(try Digests(receiver.store) == Digests(sender.store))
      }
    }
  }

  @Test(
    "90 offline edits of a 100 KB note sync through a server with the default body limit",
    arguments: Backend.allCases)
  func largeOutbox(backend: Backend) async throws {
    var configuration = SyncServer.Configuration.testing
    configuration.maximumBodyBytes = SyncServer.Configuration().maximumBodyBytes
    try await withServer(backend: backend, configuration: configuration) { server in
      try await withTemporaryDirectory { root in
        let devices = try openDevices(
          2, root: root, transport: { _ in InProcessTransport(server: server) },
          credentials: Self.ann, seed: 3, encoding: { $0 == 0 ? .json : .binary })
        defer { for device in devices { device.store.close() } }
        try await devices[0].account.createAccount()
        let id = try await devices[0].store.write { $0.createNote(text: "start") }
        for edit in 0..<90 {
          let text = "\(edit) " + String(repeating: "long text ", count: 10_000)
          try await devices[0].store.write { $0.setText(text, of: id) }
        }
        let pending = try devices[0].store.outboxCount()
        // Before, the whole outbox went in one call, 9 MB, refused with 413 on every sync.
        let report = try await devices[0].account.sync()
        #expect(report.pushed == pending && report.inSync && report.calls > 1)
        let received = try await devices[1].account.sync()
        #expect(received.inSync)
        #expect(try Digests(devices[1].store) == Digests(devices[0].store))
      }
    }
  }

  @Test(
    "A sync answer holds at most the configured bytes of events, and at least one event",
    arguments: Backend.allCases)
  func pagesBoundedByBytes(backend: Backend) async throws {
    var configuration = SyncServer.Configuration.testing
    configuration.maximumPageBytes = 250_000
    try await withServer(backend: backend, configuration: configuration) { server in
      try await withTemporaryDirectory { root in
        let sizes = SyncAnswerSizes(InProcessTransport(server: server))
        let devices = try openDevices(
          2, root: root,
          transport: { $0 == 0 ? InProcessTransport(server: server) as any Transport : sizes },
          credentials: Self.ann, seed: 4)
        defer { for device in devices { device.store.close() } }
        try await devices[0].account.createAccount()
        let id = try await devices[0].store.write { $0.createNote(text: "start") }
        for edit in 0..<10 {
          let text = "\(edit) " + String(repeating: "x", count: 100_000)
          try await devices[0].store.write { $0.setText(text, of: id) }
        }
        try await devices[0].account.sync()
        let text = String(repeating: "y", count: 400_000)
        try await devices[0].store.write { $0.setText(text, of: id) }
        try await devices[0].account.sync()
        let report = try await devices[1].account.sync()
        #expect(report.inSync)
        #expect(try Digests(devices[1].store) == Digests(devices[0].store))
        // Two 100 KB events a page, and the 400 KB event alone on a page of its own.
        #expect(sizes.values.count >= 6)
        #expect(sizes.values.allSatisfy { $0 <= 250_000 || $0 < 410_000 })
        #expect(sizes.values.filter { $0 > 250_000 }.count == 1)
      }
    }
  }

  @Test(
    "Overlapping sync calls on one account run one at a time: nothing is pushed twice",
    arguments: Backend.allCases)
  func overlappingSyncs(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      try await withTemporaryDirectory { root in
        let device = try openDevice(
          0, root: root, transport: SlowSyncCalls(base: InProcessTransport(server: server)),
          credentials: Self.ann, seed: 1, clock: ManualClock())
        defer { device.store.close() }
        try await device.account.createAccount()
        for index in 0..<5 { try await device.store.write { $0.createNote(text: "n\(index)") } }
        let pending = try device.store.outboxCount()
        async let first = device.account.sync()
        async let second = device.account.sync()
        let reports = try await [first, second]
        // Before, both calls read the same outbox and pushed it twice.
        #expect(reports.map(\.pushed).reduce(0, +) == pending)
        #expect(reports.allSatisfy { $0.inSync })
        #expect(await device.account.state.cursor == UInt64(pending))
        #expect(try device.store.outboxCount() == 0)
      }
    }
  }

  @Test(
    "An account falls back to JSON for good when the server refuses the binary encoding",
    arguments: Backend.allCases)
  func binaryFallback(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      try await withTemporaryDirectory { root in
        let device = try openDevice(
          0, root: root, transport: JSONOnlyServer(base: InProcessTransport(server: server)),
          credentials: Self.ann, seed: 1, clock: ManualClock())
        defer { device.store.close() }
        try await device.account.createAccount()
        try await device.store.write { $0.createNote(text: "first") }
        #expect(await device.account.syncEncoding == .binary)
        let pending = try device.store.outboxCount()
        let report = try await device.account.sync()
        #expect(report.pushed == pending && report.inSync)
        #expect(await device.account.syncEncoding == .json)
        try await device.store.write { $0.createNote(text: "second") }
        let again = try await device.account.sync()
        #expect(again.pushed == pending && again.calls == 1 && again.inSync)
      }
    }
  }

  @Test(
    "Stale and overlapping cursors give no gaps and no duplicates; a bad cursor is a 4xx",
    arguments: Backend.allCases)
  func cursors(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      try await withTemporaryDirectory { root in
        let transport = InProcessTransport(server: server)
        let sender = try openDevice(
          0, root: root, transport: transport, credentials: Self.ann, seed: 1,
          clock: ManualClock())
        defer { sender.store.close() }
        try await sender.account.createAccount()
        for index in 0..<10 { try await sender.store.write { $0.createNote(text: "n\(index)") } }
        try await sender.account.sync()
        let total = try sender.store.lastSequence()

        let caller = APICaller(transport: transport)
        let token = try await caller.token(signingInAs: Self.ann)
        let receiver = try NoteStore.open(
          at: root + "/receiver", options: .init(durability: .noSync))
        defer { receiver.close() }
        // Pages of 3 from cursor 0, then the same ranges again from stale and overlapping cursors.
        var cursor: UInt64 = 0
        var pulled = 0
        for stale in [0, 1, 2, 0, 5] as [UInt64] {
          let page = try await caller.sync(
            SyncPush(cursor: min(stale, cursor), events: [], limit: 3), token: token
          ).get()
          pulled += page.events.count
          _ = try await receiver.ingest(page.events)
          cursor = max(cursor, page.cursor)
        }
        while true {
          let page = try await caller.sync(
            SyncPush(cursor: cursor, events: [], limit: 3), token: token
          ).get()
          _ = try await receiver.ingest(page.events)
          cursor = page.cursor
          if !page.more { break }
        }
        #expect(pulled > Int(total) / 2)
        #expect(cursor == total)
        #expect(try receiver.lastSequence() == total)
        #expect(try receiver.eventSetDigest() == sender.store.eventSetDigest())
        #expect(try receiver.stateDigest() == sender.store.stateDigest())

        for bad in [
          #"{"cursor":\#(total + 1),"events":[]}"#, #"{"cursor":9223372036854775807,"events":[]}"#,
        ] {
          let response = try await post(transport, "/v1/sync", bad, token: token)
          #expect(response.status == 400, "\(bad)")
          #expect(try errorBody(response).code == .invalidCursor)
        }
        for bad in [
          #"{"cursor":-1,"events":[]}"#, #"{"cursor":18446744073709551616,"events":[]}"#,
          #"{"cursor":1e99,"events":[]}"#, #"{"cursor":1.5,"events":[]}"#,
          #"{"cursor":null,"events":[]}"#,
        ] {
          let response = try await post(transport, "/v1/sync", bad, token: token)
          #expect(response.status == 400, "\(bad)")
          let error = try errorBody(response)
          #expect(error.field == "cursor", "\(bad): \(error)")
        }

      }
    }
  }

  @Test(
    "Accounts push in any order: the first account's log grows after the second's has",
    arguments: Backend.allCases)
  func accountsInterleave(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      let caller = APICaller(transport: InProcessTransport(server: server))
      let first = try await signUp(caller, "ann")
      let second = try await signUp(caller, "bob")
      func events(_ replica: UInt64, _ count: Int, from start: Int) -> [Event] {
        (start..<start + count).map { index in
          Event(
            stamp: Stamp(
              time: HybridTime(milliseconds: 1_767_225_600_000, counter: UInt16(index)),
              replica: ReplicaID(Identifier(high: replica, low: replica))),
            change: .textSet(NoteID(Identifier(high: 1, low: UInt64(index))), text: "\(index)"))
        }
      }
      // Before, the first account's next push failed with 500 (MDB_KEYEXIST): its entries were
      // appended as if its log were the last in the database.
      for round in 0..<3 {
        for (token, replica) in [(first, UInt64(1)), (second, UInt64(2))] {
          let page = try await caller.sync(
            SyncPush(cursor: 0, events: events(replica, 5, from: round * 5)), token: token
          ).get()
          #expect(page.stored == 5 && page.cursor == UInt64(round * 5 + 5))
        }
      }
      #expect(try await server.verify().faults.isEmpty)
    }
  }

  @Test(
    "A second account naming the first's ids on every endpoint is refused and sees none of it",
    arguments: Backend.allCases)
  func isolation(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      try await withTemporaryDirectory { root in
        let transport = try CheckedTransport(InProcessTransport(server: server))
        let first = try openDevice(
          0, root: root, transport: transport, credentials: Self.ann, seed: 1, clock: ManualClock())
        defer { first.store.close() }
        try await first.account.createAccount()
        let secret = "the first account's secret"
        let bytes = Array("secret attachment".utf8)
        let note = try await first.store.write { changes in
          let note = changes.createNote(text: secret)
          changes.addAttachment(bytes, mimeType: "image/png", to: note)
          return note
        }
        try await first.account.sync()
        let firstEvents = try first.store.events().map(\.event)
        let hash = BlobHash(bytes: sha256(bytes))!

        let caller = APICaller(transport: transport)
        let token = try await signUp(caller, "bob")
        // Comparing and fetching by the first account's ids finds nothing of it.
        let comparison = try await caller.compare(EventSetBuckets(), token: token).get()
        #expect(comparison.ids.isEmpty && comparison.eventSetDigest == .empty)
        let fetched = await caller.fetch(firstEvents.map(\.stamp), token: token)
        #expect(fetched.value == [])
        #expect(!String(decoding: fetched.data, as: UTF8.self).contains(secret))
        var responses: [APIResult<SyncPage>] = []
        // Cursor 0 and cursors into the first account's log.
        responses.append(await caller.sync(SyncPush(cursor: 0, events: []), token: token))
        responses.append(await caller.sync(SyncPush(cursor: 1, events: []), token: token))
        // Pushing the first account's own events stores them in bob's log only.
        responses.append(
          await caller.sync(SyncPush(cursor: 0, events: firstEvents), token: token))
        #expect(responses[0].value?.events.isEmpty == true)
        #expect(responses[1].error?.body?.code == .invalidCursor)
        #expect(responses[2].value?.stored == firstEvents.count)
        #expect(responses[2].value?.events.isEmpty == true)
        let blob = await caller.blob(hash, token: token)
        #expect(blob.status == 404)
        #expect(await caller.signOut(token: "\(token)x").status == 401)
        for response in responses {
          let text = String(decoding: response.data, as: UTF8.self)
          #expect(!text.contains(secret))
        }
        #expect(!String(decoding: blob.data, as: UTF8.self).contains("secret attachment"))
        // The first account is untouched: its log, its digest, its blob, its token.
        let report = try await first.account.sync()
        #expect(report.applied == 0 && report.inSync)
        #expect(try first.store.note(note)?.text == secret)
        let firstToken = await first.account.currentToken!
        #expect(try await caller.blob(hash, token: firstToken).get() == bytes)
        #expect(transport.problems.isEmpty, "\(transport.problems)")
      }
    }
  }
}
