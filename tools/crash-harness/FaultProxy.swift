import Foundation
import Synchronization
import VLogServerTesting
import VLogTesting

#if canImport(Glibc)
  import Glibc
#endif

/// What the proxy does to one HTTP exchange.
enum NetworkFault: String, CaseIterable, Sendable {
  /// Forwarded as it is.
  case none
  /// Held for a while before it is forwarded.
  case delay
  /// The connection closed before the request reaches the server.
  case dropRequest = "drop request"
  /// Half the request reaches the server, then both connections close.
  case truncateRequest = "truncate request"
  /// The device's connection reset (RST) before the request reaches the server.
  case resetRequest = "reset request"
  /// The request reaches the server twice (once on a connection of its own), the device
  /// getting the second answer.
  case duplicateRequest = "duplicate request"
  /// The server answers (its commit done); the answer never reaches the device, whose
  /// connection closes.
  case loseResponse = "lose response"
  /// Half the answer reaches the device, then its connection closes.
  case truncateResponse = "truncate response"
  /// The server answers; the device's connection is reset instead.
  case resetResponse = "reset response"
  /// A live channel cut after a while.
  case cutStream = "cut live channel"
}

/// An HTTP/1.1 proxy on loopback between devices and a server that breaks exchanges: a network
/// that drops, delays, duplicates, truncates and resets requests and answers, an answer lost
/// after the server committed included. A live channel (an event stream) is piped as it comes,
/// and cut after a while.
///
/// The faults come from a seeded generator, drawn in the order exchanges arrive: a run's mix
/// of faults is the seed's, but threads' timing decides which exchange meets which, so a run
/// is not replayed exactly. It speaks the HTTP/1.1 the sync client does (requests with a
/// length, no `Expect: 100-continue`).
///
/// It runs on threads of its own with blocking sockets, off Swift concurrency's. The server's
/// port can change (a server restarted after a kill listens on a new one).
final class FaultProxy: Sendable {
  /// The port devices connect to, on 127.0.0.1.
  let port: Int
  private let listener: Int32
  private let upstream = Atomic<Int>(0)
  /// Faults per hundred exchanges; 0 heals the network.
  private let rate = Atomic<Int>(0)
  private let state: Mutex<State>

  private struct State {
    var generator: SeededGenerator
    var counts: [NetworkFault: Int] = [:]
    var connections: [Int32] = []
    var stopped = false
  }

  init(seed: UInt64) throws {
    state = Mutex(State(generator: SeededGenerator(seed: seed)))
    (listener, port) = try LoopbackSockets.listener(backlog: 128)
    Thread.detachNewThread { [self] in accepting() }
  }

  /// The server's port on 127.0.0.1.
  var serverPort: Int {
    get { upstream.load(ordering: .relaxed) }
    set { upstream.store(newValue, ordering: .relaxed) }
  }

  /// Faults per hundred exchanges.
  var faultRate: Int {
    get { rate.load(ordering: .relaxed) }
    set { rate.store(newValue, ordering: .relaxed) }
  }

  /// How many exchanges met each fault so far.
  var counts: [NetworkFault: Int] { state.withLock { $0.counts } }

  /// Stops listening and ends every connection.
  func stop() {
    state.withLock { state in
      state.stopped = true
      shutdown(listener, Int32(SHUT_RDWR))
      for descriptor in state.connections { shutdown(descriptor, Int32(SHUT_RDWR)) }
    }
  }

  /// Ends every connection open now (as a server's death does), leaving the listener.
  func cutAll() {
    state.withLock { state in
      for descriptor in state.connections { shutdown(descriptor, Int32(SHUT_RDWR)) }
    }
  }

  private func accepting() {
    while true {
      let client = accept(listener, nil, nil)
      guard client >= 0 else {
        if errno == EINTR || errno == ECONNABORTED, !state.withLock({ $0.stopped }) { continue }
        close(listener)
        return
      }
      guard track(client) else {
        close(client)
        continue
      }
      Thread.detachNewThread { [self] in
        serve(Connection(client))
        untrack(client)
      }
    }
  }

  private func track(_ descriptor: Int32) -> Bool {
    state.withLock { state in
      guard !state.stopped else { return false }
      state.connections.append(descriptor)
      return true
    }
  }

  /// Forgets and closes a descriptor, under the lock that lists it (so that a shutdown never
  /// reaches a number reused by another connection).
  private func untrack(_ descriptor: Int32) {
    state.withLock { state in
      state.connections.removeAll { $0 == descriptor }
      close(descriptor)
    }
  }

