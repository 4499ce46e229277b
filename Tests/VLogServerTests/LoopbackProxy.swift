import Foundation
import LMDB
import Synchronization
import VLogServerTesting

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// A TCP proxy on loopback in front of a Unix socket (a test cluster's PostgreSQL), that can
/// turn into a black hole: while ``blackholed``, it keeps every connection open and drops
/// everything sent either way, as a network that loses its packets does. It runs on threads of
/// its own, off Swift concurrency's.
final class LoopbackProxy: Sendable {
  /// The port it listens on, on 127.0.0.1.
  let port: Int
  private let listener: Int32
  private let target: String
  private let dropping = Atomic<Bool>(false)
  // `Locked`, not `Mutex`: ThreadSanitizer models its pthread mutex.
  private let open = Locked(Descriptors())

  /// The connections' descriptors, and whether ``stop()`` was called.
  private struct Descriptors {
    var list: [Int32] = []
    var stopped = false
  }

  struct Failed: Error { let what: String }

  init(unixSocket target: String) throws {
    self.target = target
    (listener, port) = try LoopbackSockets.listener()
    Thread.detachNewThread { [self] in accepting() }
  }

  /// Whether it drops everything now.
  var blackholed: Bool {
    get { dropping.load(ordering: .relaxed) }
    set { dropping.store(newValue, ordering: .relaxed) }
  }

  /// Stops listening and ends every connection.
  ///
  /// It only shuts descriptors down; the threads that use them close them, under the lock that
  /// lists them. A descriptor closed here while a thread was about to use it could be reused by
  /// the time it did: an `accept` on a reused number takes another server's connections.
  func stop() {
    open.withLock { open in
      open.stopped = true
      shutdown(listener, Int32(SHUT_RDWR))
      for descriptor in open.list { shutdown(descriptor, Int32(SHUT_RDWR)) }
    }
  }

  private func accepting() {
    while true {
      let client = accept(listener, nil, nil)
      guard client >= 0 else {
        // Shut down by stop(), or failed: this thread closes what it listened on.
        if errno == EINTR || errno == ECONNABORTED, !open.withLock({ $0.stopped }) { continue }
        close(listener)
        return
      }
      #if canImport(Glibc)
        let server = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
      #else
        let server = socket(AF_UNIX, SOCK_STREAM, 0)
      #endif
      var address = sockaddr_un()
      address.sun_family = sa_family_t(AF_UNIX)
      withUnsafeMutableBytes(of: &address.sun_path) { path in
        for (index, byte) in target.utf8.prefix(path.count - 1).enumerated() { path[index] = byte }
      }
      let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
          connect(server, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
        }
      }
      guard connected == 0 else {
        close(client)
        close(server)
        continue
      }
      let admitted = open.withLock { open in
        guard !open.stopped else { return false }
        open.list += [client, server]
        return true
      }
      guard admitted else {
        close(client)
        close(server)
        continue
      }
      let done = PumpCount()
      for (from, to) in [(client, server), (server, client)] {
        Thread.detachNewThread { [self] in
          pump(from: from, to: to)
          // The second pump to end closes both.
          if done.ended() == 2 {
            open.withLock { open in
              open.list.removeAll { $0 == client || $0 == server }
              close(client)
              close(server)
            }
          }
        }
      }
    }
  }

  /// Copies what `from` sends to `to` (or drops it while black-holed) until `from` ends.
  private func pump(from: Int32, to: Int32) {
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
      let count = read(from, &buffer, buffer.count)
      guard count > 0 else { break }
      if blackholed { continue }
      var sent = 0
      while sent < count {
        let written = buffer[sent..<count].withUnsafeBytes { write(to, $0.baseAddress, $0.count) }
        guard written > 0 else { break }
        sent += written
      }
      if sent < count { break }
    }
    shutdown(to, Int32(SHUT_WR))
  }
}

/// How many of a connection's two pumps have ended.
private final class PumpCount: Sendable {
  private let count = Atomic<Int>(0)
  func ended() -> Int { count.add(1, ordering: .relaxed).newValue }
}
