import Foundation
import ServerTestSupport
import Testing
import VLogServerTesting
import VLogSync
import VLogTesting

@testable import VLog
@testable import VLogServer

/// A client of an older protocol version next to current devices, through a server.
@Suite("Mixed versions: tags changed one by one and an older client")
struct MixedVersionTests {
  @Test(
    "a client before protocol 3 gets the tag kinds as kinds it keeps and forwards them intact; its own whole lists and deletions by name merge",
    arguments: Backend.allCases)
  func olderClient(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      try await withTemporaryDirectory { root in
        let transport = InProcessTransport(server: server)
        let ann = Credentials(username: "ann", password: "correct horse battery")
        let device = try openDevices(
          1, root: root, transport: { _ in transport }, credentials: ann, seed: 7)[0]
        defer { device.store.close() }
        try await device.account.createAccount()
        let note = try await device.store.write { $0.createNote(text: "n", tags: ["x", "gone"]) }
        try await device.store.write { $0.setTags(["x", "added"], of: note) }
        try await device.store.write { $0.deleteTag(named: "X") }
        #expect(try await device.account.sync().inSync)
        #expect(try device.store.note(note)?.tags.map(\.name) == ["added"])

        // The older client pulls without naming a version: the three kinds come as unknown.
        let caller = APICaller(transport: transport)
        let token = try await caller.token(signingInAs: ann)
        let pulled = try await post(
          transport, "/v1/sync", #"{"cursor":0,"events":[]}"#, token: token)
        #expect(pulled.status == 200)
        let page = try JSONSerialization.jsonObject(with: Data(pulled.body)) as? [String: Any]
        let events = try #require(page?["events"] as? [[String: Any]])
        let kinds = events.compactMap { $0["kind"] as? String }
        #expect(Set(kinds).isDisjoint(with: ["tagAdded", "tagRemoved", "tagErased"]), "\(kinds)")
        let unknown = events.filter { $0["kind"] as? String == "unknown" }
        #expect(unknown.compactMap { $0["kindNumber"] as? Int }.sorted() == [12, 13, 14])
        #expect(unknown.allSatisfy { $0["extra"] is String && $0["note"] == nil })

        // It forwards them as it got them (into another account, as a repair would push them):
        // a current device there reads the same events and shows the same tags.
        let bobToken = try await signUp(caller, "bob")
        let forwarded = try JSONSerialization.data(withJSONObject: ["cursor": 0, "events": events])
        let pushed = try await post(
          transport, "/v1/sync", String(decoding: forwarded, as: UTF8.self), token: bobToken)
        #expect(pushed.status == 200, "\(String(decoding: pushed.body, as: UTF8.self))")
        let bob = try openDevices(
          1, root: root + "/bob", transport: { _ in transport },
          credentials: Credentials(username: "bob", password: "correct horse battery"), seed: 8)[0]
        defer { bob.store.close() }
        _ = try await bob.account.sync()
        #expect(try Digests(bob.store) == Digests(device.store))
        #expect(try bob.store.note(note)?.tags.map(\.name) == ["added"])

        // The older client's own changes: a whole list, then a deletion by name.
        let last = try #require(try device.store.events().last).event.stamp
        let older = ReplicaID(Identifier(high: 9, low: 9))
        func stamp(_ offset: UInt64) -> Stamp {
          Stamp(
            time: HybridTime(milliseconds: last.time.milliseconds + offset, counter: 0),
            replica: older)
        }
        let own = [
          Event(stamp: stamp(1), change: .tagsSet(note, tags: ["added", "Quokka"])),
          Event(stamp: stamp(2), change: .tagsSet(note, tags: ["added"])),
          Event(stamp: stamp(3), change: .tagDeleted(name: "QUOKKA")),
        ]
        let body = try JSONEncoder().encode(SyncRequest(cursor: 0, events: own))
        let sent = try await post(
          transport, "/v1/sync", String(decoding: body, as: UTF8.self), token: token)
        #expect(sent.status == 200, "\(String(decoding: sent.body, as: UTF8.self))")
        #expect(try await device.account.sync().inSync)
        #expect(try device.store.note(note)?.tags.map(\.name) == ["added"])
        // The server stored the deletion by key, and the list before it without the name.
        let served = try await server.store.sync(account: 1, pushing: [], after: 0, limit: 100)
        #expect(!served.events.contains { $0.description.lowercased().contains("quokka") })
        #expect(served.events.last?.change == .tagErased(TagKey(name: "quokka")))
        #expect(try await server.verify().faults.isEmpty)
        #expect(try device.store.verify().isEmpty)
      }
    }
  }
}
