import Foundation
import ServerTestSupport
import Synchronization
import Testing
import VLog
import VLogSync
import VLogTesting
import VLogWire

@testable import VLogServer

extension LyingServerTests {
  /// `event`, a JSON event of an encrypted account, as a server would serve it redacted for
  /// `reason`: its ids and its authenticator, nothing else.
  static func redacted(_ event: [String: Any], _ reason: String) -> [String: Any] {
    var kept = event.filter { ["time", "counter", "replica", "kind", "note"].contains($0.key) }
    if event["kind"] as? String == "textSet" { kept["replaces"] = event["replaces"] }
    if let extra = event["extra"] as? String, let bytes = Data(base64Encoded: extra) {
      kept["extra"] = Data(bytes.suffix(authenticatorFieldBytes)).base64EncodedString()
    }
    kept["redacted"] = reason
    return kept
  }

  /// The id of a JSON event, as `key(of:)` gives a stamp's.
  static func key(ofJSON event: [String: Any]) -> String {
    "\(event["time"] ?? "")/\(event["counter"] ?? "")/\(event["replica"] ?? "")"
  }

  static func key(of stamp: Stamp) -> String {
    let time = ISO8601.format(milliseconds: Int64(stamp.time.milliseconds))
    return "\(time)/\(stamp.time.counter)/\(stamp.replica)"
  }

  /// What `vlog sync --check` of a new device says a sync would do: whether it fetches
  /// `fetched`, and why it would refuse `refused`.
  static func predictedRepairs(
    root: String, transport: TamperingTransport, fetched: Stamp, refused: Stamp
  ) async throws -> (Bool, String?) {
    let store = try NoteStore.open(at: root, options: NoteStore.Options(durability: .noSync))
    defer { store.close() }
    let account = try SyncAccount(
      store: store, transport: transport,
      credentials: Credentials(username: "ann", password: EncryptedSyncTests.password),
      stateFile: SyncAccount.stateFile(for: store), encoding: .json, encryption: encryption)
    try await account.signIn()
    let differences = try await account.checkSync().differences
    var fetches = false
    var refusal: String?
    for difference in differences {
      switch (difference.id, difference.repair) {
      case (fetched, .fetch): fetches = true
      case (refused, .never(let reason)): refusal = reason
      default: break
      }
    }
    return (fetches, refusal)
  }

