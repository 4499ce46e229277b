internal import Foundation

#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Darwin)
  internal import Darwin
#endif

/// TCP sockets on 127.0.0.1 through the C API, for the proxies and raw clients of the tests
/// and harnesses: a listener on a free port, a connection to a port.
package enum LoopbackSockets {
  /// A socket call that failed, and which.
  package struct Failed: Error, CustomStringConvertible {
    package let what: String
    package var description: String { "\(what) failed: \(String(cString: strerror(errno)))" }
  }

  /// A new TCP socket.
  package static func tcp() throws -> Int32 {
    #if canImport(Glibc)
      let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    #else
      let descriptor = socket(AF_INET, SOCK_STREAM, 0)
    #endif
    guard descriptor >= 0 else { throw Failed(what: "socket") }
    return descriptor
  }

  /// The address of `port` on 127.0.0.1.
  static func loopback(port: Int) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    return address
  }

  /// A socket listening on a free port of 127.0.0.1, and the port.
  package static func listener(backlog: Int32 = 64) throws -> (descriptor: Int32, port: Int) {
    let listener = try tcp()
    var address = loopback(port: 0)
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
      pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
        bind(listener, address, length) == 0 && listen(listener, backlog) == 0
          && getsockname(listener, address, &length) == 0
      }
    }
    guard bound else {
      close(listener)
      throw Failed(what: "listen")
    }
    return (listener, Int(UInt16(bigEndian: address.sin_port)))
  }

  /// Connects `descriptor` to `port` on 127.0.0.1; false if it could not.
  package static func connection(_ descriptor: Int32, toPort port: Int) -> Bool {
    var address = loopback(port: port)
    return withUnsafePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
        connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
      }
    } == 0
  }
}
