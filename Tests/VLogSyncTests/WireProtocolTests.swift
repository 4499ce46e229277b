import Foundation
import Synchronization
import Testing
import VLog
import VLogSync
import VLogWire

/// Answers every request with an empty page, and keeps the requests.
private final class RecordingTransport: Transport {
  let requests = Mutex<[TransportRequest]>([])
  var server: String { "recording" }

  func send(_ request: TransportRequest) async throws -> TransportResponse {
    requests.withLock { $0.append(request) }
    let page = SyncPage(
      events: [], cursor: 0, more: false, serverTime: Date(timeIntervalSince1970: 0), stored: 0,
      eventSetDigest: .empty)
    return TransportResponse(
      status: 200, headers: ["content-type": "application/json"],
      body: Array(try JSONEncoder().encode(SyncResponse(page))))
  }
}

@Suite("Protocol versions: an older client reads what a newer server sends")
struct WireProtocolTests {
  static let note = NoteID(Identifier(high: 1, low: 2))
  static let replica = ReplicaID(Identifier(high: 3, low: 4))
  static func stamp(_ milliseconds: UInt64) -> Stamp {
    Stamp(time: HybridTime(milliseconds: milliseconds, counter: 0), replica: replica)
  }
  static let edit = Event(
    stamp: stamp(2_000), change: .textSet(note, text: "edited", replacing: [stamp(1_000)]))

  @Test(
    "the header names the version: none is 1, a newer one is this one's, anything else is refused")
  func header() throws {
    #expect(try WireProtocol(header: nil) == .first)
    #expect(try WireProtocol(header: "1") == .first)
    #expect(try WireProtocol(header: "2") == .textBases)
    #expect(try WireProtocol(header: "4") == .redactedAuthenticators)
    #expect(try WireProtocol(header: "5") == .current)
    #expect(try WireProtocol(header: "3") == .tagsOneByOne)
    #expect(try WireProtocol(header: "17") == .current)
    for bad in ["", "0", "-1", "two", "1.5", " 2", "9999999999"] {
      #expect(throws: WireError.self, "\(bad)") { try WireProtocol(header: bad) }
    }
    let error = try #require(throws: WireError.self) { try WireProtocol(header: "x") }
    #expect(error.path == "VLog-Protocol")
  }

  @Test("to version 1 a text change's base travels as a field it keeps; this version reads it back")
  func textBaseForVersionOne() throws {
    let older = WireProtocol.first.form(of: Self.edit)
    // The binary encoding is the same bytes: to version 1, field 16 is a field it keeps.
    #expect(older.encoded() == Self.edit.encoded())
    guard case .textSet(_, _, nil) = older.change else {
      Issue.record("version 1 is sent no base: \(older)")
      return
    }
    let json = try JSONEncoder().encode(WireEvent(older))
    let object = try #require(try JSONSerialization.jsonObject(with: json) as? [String: Any])
    #expect(object["replaces"] == nil)
    #expect(object["extra"] != nil)
    // A version 1 client forwards it as it got it; this version reads the base back.
    let forwarded = try JSONDecoder().decode(WireEvent.self, from: json).event()
    #expect(forwarded == Self.edit)
    // The current version gets it by name.
    #expect(WireProtocol.current.form(of: Self.edit) == Self.edit)
    let current = try JSONEncoder().encode(WireEvent(Self.edit))
    let currentObject = try #require(
      try JSONSerialization.jsonObject(with: current) as? [String: Any])
    #expect(currentObject["replaces"] as? [String] == [Self.stamp(1_000).hex])
  }

  @Test(
    "before version 3 the tag kinds travel as kinds the client keeps; forwarded back, they are read as they were"
  )
  func tagKindsForOlderVersions() throws {
    let events = [
      Event(stamp: Self.stamp(3_000), change: .tagAdded(Self.note, name: "Paris")),
      Event(stamp: Self.stamp(3_001), change: .tagRemoved(Self.note, tag: TagKey(name: "rome"))),
      Event(stamp: Self.stamp(3_002), change: .tagErased(TagKey(name: "oslo"))),
      Event(stamp: Self.stamp(3_003), change: .tagAdded(Self.note, name: "x")).redacted(.deleted),
    ]
    for event in events {
      for version in [WireProtocol.first, .textBases] {
        let older = version.form(of: event)
        #expect(older.change == .unknown(kind: event.change.kind), "\(event)")
        // The same bytes: the binary encoding needs nothing else.
        #expect(older.encoded() == event.encoded(), "\(event)")
        let json = try JSONEncoder().encode(WireEvent(older))
        let object = try #require(try JSONSerialization.jsonObject(with: json) as? [String: Any])
        #expect(object["kind"] as? String == "unknown")
        #expect(object["kindNumber"] as? UInt64 == event.change.kind.rawValue)
        #expect(object["tag"] == nil && object["name"] == nil && object["note"] == nil)
        // An older client forwards it as it got it; this version reads the event back.
        #expect(try JSONDecoder().decode(WireEvent.self, from: json).event() == event)
      }
      #expect(WireProtocol.current.form(of: event) == event)
      let current = try JSONDecoder().decode(
        WireEvent.self, from: JSONEncoder().encode(WireEvent(event)))
      #expect(try current.event() == event)
    }
  }

  @Test("to version 1 a redacted text change carries its ids alone, as version 1 requires")
  func redactedForVersionOne() throws {
    let redacted = Self.edit.redacted(.superseded)
    let older = WireProtocol.first.form(of: redacted)
    let expected = try #require(
      Event.redacted(
        stamp: Self.edit.stamp, change: .textSet(Self.note, text: ""), reason: .superseded))
    #expect(older == expected)
    #expect(older.encoded() != redacted.encoded())
    let object = try #require(
      try JSONSerialization.jsonObject(with: JSONEncoder().encode(WireEvent(older)))
        as? [String: Any])
    #expect(Set(object.keys) == ["time", "counter", "replica", "kind", "note", "redacted"])
    // The current version keeps what a redacted change replaced.
    #expect(try Event(encoded: redacted.encoded()) == redacted)
  }

  @Test("the client names its version on the requests answered with events")
  func clientSendsVersion() async throws {
    let transport = RecordingTransport()
    let caller = APICaller(transport: transport)
    _ = await caller.send(
      Endpoints.Sync(SyncPush(cursor: 0, events: [])), token: "token")
    _ = await caller.send(Endpoints.Fetch(ids: []), token: "token")
    let headers = transport.requests.withLock { $0.map(\.headers) }
    #expect(headers.count == 2)
    #expect(headers.allSatisfy { $0["vlog-protocol"] == WireProtocol.current.description })
  }
}