  @Test(
    "A server that serves a note's current text as superseded, or a note no one deleted as deleted, has those events set aside and reported by a new device, which takes them once they are served as they are; the redactions the log's rules made — of a deleted note, of a replaced text — it takes, with their evidence on a later page",
    arguments: Backend.allCases)
  func forgedRedactions(backend: Backend) async throws {
    try await withTemporaryDirectory { root in
      try await Self.withServer(backend, root: root) { _, baseURL in
        let a = try Self.device("a", root: root, transport: HTTPTransport(baseURL: baseURL))
        try await a.account.createAccount()
        try await a.account.signIn()
        let edited = try await a.store.write { $0.createNote(text: "first") }
        try await a.store.write { $0.setText("second", of: edited) }
        try await a.store.write { $0.setText("third", of: edited) }
        let erased = try await a.store.write { $0.createNote(text: "Erased by a lie") }
        let deleted = try await a.store.write { $0.createNote(text: "Deleted for real") }
        try await a.store.write { $0.deleteNote(deleted) }
        // A tag added, then deleted: its addition is redacted as deleted on the server.
        let tagged = try await a.store.write { $0.createNote(text: "Tagged") }
        try await a.store.write { $0.setTags(["Work"], of: tagged) }
        try await a.store.write { $0.deleteTag(named: "Work") }
        // A chain of texts, every one of which the lie serves as superseded.
        let chain = try await a.store.write { $0.createNote(text: "c0") }
        try await a.store.write { $0.setText("c1", of: chain) }
        try await a.store.write { $0.setText("c2", of: chain) }
        // Two texts made apart, both replacing the first: a kept conflict, which no newer text
        // replaced.
        let conflicted = try await a.store.write { $0.createNote(text: "base") }
        try await a.account.sync()
        let b = try Self.device("b", root: root, transport: HTTPTransport(baseURL: baseURL))
        try await b.account.signIn()
        try await b.account.sync()
        try await a.store.write { $0.setText("A", of: conflicted) }
        try await b.store.write { $0.setText("B", of: conflicted) }
        try await a.account.sync()
        try await b.account.sync()
        try await a.account.sync()
        b.store.close()

        let events = try a.store.events(after: 0).map(\.event)
        let texts = events.filter { $0.change.kind == .textSet && $0.change.noteID == edited }
        #expect(texts.count == 3)
        // The lies: the current text as superseded (its predecessor too, which is true), and
        // every event of a note no one deleted as deleted.
        var lies = [
          Self.key(of: texts[2].stamp): "superseded", Self.key(of: texts[0].stamp): "superseded",
        ]
        let erasedEvents = events.filter { $0.change.noteID == erased }
        for event in erasedEvents { lies[Self.key(of: event.stamp)] = "deleted" }
        let chainTexts = events.filter { $0.change.kind == .textSet && $0.change.noteID == chain }
        #expect(chainTexts.count == 3)
        for event in chainTexts { lies[Self.key(of: event.stamp)] = "superseded" }
        let conflict = try #require(
          events.first {
            if case .textSet(conflicted, "A", _) = $0.change { return true }
            return false
          })
        lies[Self.key(of: conflict.stamp)] = "superseded"
        let tagAddition = try #require(events.first { $0.change.kind == .tagAdded })
        #expect(tagAddition.isRedacted)
        let lying = lies

        let honest = Mutex(false)
        let transport = TamperingTransport(baseURL: baseURL) { _, response in
          guard response.status == 200, !honest.withLock({ $0 }) else { return response }
          var response = response
          response.body = Self.rewritten(response.body) { answer in
            guard let events = answer["events"] as? [[String: Any]] else { return }
            answer["events"] = events.map { event in
              lying[Self.key(ofJSON: event)].map { Self.redacted(event, $0) } ?? event
            }
          }
          return response
        }
        // One event a page: the deletion that vouches for the deleted note's redacted events,
        // and the texts that replaced the first, come pages after them.
        let store = try NoteStore.open(
          at: root + "/c", options: NoteStore.Options(durability: .noSync))
        defer { store.close() }
        let c = try SyncAccount(
          store: store, transport: transport,
          credentials: Credentials(username: "ann", password: EncryptedSyncTests.password),
          stateFile: SyncAccount.stateFile(for: store), pageSize: 1, encoding: .json,
          encryption: Self.encryption)
        try await c.signIn()
        let report = try await c.sync()
        #expect(
          report.quarantined == 1 + erasedEvents.count + chainTexts.count + 1 && report.inSync,
          "\(report)")
        let held = Set(try store.events(after: 0).map(\.event.stamp))
        // Set aside: the current text and the note no one deleted.
        #expect(!held.contains(texts[2].stamp))
        #expect(erasedEvents.allSatisfy { !held.contains($0.stamp) })
        #expect(try store.note(erased) == nil)
        // Taken: the replaced text, redacted, and the deleted note's events, redacted.
        #expect(try store.events(withIDs: [texts[0].stamp]).first?.isRedacted == true)
        #expect(try store.note(deleted) == nil)
        // A tag's addition that a tag's deletion redacted, and the tag gone.
        #expect(try store.events(withIDs: [tagAddition.stamp]).first?.isRedacted == true)
        #expect(try store.note(tagged)?.tags.isEmpty == true)
        // Neither a chain served redacted end to end, nor a kept conflict.
        #expect(chainTexts.allSatisfy { !held.contains($0.stamp) })
        #expect(!held.contains(conflict.stamp))
        #expect(
          events.filter { $0.change.noteID == deleted }.allSatisfy { held.contains($0.stamp) })
        let listed = try #require(await c.state.quarantined)
        #expect(listed.count == report.quarantined)
        #expect(listed.allSatisfy { $0.reason.contains("served redacted") }, "\(listed)")
        #expect(try await c.checkSync().quarantined.count == report.quarantined)

        // A device that has not synced yet is told as much by a check: a sync would set these
        // aside, and take the true redactions.
        let (replacedFetched, currentRefusal) = try await Self.predictedRepairs(
          root: root + "/d", transport: transport, fetched: texts[0].stamp,
          refused: texts[2].stamp)
        #expect(replacedFetched)
        #expect(currentRefusal?.contains("served redacted") == true, "\(currentRefusal ?? "")")

        // Served as they are, the next sync takes them.
        honest.withLock { $0 = true }
        let again = try await c.sync()
        #expect(again.inSync, "\(again)")
        #expect(await c.state.quarantined?.isEmpty != false)
        #expect(try store.note(edited)?.text == "third")
        #expect(try store.note(erased)?.text == "Erased by a lie")
        #expect(try store.note(chain)?.text == "c2")
        #expect(try store.note(conflicted)?.conflicts.count == 1)
        #expect(try Digests(store).state == Digests(a.store).state)
      }
    }
  }
}