  /// The fault for the next exchange, and a number for its delays.
  private func nextFault(live: Bool) -> (NetworkFault, Int) {
    state.withLock { state in
      let roll = Int.random(in: 0..<100, using: &state.generator)
      let wait = Int.random(in: 1...400, using: &state.generator)
      var fault = NetworkFault.none
      if roll < rate.load(ordering: .relaxed) {
        fault =
          live
          ? [.cutStream, .dropRequest, .resetRequest, .delay].randomElement(
            using: &state.generator)!
          : NetworkFault.allCases.filter { $0 != .none && $0 != .cutStream }
            .randomElement(using: &state.generator)!
      }
      state.counts[fault, default: 0] += 1
      return (fault, wait)
    }
  }

  /// Serves one device connection: exchange after exchange, each through a server connection
  /// of its own, until either side closes or a fault ends it.
  private func serve(_ client: Connection) {
    while let request = client.readMessage(isRequest: true) {
      let live = request.head.hasPrefix("GET /v1/live")
      let isHead = request.head.hasPrefix("HEAD ")
      let (fault, wait) = nextFault(live: live)
      switch fault {
      case .dropRequest:
        return
      case .resetRequest:
        client.reset()
        return
      case .delay:
        usleep(UInt32(wait) * 1000)
      default:
        break
      }
      if fault == .duplicateRequest, !live, let twin = connectUpstream() {
        // The first copy's answer is read and thrown away: the server did the work twice.
        _ = twin.write(request.bytes)
        _ = twin.readMessage(isRequest: false, toHead: isHead)
        untrack(twin.descriptor)
      }
      guard let server = connectUpstream() else { return }
      defer { untrack(server.descriptor) }
      if fault == .truncateRequest {
        _ = server.write(Array(request.bytes.prefix(max(1, request.bytes.count / 2))))
        return
      }
      guard server.write(request.bytes) else { return }
      guard let response = server.readMessage(isRequest: false, toHead: isHead) else { return }
      if response.isStream {
        // A live channel: its head, then its events as they come, until either side ends it
        // or the fault cuts it.
        guard client.write(response.bytes) else { return }
        pipe(from: server, to: client, cutAfter: fault == .cutStream ? wait * 10 : nil)
        return
      }
      switch fault {
      case .loseResponse:
        return
      case .truncateResponse:
        _ = client.write(Array(response.bytes.prefix(response.bytes.count / 2)))
        return
      case .resetResponse:
        client.reset()
        return
      default:
        guard client.write(response.bytes) else { return }
      }
    }
  }

  /// Copies a live channel's answer to the device until either side ends it, or for
  /// `cutAfter` milliseconds: the thread that serves the connection waits on both sockets, so
  /// that a device that goes away ends the pipe at once, and no other thread touches them.
  private func pipe(from server: Connection, to client: Connection, cutAfter: Int?) {
    guard client.write(server.takeBuffered()) else { return }
    let deadline = cutAfter.map { ContinuousClock.now.advanced(by: .milliseconds($0)) }
    var buffer = [UInt8](repeating: 0, count: 16384)
    while true {
      var waiting = [
        pollfd(fd: server.descriptor, events: Int16(POLLIN), revents: 0),
        pollfd(fd: client.descriptor, events: Int16(POLLIN), revents: 0),
      ]
      let timeout: Int32
      if let deadline {
        let left = deadline - ContinuousClock.now
        guard left > .zero else { return }
        timeout = Int32(
          left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1)
      } else {
        timeout = 60_000
      }
      let ready = poll(&waiting, 2, timeout)
      if ready < 0, errno == EINTR { continue }
      // Nothing for a minute (the server pings every 25 s), or an error: the channel is gone.
      guard ready > 0 else {
        if ready == 0, deadline != nil { continue }
        return
      }
      // The device sends nothing on a live channel: anything from it is its end.
      if waiting[1].revents != 0 { return }
      let count = read(server.descriptor, &buffer, buffer.count)
      guard count > 0, client.write(Array(buffer[0..<count])) else { return }
    }
  }

