internal import Foundation
internal import HTTPTypes
public import Hummingbird
internal import HummingbirdCore
internal import LMDB
public import Logging
internal import NIOCore
internal import NIOHTTP1
internal import ServiceLifecycle
public import VLog
internal import VLogWire

/// The sync server: accounts, per-account event logs and blobs, in one LMDB environment or in a
/// PostgreSQL database shared by any number of servers, served over HTTP by Hummingbird.
///
/// Build one with ``open(dataDirectory:configuration:dependencies:logger:)`` or
/// ``open(database:maximumConnections:configuration:dependencies:logger:)``, then either run
/// ``application(host:port:onServerRunning:)`` (what `vlog serve` does), or hand ``router()`` to
/// Hummingbird's test harness, or talk to it without sockets through `InProcessTransport` (from
/// the `VLogServerTesting` library).
///
/// Every endpoint is under `/v1` (but `GET /metrics`), answers JSON, and is described by the
/// OpenAPI 3.1 document served at `GET /v1/openapi.json` (``openAPIDocument``).
///
/// Concurrency: on LMDB, writes (new accounts, tokens, pushed events, blobs) run one at a time
/// on a serial queue, and sync calls that push nothing, and blob downloads, read concurrently;
/// on PostgreSQL, pushes to one account wait for one another on its head row, and the rest
/// runs at once on the connection pool.
public final class SyncServer: Sendable {

  /// The configuration the server runs with.
  public let configuration: Configuration
  /// Where the server keeps its data: the LMDB data directory, or the PostgreSQL database
  /// (its URL without the password).
  public let location: String
  let store: any ServerStorage
  let dependencies: Dependencies
  package let logger: Logger
  /// Every check of a password: hashing, the throttle, the decoy.
  let passwords: PasswordChecks
  /// The storage's secret (``AccountStorage/serverSecret()``), once read.
  let secret: ServerSecret
  /// The open connections of the running application, against the cap.
  let connections: ConnectionRegistry

  /// The live channels open, by account.
  let live: LiveHub

  /// The HTTP connections open now, but those that hold a live channel.
  package var openConnections: Int { connections.openCount }
  /// The connections inside a request now.
  package var connectionsInRequests: Int { connections.inRequestCount }
  /// The live channels open now.
  package var openLiveChannels: Int { live.count }
  /// Request counts and latencies, events stored and served, sign-in failures.
  let metrics: ServerMetrics
  /// Whether each account a push came for is end-to-end encrypted (``SyncController``).
  let encryptedAccounts = Locked<[UInt64: Bool]>([:])

  private init(
    location: String, store: any ServerStorage, configuration: Configuration,
    dependencies: Dependencies, logger: Logger
  ) throws {
    self.location = location
    self.store = store
    self.configuration = configuration
    self.dependencies = dependencies
    self.logger = logger
    self.connections = ConnectionRegistry(
      limit: configuration.maximumConnections,
      perAddress: configuration.maximumConnectionsPerAddress,
      minimumBodyRate: configuration.minimumBodyRate)
    let now = dependencies.now
    let live = LiveHub(
      limits: .init(
        total: max(1, configuration.maximumLiveChannels),
        perAccount: max(1, configuration.maximumLiveChannelsPerAccount),
        keepAlive: configuration.liveKeepAlive),
      now: { now().milliseconds })
    store.liveFeed.receive { live.deliver($0) }
    self.live = live
    let secret = ServerSecret(store)
    self.secret = secret
    let metrics = ServerMetrics()
    self.metrics = metrics
    self.passwords = PasswordChecks(
      accounts: store, keys: store,
      throttle: PasswordThrottle(
        limit: configuration.concurrentPasswordChecks,
        signUpsPerHour: configuration.signUpsPerAddressPerHour, store: store,
        secret: { try await secret.value() }, now: dependencies.now),
      cost: configuration.passwordCost,
      decoy: try PasswordHash(
        hashing: "decoy", cost: configuration.passwordCost,
        salt: [UInt8](repeating: 0, count: 16)),
      randomBytes: dependencies.randomBytes, metrics: metrics)
  }

  /// Opens (creating if needed) the server's data directory.
  ///
  /// - Throws: ``StorageError`` for a data directory of a newer format, `LMDBError` when LMDB
  ///   cannot open it.
  public static func open(
    dataDirectory: String, configuration: Configuration = Configuration(),
    dependencies: Dependencies = .live, logger: Logger = Logger(label: "VLogServer")
  ) throws -> SyncServer {
    let store = try LMDBStorage.open(
      at: dataDirectory, durability: configuration.durability.environment,
      logRules: configuration.logRules,
      acknowledgesPushesBeforeCommit: configuration.acknowledgesPushesBeforeCommit)
    do {
      return try SyncServer(
        location: dataDirectory, store: store, configuration: configuration,
        dependencies: dependencies, logger: logger)
    } catch {
      store.close()
      throw error
    }
  }

