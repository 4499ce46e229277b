internal import Foundation
internal import NIOSSL
internal import PostgresNIO

/// A PostgreSQL URL: `postgres://user:password@host:port/database?sslmode=disable`, or with a
/// Unix socket, `postgres://user@/database?host=/path/to/socket-directory`.
struct DatabaseURL: CustomStringConvertible {
  let configuration: PostgresClient.Configuration
  let description: String

  init(_ string: String) throws {
    guard let components = URLComponents(string: string),
      let scheme = components.scheme, scheme == "postgres" || scheme == "postgresql"
    else {
      throw StorageError.unusable(
        "'\(Self.redacted(string))' is not a PostgreSQL URL; expected "
          + "postgres://user:password@host:5432/database or postgres://user@/database?host=/socket/dir"
      )
    }
    let query = Dictionary(
      (components.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { $1 })
    let user = components.user.flatMap { $0.removingPercentEncoding } ?? "postgres"
    let password = components.password.flatMap { $0.removingPercentEncoding }
    let path =
      components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
    let database = path.isEmpty ? user : path.removingPercentEncoding ?? path
    let port = components.port ?? Int(query["port"] ?? "") ?? 5432
    let socketDirectory = query["host"].flatMap { $0.hasPrefix("/") ? $0 : nil }
    if let socketDirectory {
      configuration = .init(
        unixSocketPath: "\(socketDirectory)/.s.PGSQL.\(port)", username: user,
        password: password, database: database)
      description = "postgres://\(user)@/\(database)?host=\(socketDirectory)"
      return
    }
    let host = components.host.flatMap { $0.isEmpty ? nil : $0 } ?? "localhost"
    let tls: PostgresClient.Configuration.TLS
    switch query["sslmode"] ?? "disable" {
    case "disable": tls = .disable
    case "prefer": tls = .prefer(.makeClientConfiguration())
    case "require": tls = .require(.makeClientConfiguration())
    case let mode:
      throw StorageError.unusable(
        "sslmode '\(mode)' is not one of disable, prefer, require (in \(Self.redacted(string)))")
    }
    configuration = .init(
      host: host, port: port, username: user, password: password, database: database, tls: tls)
    description = "postgres://\(user)@\(host):\(port)/\(database)"
  }

  /// The URL with its password replaced, for messages and logs.
  static func redacted(_ string: String) -> String {
    guard var components = URLComponents(string: string), components.password != nil else {
      return string
    }
    components.password = "…"
    return components.string ?? "(a URL)"
  }
}
