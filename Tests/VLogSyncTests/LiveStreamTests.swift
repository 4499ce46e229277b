import Testing
import VLogWire

@Suite("The live channel's event stream")
struct LiveStreamTests {
  static let messages: [LiveMessage] = [
    .head(0), .ping, .head(42), .head(UInt64.max),
    .closed(ErrorBody(code: .unauthorized, message: "the session ended; sign in again")),
  ]

  @Test("What the server writes reads back, whole or split at every byte")
  func roundTrip() throws {
    let bytes = Self.messages.flatMap(\.encoded)
    var parser = LiveStreamParser()
    #expect(try parser.read(bytes) == Self.messages)
    for split in 0...bytes.count {
      var parser = LiveStreamParser()
      let read = try parser.read(bytes[..<split]) + parser.read(bytes[split...])
      #expect(read == Self.messages, "split at \(split)")
    }
    var oneByOne = LiveStreamParser()
    var read: [LiveMessage] = []
    for byte in bytes { read += try oneByOne.read([byte]) }
    #expect(read == Self.messages)
  }

  @Test("CRLF and CR line ends, a space or none after the colon, and unknown events and fields")
  func format() throws {
    var parser = LiveStreamParser()
    let text =
      "event: head\r\ndata:{\"head\":7}\r\n\r\n"
      + "id: 3\rretry: 1000\revent: future\rdata: whatever\r\r"
      + ": ping\n\n"
      + "event:head\ndata: {\"head\":8,\"more\":true}\n\n"
    #expect(try parser.read(Array(text.utf8)) == [.head(7), .ping, .head(8)])
  }

  @Test(
    "A line past the bound, and an event whose data is not what its name promises, are errors that say so"
  )
  func refusals() {
    var long = LiveStreamParser()
    let tooLong = Array(repeating: UInt8(ascii: "a"), count: LiveStreamParser.maximumLineBytes + 1)
    #expect(throws: WireError.self) { try long.read(tooLong) }
    for bad in [
      "event: head\ndata: {\"head\":-1}\n\n", "event: head\ndata: 42\n\n",
      "event: head\n\n", "event: closed\ndata: {\"message\":\"no code\"}\n\n",
    ] {
      var parser = LiveStreamParser()
      let error = #expect(throws: WireError.self) { try parser.read(Array(bad.utf8)) }
      #expect(error?.path.hasPrefix("live") == true, "\(bad)")
    }
  }
}
