import Foundation
import Testing
import VLog
import VLogSync

@Suite("Sync messages")
struct SyncMessageTests {
  func decode<T: Decodable>(_ type: T.Type, _ json: String) throws -> T {
    try JSONDecoder().decode(type, from: Data(json.utf8))
  }

  @Test("a request round-trips, and its events come back as the same events")
  func requestRoundTrip() throws {
    let request = SyncRequest(cursor: 42, events: Array(GoldenEvents.events.prefix(3)), limit: 500)
    let data = try JSONEncoder().encode(request)
    let decoded = try JSONDecoder().decode(SyncRequest.self, from: data)
    #expect(decoded == request)
    #expect(
      try decoded.validated(maximumEvents: 10).events == Array(GoldenEvents.events.prefix(3)))
  }

  @Test("a bad event in a request is named by its index and field")
  func badEventInRequest() throws {
    let good = try GoldenEvents.fixture()[0]
    let bad =
      #"{"time":"2026-11-22T05:33:47.507Z","counter":0,"replica":"d7a73666-0946-1e71-5ffe-d556129c8a84","kind":"textSet","note":"nope","text":"x"}"#
    let request = try decode(SyncRequest.self, #"{"cursor":0,"events":["# + good + "," + bad + "]}")
    let error = #expect(throws: WireError.self) { try request.validated(maximumEvents: 10) }
    #expect(error?.path == "events[1].note")
    #expect(ErrorBody(try #require(error)).field == "events[1].note")
  }

  @Test(
    "a number no integer field holds is named with its path, where Foundation names no field; bytes that are not JSON are still not JSON"
  )
  func numberOutOfRange() throws {
    struct Keys: Decodable { var epoch: UInt64 }
    struct Body: Decodable {
      var keys: Keys
      var limit: Int
    }
    for (json, path) in [
      (#"{"keys":{"epoch":18446744073709551616},"limit":1}"#, "keys.epoch"),
      (#"{"keys":{"epoch":1},"limit":-1e30}"#, "limit"),
      (#"{"keys":{"epoch":2.5},"limit":1}"#, "keys.epoch"),
      (#"[{"keys":{"epoch":1}}, {"keys":{"epoch":-1}}]"#, "[1].keys.epoch"),
    ] {
      let error = #expect(throws: WireError.self) {
        if json.hasPrefix("[") {
          _ = try WireJSON.decode([Keys2].self, from: Array(json.utf8))
        } else {
          _ = try WireJSON.decode(Body.self, from: Array(json.utf8))
        }
      }
      #expect(error?.path == path)
      #expect(error?.message.hasPrefix("out of range") == true, "\(error.map { "\($0)" } ?? "")")
    }
    let notJSON = #expect(throws: WireError.self) {
      _ = try WireJSON.decode(Body.self, from: Array(#"{"keys":{"epoch":1"#.utf8))
    }
    #expect(notJSON?.path == "" && notJSON?.message.hasPrefix("not valid JSON") == true)
  }

  struct Keys2: Decodable {
    struct Inner: Decodable { var epoch: UInt64 }
    var keys: Inner
  }

  @Test("a push over the limit is refused naming the limit")
  func tooManyEvents() throws {
    let request = SyncRequest(cursor: 0, events: GoldenEvents.events)
    let error = #expect(throws: WireError.self) { try request.validated(maximumEvents: 5) }
    #expect(
      error?.description == "events: \(GoldenEvents.events.count) events; one sync pushes at most 5"
    )
  }

  @Test(
    "JSON errors in a request name their path",
    arguments: [
      (#"{"cursor":-1,"events":[]}"#, "cursor: -1 is not an integer from 0 to 9223372036854775807"),
      (#"{"cursor":"0","events":[]}"#, "cursor: expected an integer"),
      (#"{"cursor":0}"#, "events: required"),
      (#"{"cursor":0,"events":[],"since":"x"}"#, "since: not a field of this object"),
      (#"{"cursor":null,"events":[]}"#, "cursor: expected an integer, found null"),
      (
        #"{"cursor":0,"events":[{"time":"t","counter":0,"replica":"r"}]}"#,
        "events[0].kind: required"
      ),
    ])
  func requestTypeErrors(json: String, expected: String) throws {
    do {
      _ = try decode(SyncRequest.self, json)
      Issue.record("decoded \(json)")
    } catch let error as DecodingError {
      #expect(WireError(error).description == expected)
    }
  }

  @Test("a null optional field of a request reads as absent")
  func nullOptional() throws {
    let request = try decode(SyncRequest.self, #"{"cursor":3,"events":[],"limit":null}"#)
    #expect(request.limit == nil)
    #expect(request.cursor == 3)
  }

  @Test(
    "a sign-in's device credential is a string or absent: null is refused, as the document says")
  func nullDevice() throws {
    #expect(throws: DecodingError.self) {
      try decode(Credentials.self, #"{"username":"ann","password":"correct horse","device":null}"#)
    }
    let absent = try decode(Credentials.self, #"{"username":"ann","password":"correct horse"}"#)
    #expect(absent.device == nil)
  }

  @Test("a response round-trips and validates its server time and digest")
  func response() throws {
    var digest = EventSetDigest.empty
    for event in GoldenEvents.events { digest.add(event.stamp) }
    let response = SyncResponse(
      events: GoldenEvents.events, cursor: 11, more: false,
      serverTime: Date(timeIntervalSince1970: 1_795_412_027.5), stored: 0, eventSetDigest: digest)
    let decoded = try decode(
      SyncResponse.self, String(decoding: try JSONEncoder().encode(response), as: UTF8.self))
    let page = try decoded.validated()
    #expect(page.events == GoldenEvents.events)
    #expect(page.serverTime == Date(timeIntervalSince1970: 1_795_412_027.5))
    #expect(page.eventSetDigest == digest)
    var broken = decoded
    broken.eventSetDigest = "xyz"
    #expect(throws: WireError.self) { try broken.validated() }
  }
}