  /// A new connection to the server, or nil if it is down.
  private func connectUpstream() -> Connection? {
    guard let descriptor = try? LoopbackSockets.tcp() else { return nil }
    guard track(descriptor) else {
      close(descriptor)
      return nil
    }
    // No exchange may hold a thread forever: a server that stops answering mid-answer is cut
    // (a minute: far past its live channel's pings, every 25 s).
    var timeout = timeval(tv_sec: 60, tv_usec: 0)
    setsockopt(
      descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    guard LoopbackSockets.connection(descriptor, toPort: serverPort) else {
      untrack(descriptor)
      return nil
    }
    return Connection(descriptor)
  }
}

/// One side of an exchange: a socket read an HTTP/1.1 message at a time.
final class Connection {
  let descriptor: Int32
  /// Bytes read past the last message.
  private var buffered: [UInt8] = []

  init(_ descriptor: Int32) { self.descriptor = descriptor }

  /// A message read whole — its head and its body, by `Content-Length` or chunks — with its
  /// bytes as they came; an event stream (a live channel) is returned with its head only, the
  /// rest left to read (`isStream`). An answer to a HEAD request (`toHead`) has no body. Nil
  /// at the end or on a malformed message.
  func readMessage(isRequest: Bool, toHead: Bool = false) -> (
    head: String, bytes: [UInt8], isStream: Bool
  )? {
    let separator: [UInt8] = Array("\r\n\r\n".utf8)
    var end: Int?
    while end == nil {
      if let found = buffered.firstRange(of: separator) {
        end = found.upperBound
      } else {
        guard buffered.count < 1 << 20, fill() else { return nil }
      }
    }
    guard let end else { return nil }
    let head = String(decoding: buffered[0..<end], as: UTF8.self)
    let fields = head.lowercased()
    var bytes = Array(buffered[0..<end])
    buffered.removeFirst(end)
    if !isRequest, fields.contains("content-type: text/event-stream") {
      return (head, bytes, true)
    }
    if toHead { return (head, bytes, false) }
    if let length = Self.contentLength(fields) {
      guard length >= 0 else { return nil }
      while buffered.count < length { guard fill() else { return nil } }
      bytes += buffered[0..<length]
      buffered.removeFirst(length)
    } else if fields.contains("transfer-encoding: chunked") {
      while true {
        guard let line = readLine() else { return nil }
        bytes += line
        let size = Int(
          String(decoding: line, as: UTF8.self).split(separator: ";").first?
            .trimmingCharacters(in: .whitespacesAndNewlines) ?? "", radix: 16)
        guard let size, size >= 0, size < 1 << 30 else { return nil }
        while buffered.count < size + 2 { guard fill() else { return nil } }
        bytes += buffered[0..<size + 2]
        buffered.removeFirst(size + 2)
        if size == 0 { break }
      }
    } else if !isRequest, !head.hasPrefix("HTTP/1.1 204"), !head.hasPrefix("HTTP/1.1 304") {
      // An answer that ends when the connection does.
      while fill() {}
      bytes += buffered
      buffered = []
    }
    return (head, bytes, false)
  }

  /// The bytes read past the last message, taken.
  func takeBuffered() -> [UInt8] {
    defer { buffered = [] }
    return buffered
  }

  /// The `Content-Length`, if any (negative if it is: the caller refuses it).
  private static func contentLength(_ fields: String) -> Int? {
    for line in fields.split(separator: "\r\n") where line.hasPrefix("content-length:") {
      return Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces))
    }
    return nil
  }

  private func readLine() -> [UInt8]? {
    while true {
      if let found = buffered.firstRange(of: Array("\r\n".utf8)) {
        let line = Array(buffered[0..<found.upperBound])
        buffered.removeFirst(found.upperBound)
        return line
      }
      guard fill() else { return nil }
    }
  }

  /// Reads what the socket has into the buffer; false at the end or on an error.
  private func fill() -> Bool {
    var chunk = [UInt8](repeating: 0, count: 65536)
    let count = read(descriptor, &chunk, chunk.count)
    guard count > 0 else { return false }
    buffered += chunk[0..<count]
    return true
  }

  /// Writes all of `bytes`; false if the connection failed.
  func write(_ bytes: [UInt8]) -> Bool {
    var sent = 0
    while sent < bytes.count {
      let written = bytes[sent...].withUnsafeBytes {
        send(descriptor, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
      }
      guard written > 0 else { return false }
      sent += written
    }
    return true
  }

  /// Sets the connection to reset when it is closed: the peer reads an error, not an end.
  func reset() {
    var option = linger(l_onoff: 1, l_linger: 0)
    setsockopt(descriptor, SOL_SOCKET, SO_LINGER, &option, socklen_t(MemoryLayout<linger>.size))
  }
}
