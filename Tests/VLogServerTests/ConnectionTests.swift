import Foundation
import Testing
import VLogServer

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// A raw TCP connection to the loopback server, to behave as no HTTP client would.
final class RawConnection {
  let descriptor: Int32

  struct Failed: Error { let what: String }

  init(port: Int) throws {
    #if canImport(Glibc)
      descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    #else
      descriptor = socket(AF_INET, SOCK_STREAM, 0)
    #endif
    guard descriptor >= 0 else { throw Failed(what: "socket") }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let connected = withUnsafePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
      }
    }
    guard connected == 0 else {
      close(descriptor)
      throw Failed(what: "connect")
    }
  }

  deinit { close(descriptor) }

  func send(_ text: String) {
    let bytes = Array(text.utf8)
    _ = bytes.withUnsafeBytes { Glibc.send(descriptor, $0.baseAddress, $0.count, 0) }
  }

  /// Seconds until the server closes the connection, reading and discarding what it sends, or
  /// nil if it is still open after `limit` seconds.
  func secondsUntilClosed(limit: Int) -> Double? {
    var timeout = timeval(tv_sec: limit, tv_usec: 0)
    setsockopt(
      descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    let start = Date()
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
      let count = recv(descriptor, &buffer, buffer.count, 0)
      if count > 0 { continue }
      if count == 0 || errno == ECONNRESET { return Date().timeIntervalSince(start) }
      return nil
    }
  }
}

@Suite("Connections")
struct ConnectionTests {
  @Test("Idle, slow-header and stalled-body connections are closed; past the cap, at once")
  func timeoutsAndCap() async throws {
    var configuration = SyncServer.Configuration.testing
    configuration.idleTimeout = .seconds(1)
    configuration.maximumConnections = 2
    try await withServer(configuration: configuration) { server in
      try await withLiveServer(server) { baseURL in
        let port = try #require(baseURL.split(separator: ":").last.flatMap { Int($0) })
        // Before, all of these stayed open for good.
        let idle = try RawConnection(port: port)
        let slowHeader = try RawConnection(port: port)
        slowHeader.send("POST /v1/sync HTT")
        try await Task.sleep(for: .milliseconds(200))
        let pastCap = try RawConnection(port: port)
        let refused = try #require(pastCap.secondsUntilClosed(limit: 5))
        #expect(refused < 0.5)
        let idleClosed = try #require(idle.secondsUntilClosed(limit: 5))
        #expect(idleClosed > 0.3)
        #expect(slowHeader.secondsUntilClosed(limit: 5) != nil)

        let stalled = try RawConnection(port: port)
        stalled.send(
          "POST /v1/sync HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            + "Content-Length: 1000000000000\r\n\r\n{\"cursor\":0,")
        #expect(stalled.secondsUntilClosed(limit: 5) != nil)
      }
    }
  }
}