  /// Opens a server on a PostgreSQL database, creating or migrating its schema (see the
  /// README's "Running on PostgreSQL"). Any number of servers may open the same database and
  /// serve the same accounts.
  ///
  /// - Parameters:
  ///   - database: `postgres://user:password@host:5432/database` (`?sslmode=require` for TLS),
  ///     or `postgres://user@/database?host=/socket/directory` for a Unix socket.
  ///   - maximumConnections: The most connections this server opens to the database.
  ///   - configuration: Limits, password cost, token lifetime, retention.
  ///   - dependencies: The clock and the source of random bytes.
  ///   - logger: Where the server logs.
  /// - Throws: ``StorageError`` for a malformed URL, a database that cannot be reached, or a
  ///   schema newer than this server's.
  public static func open(
    database: String, maximumConnections: Int = 16, configuration: Configuration = Configuration(),
    dependencies: Dependencies = .live, logger: Logger = Logger(label: "VLogServer")
  ) async throws -> SyncServer {
    let store = try await PostgresStorage.open(
      url: database, maximumConnections: maximumConnections, logRules: configuration.logRules,
      databaseTimeout: configuration.databaseTimeout,
      connectionWait: configuration.databaseConnectionWait, logger: logger)
    do {
      return try SyncServer(
        location: store.location, store: store, configuration: configuration,
        dependencies: dependencies, logger: logger)
    } catch {
      store.close()
      throw error
    }
  }

  /// Checks every account's event log: each event's checksum and encoding, the index of event
  /// ids and the event-set digest against the log — the same checks as a store's
  /// `NoteStore/verify(progress:)` makes of its log.
  ///
  /// - Returns: What was checked, and the faults found, each naming its account.
  ///
  /// Verifying writes nothing: a replaced change past the retention period that waits in its
  /// account's retention queue is the next push's work, not a fault.
  public func verify() async throws -> ServerVerification {
    try await store.verify(retention: (configuration.retention, Milliseconds(dependencies.now())))
  }

  /// Removes the attachment bytes that no event has used for longer than
  /// ``Configuration/blobGracePeriod``: what a running server does every minute.
  ///
  /// - Returns: The number of blobs removed.
  @discardableResult
  public func sweepReleasedBlobs() async throws -> Int {
    try await store.sweepReleasedBlobs(
      releasedBefore: Milliseconds(dependencies.now()).subtracting(configuration.blobGracePeriod))
  }

  /// Removes the throttle counters whose windows are over: what a running server does every
  /// minute.
  ///
  /// - Returns: The number of counters removed.
  @discardableResult
  public func sweepThrottles() async throws -> Int {
    try await passwords.throttle.sweep()
  }

  /// Closes the data directory, or starts closing the database connections. Requests after
  /// this fail.
  public func close() { store.close() }

  /// How long ``compact(database:patience:logger:)`` waits, by default, for the transactions
  /// that began before it.
  public static let compactionPatience: Duration = .seconds(300)

  /// Rewrites the tables of a PostgreSQL database with `VACUUM FULL`, so that erased bytes
  /// (a deleted account's rows, deleted notes' old values) leave the table files. Servers may
  /// keep running: each table is locked while it is rewritten, about as long as copying it
  /// once, and requests that need it wait (or get 503 past the database timeout). PostgreSQL's
  /// WAL keeps the old bytes until its segments are recycled (after the next checkpoints), and
  /// backups until they are deleted.
  ///
  /// A deleted row that a transaction still open can read would be copied into the new files,
  /// and so would one deleted while a writing transaction of another database of the cluster
  /// was running (every snapshot counts it). Compaction therefore first waits for those
  /// transactions that began before it to end (logging which, every 10 seconds), and fails,
  /// having rewritten nothing, if one is still open after `patience`.
  ///
  /// - Returns: The database, for messages (without the password), and the tables' size, with
  ///   indexes, before and after.
  public static func compact(
    database: String, patience: Duration = compactionPatience, logger: Logger
  ) async throws -> (location: String, bytesBefore: Int, bytesAfter: Int) {
    let store = try await PostgresStorage.open(url: database, maximumConnections: 1, logger: logger)
    defer { store.close() }
    do {
      let (before, after) = try await store.compact(patience: patience)
      return (store.location, before, after)
    } catch {
      throw StorageError.unusable(
        "cannot compact \(store.location): \(PostgresStorage.describe(error))")
    }
  }

