import Foundation
import NIOCore
import NIOEmbedded
import Testing
import VLogServerTesting
import VLogSync
import VLogTesting

@testable import VLogServer

/// The connection cap, tried as a NAT, an IPv6 host and many addresses of slow bodies would:
/// none of them keeps out a client that holds no more than its share.
@Suite("Doors for many behind one address")
struct NATDoorTests {
  /// A connection from `address`, as the registry sees it.
  static func channel(_ address: String) throws -> EmbeddedChannel {
    let channel = EmbeddedChannel()
    channel.remoteAddress = try SocketAddress(ipAddress: address, port: 4711)
    return channel
  }

  @Test(
    "At an address's cap its connection idle longest gives way to a new one from it, one inside a request never does; IPv6 counts by /64"
  )
  func addressCap() throws {
    let registry = ConnectionRegistry(limit: 100, perAddress: 2)
    let (first, second, third) = try (
      Self.channel("192.0.2.1"), Self.channel("192.0.2.1"), Self.channel("192.0.2.1")
    )
    #expect(registry.admit(first) && registry.admit(second))
    // The NAT's third client takes the place of its connection idle longest.
    #expect(registry.admit(third))
    #expect(!registry.holds(first) && registry.holds(second) && registry.holds(third))
    // Inside requests, its connections keep their places: the next one waits.
    registry.setIdle(second, false)
    registry.setIdle(third, false)
    #expect(!registry.admit(try Self.channel("192.0.2.1")))
    #expect(registry.admit(try Self.channel("192.0.2.2")))

    let hosts = ConnectionRegistry(limit: 100, perAddress: 1)
    let (one, other, elsewhere) = try (
      Self.channel("2001:db8:1:2::1"), Self.channel("2001:db8:1:2:ffff:ffff:ffff:fffe"),
      Self.channel("2001:db8:1:3::1")
    )
    #expect(hosts.admit(one))
    hosts.setIdle(one, false)
    // Another address of the same /64 is the same host.
    #expect(!hosts.admit(other))
    #expect(hosts.admit(elsewhere) && hosts.holds(one))
    hosts.setIdle(one, true)
    #expect(hosts.admit(other) && !hosts.holds(one))
  }

  @Test(
    "At the server's cap, the busiest address gives up a connection, its readers of bodies included, before a client with one idle connection does"
  )
  func fairShare() throws {
    let registry = ConnectionRegistry(limit: 6, perAddress: nil)
    let honest = try Self.channel("198.51.100.1")
    #expect(registry.admit(honest))
    var attackers: [EmbeddedChannel] = []
    for _ in 0..<5 {
      let attacker = try Self.channel("192.0.2.9")
      #expect(registry.admit(attacker))
      // A body that keeps pace: its bytes earn it time.
      registry.setIdle(attacker, false)
      registry.setReadingBody(attacker, true)
      registry.received(1 << 20, on: attacker)
      attackers.append(attacker)
    }
    let newcomer = try Self.channel("198.51.100.2")
    #expect(registry.admit(newcomer))
    #expect(registry.holds(honest) && registry.holds(newcomer))
    #expect(attackers.filter { registry.holds($0) }.count == 4)
  }

  @Test(
    "Slow bodies from five addresses, each within its share, reset none of 15 other clients' keep-alive connections"
  )
  func manyAddresses() async throws {
    var configuration = SyncServer.Configuration.testing
    configuration.maximumConnections = 40
    configuration.maximumConnectionsPerAddress = 10
    configuration.idleTimeout = .seconds(120)
    configuration.requestHeadTimeout = .seconds(120)
    try await withServer(configuration: configuration) { server in
      try await withLiveServer(server) { baseURL in
        let port = try #require(baseURL.split(separator: ":").last.flatMap { Int($0) })
        let health = "GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n"
        let outcome = await offPool { () -> Result<[String], any Error> in
          Result {
            // Fifteen clients, each with a keep-alive connection that has been answered once.
            let clients = try (0..<15).map { index in
              try RawConnection(port: port, source: "127.0.0.\(20 + index)")
            }
            for client in clients {
              client.send(health)
              _ = client.receive(waiting: 10) { $0.contains("\r\n\r\n") && $0.hasSuffix("}") }
            }
            // Five addresses, ten connections each, every one reading a large body that keeps
            // pace with the minimum rate.
            let slow = try (0..<50).map { index in
              let connection = try RawConnection(port: port, source: "127.0.0.\(40 + index % 5)")
              connection.send(
                "POST /v1/accounts HTTP/1.1\r\nHost: localhost\r\n"
                  + "Content-Type: application/json\r\nContent-Length: 4000000\r\n\r\n"
                  + String(repeating: " ", count: 20_000))
              return connection
            }
            var answers: [String] = []
            for client in clients {
              client.send(health)
              answers.append(client.receive(waiting: 20) { $0.hasSuffix("}") })
            }
            withExtendedLifetime(slow) {}
            return answers
          }
        }
        let answers = try outcome.get()
        let refused = answers.filter { !$0.hasPrefix("HTTP/1.1 200") }
        #expect(refused.isEmpty, "\(refused.count) of \(answers.count): \(refused)")
        #expect(server.openConnections <= 40)
      }
    }
  }
}

extension NATDoorTests {
  @Test(
    "A NAT whose idle keep-alive connections hold its every place gets its next client answered at once: the one idle longest gives way"
  )
  func nat() async throws {
    var configuration = SyncServer.Configuration.testing
    configuration.maximumConnectionsPerAddress = 3
    configuration.idleTimeout = .seconds(120)
    try await withServer(configuration: configuration) { server in
      try await withLiveServer(server) { baseURL in
        let port = try #require(baseURL.split(separator: ":").last.flatMap { Int($0) })
        let health = "GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n"
        let outcome = await offPool { () -> Result<(String, [Double?]), any Error> in
          Result {
            let idle = try (0..<3).map { _ in try RawConnection(port: port, source: "127.0.0.60") }
            for connection in idle {
              connection.send(health)
              _ = connection.receive(waiting: 10) { $0.hasSuffix("}") }
            }
            let newest = try RawConnection(port: port, source: "127.0.0.60")
            newest.send(health)
            let answer = newest.receive(waiting: 20) { $0.hasSuffix("}") }
            return (answer, lifetimes(of: idle, limit: 2))
          }
        }
        let (answer, lived) = try outcome.get()
        #expect(answer.hasPrefix("HTTP/1.1 200"), "\(answer)")
        // The first, idle longest, was closed; the others are open.
        #expect(lived[0] != nil && lived[1] == nil && lived[2] == nil, "\(lived)")
      }
    }
  }
}
