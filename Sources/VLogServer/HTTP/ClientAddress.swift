#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Darwin)
  internal import Darwin
#endif

/// The address a request came from, as the throttles judge it: the connection's peer, or,
/// behind a proxy the operator named (`--trusted-proxy`), the client the proxy says it
/// forwarded for — every client of a TLS-terminating proxy otherwise has the proxy's address.
///
/// Only a named proxy is believed, and only for the hop it added: `Forwarded` (RFC 7239, its
/// `for=` parameters) or else `X-Forwarded-For` is read from the right, past every address
/// that is itself a trusted proxy, and the first other one is the client. Anything a client
/// wrote further left is its own claim, and ignored; an entry that is not an IP address (an
/// obfuscated or `unknown` node) leaves the proxy's own address.
enum ClientAddress {
  /// The client's address: `peer` unless it is one of `trusted`, then the forwarded one.
  static func of(
    peer: String?, forwarded: String?, forwardedFor: String?, trusted: Set<String>
  ) -> String? {
    guard let peer, trusted.contains(peer) else { return peer }
    let hops: [String]
    if let forwarded {
      hops = forwarded.split(separator: ",").compactMap { element in
        element.split(separator: ";").lazy.compactMap { pair -> String? in
          let parts = pair.split(separator: "=", maxSplits: 1)
          guard parts.count == 2,
            parts[0].trimmingWhitespace().lowercased() == "for"
          else { return nil }
          return node(parts[1].trimmingWhitespace())
        }.first
      }
    } else if let forwardedFor {
      hops = forwardedFor.split(separator: ",").map { String($0.trimmingWhitespace()) }
    } else {
      return peer
    }
    for hop in hops.reversed() where !trusted.contains(hop) {
      return isIPAddress(hop) ? hop : peer
    }
    return peer
  }

  /// A `Forwarded` node without its quotes, brackets and port: `"[2001:db8::1]:4711"` →
  /// `2001:db8::1`, `192.0.2.43:80` → `192.0.2.43`.
  private static func node(_ text: Substring) -> String {
    var node = text
    if node.hasPrefix("\""), node.hasSuffix("\""), node.count >= 2 {
      node = node.dropFirst().dropLast()
    }
    if node.hasPrefix("["), let end = node.firstIndex(of: "]") {
      return String(node[node.index(after: node.startIndex)..<end])
    }
    if node.filter({ $0 == ":" }).count == 1, let colon = node.firstIndex(of: ":") {
      return String(node[..<colon])
    }
    return String(node)
  }

  /// Whether `text` is an IPv4 or IPv6 address.
  static func isIPAddress(_ text: String) -> Bool {
    var bytes = [UInt8](repeating: 0, count: 16)
    return bytes.withUnsafeMutableBytes { buffer in
      inet_pton(AF_INET, text, buffer.baseAddress) == 1
        || inet_pton(AF_INET6, text, buffer.baseAddress) == 1
    }
  }
}

extension Substring {
  /// Without spaces and tabs at either end.
  fileprivate func trimmingWhitespace() -> Substring {
    var text = self
    while let first = text.first, first == " " || first == "\t" { text = text.dropFirst() }
    while let last = text.last, last == " " || last == "\t" { text = text.dropLast() }
    return text
  }
}