  /// Rewrites a data directory that no server has open into a compact file (LMDB's compacting
  /// copy), so that erased events' old content and deleted blobs are not left in free pages.
  ///
  /// Stop the server, compact, start it again: the pause lasts about as long as reading the
  /// directory once. Opening migrates the directory first, as ``open(dataDirectory:configuration:dependencies:logger:)``
  /// would. Fails at once while any process has the directory open.
  ///
  /// - Returns: The data file's size before and after.
  public static func compact(dataDirectory: String) throws -> (bytesBefore: Int, bytesAfter: Int) {
    try Environment.refuseIfOpenInThisProcess(dataDirectory)
    let store = try LMDBStorage.open(at: dataDirectory, durability: .durable)
    store.close()
    let result = try Environment.compact(
      at: dataDirectory, configuration: LMDBStorage.configuration(durability: .durable))
    return (result.bytesBefore, result.bytesAfter)
  }

  /// The HTTP application: the router on a server bound to `host` and `port` (0 picks a free
  /// port, reported to `onServerRunning`).
  public func application(
    host: String, port: Int,
    onServerRunning: @escaping @Sendable (_ port: Int) async -> Void = { _ in }
  ) -> some ApplicationProtocol {
    let registry = connections
    let headTimeout = TimeAmount(configuration.requestHeadTimeout)
    let bodyTimeout = TimeAmount(configuration.bodyTimeout)
    let bodyGrace = TimeAmount(configuration.bodyGrace)
    let http1 = HTTP1Channel.Configuration(
      additionalChannelHandlers: [
        ConnectionGuardHandler(
          registry, headTimeout: headTimeout, bodyTimeout: bodyTimeout,
          bodyGrace: bodyGrace),
        LiveConnectionHandler(),
      ],
      idleTimeout: TimeAmount(configuration.idleTimeout))
    return Application(
      router: router(),
      server: HTTPServerBuilder { responder in
        HTTP1Channel(responder: Self.respondingInChildTask(responder), configuration: http1)
      },
      configuration: .init(address: .hostname(host, port: port), serverName: "vlog"),
      services: [
        BlobSweeper(server: self), LiveHubService(hub: live, store: store, logger: logger),
      ],
      onServerRunning: { channel in await onServerRunning(channel.localAddress?.port ?? port) },
      logger: logger)
  }

  /// `responder`, run for each request in a child task of the connection's task. A task keeps
  /// the memory of the deepest frames it ever reached until it ends, and a connection's task
  /// lives as long as the connection: an idle connection kept alive between syncs would keep
  /// its last request's. In a child task, a request's frames (middleware, routing, the
  /// endpoint) go when the request ends.
  static func respondingInChildTask(
    _ responder: @escaping HTTPChannelHandler.Responder
  ) -> HTTPChannelHandler.Responder {
    { request, writer, channel in
      let box = ResponseWriterBox(writer)
      try await withThrowingDiscardingTaskGroup { group in
        group.addTask {
          // Taken once, by this task alone: the connection's task waits meanwhile.
          guard let writer = box.take() else { return }
          try await responder(request, writer, channel)
        }
      }
    }
  }

  /// Serves HTTP on `host` and `port` until the process gets SIGINT or SIGTERM, then shuts down
  /// gracefully: what `vlog serve` runs. On LMDB it holds the data directory's `serve.lock`
  /// meanwhile, so a second server of the same directory is refused.
  ///
  /// - Throws: ``StorageError`` `unusable` if another server serves the directory;
  ///   `VLogError` if the address is in use.
  public func run(
    host: String, port: Int,
    onServerRunning: @escaping @Sendable (_ port: Int) async -> Void = { _ in }
  ) async throws {
    let lock = try (store as? LMDBStorage)?.lockForServing()
    defer { lock?.release() }
    do {
      try await application(host: host, port: port, onServerRunning: onServerRunning)
        .runService()
    } catch let error as IOError where error.errnoCode == EADDRINUSE {
      throw VLogError(
        .storage,
        "cannot listen on \(host):\(port): another process is using the address; "
          + "stop it, or choose another port")
    }
  }

