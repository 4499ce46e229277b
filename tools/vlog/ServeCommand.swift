import ArgumentParser
import Foundation
import Logging
import VLog
import VLogServer
import VLogSync

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// `vlog serve`: the sync server.
struct Serve: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Run the sync server.",
    discussion: """
      Serves the HTTP API described at /v1/openapi.json until interrupted (SIGINT or SIGTERM), \
      then finishes the requests in flight and exits. Logs one line per request to standard \
      error, with its request id. Every option may come from the environment instead: \
      --max-connections from VLOG_MAX_CONNECTIONS, --database from VLOG_DATABASE, and so on; \
      an option given on the command line wins.
      """)

  /// The options `vlog serve` reads from `VLOG_*` variables when the command line does not give
  /// them: `--log-level` from `VLOG_LOG_LEVEL`.
  static let environmentOptions = [
    "data", "database", "database-connections", "host", "port", "log-level", "password-cost",
    "idle-timeout", "max-connections", "max-connections-per-address", "head-timeout",
    "body-timeout", "min-body-rate", "sign-ups-per-address", "database-timeout", "retention",
    "blob-grace", "max-live-channels",
    "max-live-channels-per-account", "live-keep-alive", "allow-origin",
  ]

  /// The arguments that `environment` adds to a `vlog serve` command line (`given`): one
  /// `--option value` for each variable set whose option the command line does not give.
  static func environmentArguments(_ environment: [String: String], given: [String]) -> [String] {
    var added: [String] = []
    for option in environmentOptions {
      let variable = "VLOG_" + option.uppercased().replacingOccurrences(of: "-", with: "_")
      guard let value = environment[variable], !value.isEmpty,
        !given.contains(where: { $0 == "--\(option)" || $0.hasPrefix("--\(option)=") })
      else { continue }
      added.append("--\(option)=\(value)")
    }
    return added
  }

  @Option(name: .long, help: "The server's LMDB data directory (created if needed).")
  var data: String?

  @Option(
    name: .long,
    help: ArgumentHelp(
      "A PostgreSQL database to keep the data in instead, shared by any number of servers.",
      discussion:
        "postgres://user:password@host:5432/database (?sslmode=require for TLS), or "
        + "postgres://user@/database?host=/socket/directory. The schema is created or migrated at start.",
      valueName: "url"))
  var database: String?

  @Option(name: .long, help: "The most connections to the PostgreSQL database.")
  var databaseConnections = 16

  @Option(name: .long, help: "The address to listen on.")
  var host = "127.0.0.1"

  @Option(name: .long, help: "The port to listen on (0 picks a free one).")
  var port = 8080

  @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical.")
  var logLevel = "info"

  @Option(
    name: .long,
    help:
      "log2 of scrypt's cost N for password hashes (10 to 20; 17, OWASP's recommendation, uses 128 MiB per hash). Weaker hashes are hashed again at sign-in."
  )
  var passwordCost = 17

  @Option(
    name: .long,
    help:
      "Seconds a connection may receive nothing (idle, mid-header, mid-body) before it is closed.")
  var idleTimeout = 60

  @Option(
    name: .long,
    help: ArgumentHelp(
      "The most connections open at once.",
      discussion:
        "At the cap, the connection idle longest makes room for a new one; a new connection is "
        + "closed at once only when every open one is inside a request."))
  var maxConnections = 1024

  @Option(
    name: .long,
    help:
      "The most connections open at once from one IP address (0: no limit, as behind a proxy, which then limits)."
  )
  var maxConnectionsPerAddress = 256

  @Option(
    name: .long,
    help: """
      The IP address of a proxy in front of the server (repeatable): its Forwarded or \
      X-Forwarded-For header names the client whose failed sign-ins and sign-ups count, not \
      the proxy's address, which every client behind it shares.
      """)
  var trustedProxy: [String] = []

  @Option(
    name: .long,
    help:
      "Bytes per second a request body must arrive at after its first 10 seconds; slower, 408 and the connection closes."
  )
  var minBodyRate = 500

  @Option(name: .long, help: "Accounts one IP address may create in an hour.")
  var signUpsPerAddress = 20

  @Option(
    name: .long,
    help: "Seconds a new connection may take to send its first request head before it is closed.")
  var headTimeout = 10

  @Option(
    name: .long,
    help:
      "Seconds one call to the PostgreSQL database may take; past it, 503 and the connection to the database is discarded."
  )
  var databaseTimeout = 10

  @Option(
    name: .long,
    help:
      "Seconds a request's whole body may take to arrive; past it, 408 and the connection closes.")
  var bodyTimeout = 120

  @Option(
    name: .long,
    help:
      "Days a value replaced by a newer change keeps its content before it is redacted (0: at once; off: forever)."
  )
  var retention = "30"

  @Option(
    name: .long,
    help:
      "Seconds the bytes of a deleted attachment stay, so that an undo on the deleting device sends none."
  )
  var blobGrace = 3600

  @Option(
    name: .long,
    help: ArgumentHelp(
      "The most live channels (GET /v1/live) open at once.",
      discussion:
        "Counted apart from --max-connections: a connection that holds a channel leaves that count."
    ))
  var maxLiveChannels = 10_000

  @Option(name: .long, help: "The most live channels one account may hold open at once.")
  var maxLiveChannelsPerAccount = 128

  @Option(name: .long, help: "Seconds between the pings of a live channel with nothing to say.")
  var liveKeepAlive = 25

  @Option(
    name: .customLong("allow-origin"),
    help: ArgumentHelp(
      "An origin whose web pages may call the server from a browser (repeat it, or separate origins with commas).",
      discussion: "scheme://host[:port], for example https://notes.example.com; none by default.",
      valueName: "origin"))
  var allowOrigin: [String] = []

  /// The origins `--allow-origin` names, as browsers send them.
  var allowedOrigins: Set<String> {
    get throws {
      var origins = Set<String>()
      for given in allowOrigin.flatMap({ $0.split(separator: ",") }) {
        let text = given.trimmingCharacters(in: .whitespaces)
        guard let origin = SyncServer.Configuration.origin(text) else {
          throw ValidationError(
            "--allow-origin: '\(text)' is not an origin: scheme://host[:port], http or https, "
              + "with no path")
        }
        origins.insert(origin)
      }
      return origins
    }
  }

  /// The retention period `--retention` gives: nil for `off`.
  var retentionPeriod: Duration? {
    get throws {
      if retention == "off" { return nil }
      guard let days = Int(retention), (0...36500).contains(days) else {
        throw ValidationError(
          "--retention: '\(retention)' is not a number of days (0 to 36500) or 'off'")
      }
      return .seconds(days * 86400)
    }
  }

  func validate() throws {
    _ = try retentionPeriod
    _ = try allowedOrigins
    guard maxLiveChannels >= 1 else {
      throw ValidationError("--max-live-channels: \(maxLiveChannels) is not at least 1")
    }
    guard maxLiveChannelsPerAccount >= 1 else {
      throw ValidationError(
        "--max-live-channels-per-account: \(maxLiveChannelsPerAccount) is not at least 1")
    }
    guard liveKeepAlive >= 1 else {
      throw ValidationError(
        "--live-keep-alive: \(liveKeepAlive) is not a number of seconds from 1")
    }
    guard (data == nil) != (database == nil) else {
      throw ValidationError(
        data == nil
          ? "give --data DIR (LMDB) or --database URL (PostgreSQL)"
          : "give --data or --database, not both")
    }
    guard databaseConnections >= 1 else {
      throw ValidationError("--database-connections: \(databaseConnections) is not at least 1")
    }
    guard idleTimeout >= 1 else {
      throw ValidationError("--idle-timeout: \(idleTimeout) is not a number of seconds from 1")
    }
    guard blobGrace >= 0 else {
      throw ValidationError("--blob-grace: \(blobGrace) is not a number of seconds from 0")
    }
    guard bodyTimeout >= 1 else {
      throw ValidationError("--body-timeout: \(bodyTimeout) is not a number of seconds from 1")
    }
    guard minBodyRate >= 1 else {
      throw ValidationError("--min-body-rate: \(minBodyRate) is not a number of bytes from 1")
    }
    guard signUpsPerAddress >= 1 else {
      throw ValidationError("--sign-ups-per-address: \(signUpsPerAddress) is not a number from 1")
    }
    for proxy in trustedProxy where !SyncServer.Configuration.isIPAddress(proxy) {
      throw ValidationError("--trusted-proxy: '\(proxy)' is not an IP address")
    }
    guard maxConnectionsPerAddress >= 0 else {
      throw ValidationError(
        "--max-connections-per-address: \(maxConnectionsPerAddress) is not a number from 0")
    }
    guard headTimeout >= 1 else {
      throw ValidationError("--head-timeout: \(headTimeout) is not a number of seconds from 1")
    }
    guard databaseTimeout >= 1 else {
      throw ValidationError(
        "--database-timeout: \(databaseTimeout) is not a number of seconds from 1")
    }
    guard maxConnections >= 1 else {
      throw ValidationError("--max-connections: \(maxConnections) is not at least 1")
    }
    guard (0...65535).contains(port) else {
      throw ValidationError("--port: \(port) is not a port number (0 to 65535)")
    }
    guard (10...20).contains(passwordCost) else {
      throw ValidationError("--password-cost: \(passwordCost) is not from 10 to 20")
    }
    guard Logger.Level(rawValue: logLevel) != nil else {
      throw ValidationError(
        "--log-level: '\(logLevel)' is not one of trace, debug, info, notice, warning, error, critical"
      )
    }
  }

  func run() async throws {
    var logger = Logger(label: "vlog.serve") { label in StreamLogHandler.standardError(label: label)
    }
    logger.logLevel = Logger.Level(rawValue: logLevel) ?? .info
    var configuration = SyncServer.Configuration(
      passwordCost: PasswordCost(logRounds: UInt8(passwordCost)),
      idleTimeout: .seconds(idleTimeout), maximumConnections: maxConnections,
      maximumConnectionsPerAddress: maxConnectionsPerAddress == 0 ? nil : maxConnectionsPerAddress,
      requestHeadTimeout: .seconds(headTimeout), bodyTimeout: .seconds(bodyTimeout),
      databaseTimeout: .seconds(databaseTimeout), retention: try retentionPeriod,
      blobGracePeriod: .seconds(blobGrace), maximumLiveChannels: maxLiveChannels,
      maximumLiveChannelsPerAccount: maxLiveChannelsPerAccount,
      liveKeepAlive: .seconds(liveKeepAlive))
    configuration.allowedOrigins = try allowedOrigins
    configuration.minimumBodyRate = minBodyRate
    configuration.signUpsPerAddressPerHour = signUpsPerAddress
    configuration.trustedProxies = trustedProxy
    let server: SyncServer
    if let database {
      server = try await SyncServer.open(
        database: database, maximumConnections: databaseConnections,
        configuration: configuration, logger: logger)
    } else {
      try refuseDamagedStructure(data ?? "", kind: "server data")
      server = try SyncServer.open(
        dataDirectory: data ?? "", configuration: configuration, logger: logger)
    }
    defer { server.close() }
    try await server.run(host: host, port: port) { [host] port in
      FileHandle.standardOutput.write(Data("vlog: serving on http://\(host):\(port)\n".utf8))
    }
  }
}