  /// Serves HTTP on `host` and `port` for the duration of `body`, which receives the port bound
  /// (useful with port 0), then shuts the listener down gracefully.
  ///
  /// - Throws: What `body` throws, or the server's error if it cannot bind.
  public func serving<R: Sendable>(
    host: String = "127.0.0.1", port: Int = 0,
    _ body: @escaping @Sendable (_ port: Int) async throws -> R
  ) async throws -> R {
    let lock = try (store as? LMDBStorage)?.lockForServing()
    defer { lock?.release() }
    let (ports, continuation) = AsyncStream.makeStream(of: Int.self)
    let app = application(host: host, port: port) { port in continuation.yield(port) }
    let group = ServiceGroup(
      configuration: .init(services: [app], gracefulShutdownSignals: [], logger: logger))
    return try await withThrowingTaskGroup(of: R?.self) { tasks in
      tasks.addTask {
        try await group.run()
        continuation.finish()
        return nil
      }
      tasks.addTask {
        defer { Task { await group.triggerGracefulShutdown() } }
        guard let bound = await ports.first(where: { _ in true }) else {
          throw ServingError("the server stopped before it was listening")
        }
        return try await body(bound)
      }
      var result: R?
      for try await value in tasks where value != nil { result = value }
      // The second task returns the body's value or throws, and the group waits for it.
      guard let result else {
        throw ServingError("the server stopped before the body returned")
      }
      return result
    }
  }

  /// The routes of every controller, behind the middleware that renders errors as JSON and
  /// logs each request.
  public func router() -> Router<ServerContext> {
    let router = Router(context: ServerContext.self)
    let routes = RouteTable(controllers())
    // Outside the middleware that renders errors, so that error answers carry the headers too.
    if !configuration.allowedOrigins.isEmpty {
      router.middlewares.add(AllowedOrigins(origins: configuration.allowedOrigins))
    }
    router.middlewares.add(
      ServerMiddleware(
        logger: logger, metrics: metrics, routes: routes,
        trustedProxies: Set(configuration.trustedProxies)))
    routes.register(on: router)
    return router
  }

  /// The API's areas, each given only the storage slices and settings it uses.
  func controllers() -> [any ServerController] {
    let auth = Authenticator(sessions: store, now: dependencies.now)
    let reader = RequestReader(
      maximumBodyBytes: configuration.maximumBodyBytes, bodyTimeout: configuration.bodyTimeout)
    return [
      OperationsController(
        backend: store.backend, isReady: { [store] in await store.isReady() }, metrics: metrics,
        connections: connections, live: live),
      AccountsController(
        accounts: store, keys: store, passwords: passwords, auth: auth, reader: reader),
      SessionsController(
        accounts: store, sessions: store, keys: store, passwords: passwords, secret: secret,
        auth: auth, reader: reader, tokenLifetime: configuration.tokenLifetime,
        dependencies: dependencies),
      KeysController(
        accounts: store, keys: store, passwords: passwords, auth: auth, reader: reader,
        maximumObjects: configuration.maximumEventsPerPush,
        defaultPageSize: configuration.defaultPageSize,
        maximumPageSize: configuration.maximumPageSize),
      SyncController(
        logs: store, keys: store, auth: auth, reader: reader, configuration: configuration,
        metrics: metrics, encryptedAccounts: encryptedAccounts, now: dependencies.now),
      BlobsController(
        blobs: store, keys: store, auth: auth, reader: reader,
        maximumHashes: configuration.maximumEventsPerPush,
        maximumBlobBytes: configuration.maximumBlobBytes,
        gracePeriod: configuration.blobGracePeriod, now: dependencies.now),
      LiveController(
        hub: live, logs: store, auth: auth, connections: connections, logger: logger),
    ]
  }

  /// The OpenAPI 3.1 document of the HTTP API, as served at `GET /v1/openapi.json`.
  public static let openAPIDocument: [UInt8] = PackageResources.openapi_json
}

/// What ``SyncServer/verify()`` checked and found.
public struct ServerVerification: Sendable, Hashable {
  /// The accounts whose logs were checked.
  public let accounts: Int
  /// The events in those logs.
  public let events: Int
  /// The faults found, each naming its account; empty for sound data.
  public let faults: [VerificationFault]
}

/// Why ``SyncServer/serving(host:port:_:)`` ended without the body's value.
struct ServingError: Error, CustomStringConvertible {
  let description: String
  init(_ description: String) { self.description = description }
}

/// A request's response writer, handed from the connection's task to the child task that
/// answers the request.
private final class ResponseWriterBox: @unchecked Sendable {
  // Unchecked: written once, before the child task starts, and taken once, by it.
  private var writer: ResponseWriter?

  init(_ writer: consuming ResponseWriter) { self.writer = consume writer }

  /// The writer, the first time; nil after.
  func take() -> ResponseWriter? { writer.take() }
}
