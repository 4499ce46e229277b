public import Foundation
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
  /// Limits and policies.
  public struct Configuration: Sendable {
    /// The largest request body of every endpoint but blob uploads, in bytes.
    public var maximumBodyBytes: Int
    /// The largest blob, in bytes.
    public var maximumBlobBytes: Int
    /// The most events one sync call may push.
    public var maximumEventsPerPush: Int
    /// The most events one sync answer carries, whatever the client asks.
    public var maximumPageSize: Int
    /// The page size when the client does not ask for one.
    public var defaultPageSize: Int
    /// The most bytes of events (in the binary encoding) one sync answer carries: a page ends
    /// before the event that would pass it, but holds at least one event, so the server's
    /// memory per request is bounded whatever the account holds and every call progresses.
    public var maximumPageBytes: Int
    /// The most event ids one answer of `POST /v1/sync/compare` lists; past it, the answer
    /// holds whole buckets up to the limit and says it is incomplete.
    public var maximumComparedIDs: Int
    /// How far ahead of the server's clock an event's stamp may be. Events beyond are refused
    /// with `clockSkew`.
    public var maximumClockSkew: Duration
    /// How long a sign-in token is valid.
    public var tokenLifetime: Duration
    /// The scrypt cost of new password hashes.
    public var passwordCost: PasswordCost
    /// The most password hashes (sign-ins, new accounts) computed at once; past it, 429 with
    /// `Retry-After`. A user name with five failed sign-ins in a row also waits, 1 second
    /// doubling up to 5 minutes, before its next attempt.
    public var concurrentPasswordChecks: Int
    /// Whether each commit is flushed to disk.
    public var durability: NoteStore.Durability
    /// How long a connection may go without receiving anything — between requests, while its
    /// headers arrive, or in the middle of a body — before the server closes it.
    public var idleTimeout: Duration
    /// The rules the accounts' logs follow: ``LogRules/standard`` but in tests that plant a
    /// wrong one to show both backends follow the engine's.
    package var logRules = LogRules.standard
    /// On LMDB, pushes are acknowledged before the commit they share is durable: a bug planted
    /// by the crash harness, to show that it finds the pushes a kill then loses.
    package var acknowledgesPushesBeforeCommit = false
    /// The most connections open at once. At the cap, the connection idle longest (between
    /// requests, or yet to send its first request head) is closed to admit a new one; a new
    /// connection is closed at once only when every open one is inside a request.
    public var maximumConnections: Int
    /// The most connections open at once from one IP address (nil: no limit); past it, a new
    /// one from that address is closed at once. 256 by default, a quarter of
    /// ``maximumConnections``: room for an office of a hundred devices behind one address, each
    /// with a live channel and a sync under way, while one address cannot take every place.
    /// Behind a proxy every client has the proxy's address: set nil there, and limit at the
    /// proxy.
    public var maximumConnectionsPerAddress: Int?
    /// How long a new connection may take to send its first complete request head before the
    /// server closes it.
    public var requestHeadTimeout: Duration
    /// How long one call to the PostgreSQL database (a statement, or a transaction with its
    /// statements) may take. Past it, the request is answered 503 `unavailable` with
    /// `Retry-After`, its database connection is discarded, and the call is logged with the
    /// request's id. A push whose commit's outcome is unknown is safe to retry: events are
    /// stored once by id.
    public var databaseTimeout: Duration
    /// How long a request waits for a connection to the PostgreSQL database (every one busy,
    /// or the database down or unreachable) before it is answered 503 `unavailable` with
    /// `Retry-After`: 5 seconds, or ``databaseTimeout`` if that is shorter. A database that
    /// cannot be reached is reported this soon, whatever ``databaseTimeout`` allows a call.
    public var databaseConnectionWait: Duration = .seconds(5)
    /// How long a request's whole body may take to arrive, however steadily it trickles in;
    /// past it, 408 and the connection is closed.
    public var bodyTimeout: Duration
    /// The slowest a request body may arrive, in bytes per second: past ``bodyGrace`` after its
    /// head, a body must have brought one second's worth of these for each further second, or
    /// it is answered 408 and its connection closed; and at the connection cap, the connection
    /// whose body lags furthest behind this rate is closed to admit a new one. 500 by default,
    /// as Apache's `mod_reqtimeout`.
    public var minimumBodyRate = 500
    /// How long a body may take before ``minimumBodyRate`` applies: 10 seconds by default.
    public var bodyGrace: Duration = .seconds(10)
    /// The most accounts one IP address may create in an hour (`POST /v1/accounts`); past it,
    /// 429 `tooManyRequests` with `Retry-After`. 20 by default. Counted in the storage, for
    /// every server of it.
    public var signUpsPerAddressPerHour = 20
    /// How long a change replaced by a newer change to the same field keeps its values before
    /// they are redacted (nil: forever; zero: at once). Checked on each push to an account.
    public var retention: Duration?
    /// How long the bytes of an attachment whose last event was erased (its deletion synced)
    /// stay, so that the deleting device's undo, which adds them back under a new attachment,
    /// sends none: the server then still holds them. After it, they go (and an undo uploads
    /// them again, from the device, which keeps them while its undo may need them).
    public var blobGracePeriod: Duration
    /// The most live channels (`GET /v1/live`) open at once; past it, 503 `unavailable` with
    /// `Retry-After`. They are counted apart from ``maximumConnections``: a connection that
    /// opens a channel leaves the request connections' count, and joins it again when the
    /// channel ends.
    public var maximumLiveChannels: Int
    /// The most live channels one account may hold open at once; past it, 429
    /// `tooManyRequests` with `Retry-After`.
    public var maximumLiveChannelsPerAccount: Int
    /// How often a live channel with nothing to say gets a ping. A device that hears nothing
    /// for longer than twice this knows its channel is gone; the server finds a device that
    /// is gone when a ping cannot be sent.
    public var liveKeepAlive: Duration
    /// The origins of web apps that may call the server from a browser, each
    /// `scheme://host[:port]` as a browser sends it (`https://notes.example.com`); none by
    /// default. Requests from these get the `Access-Control-*` headers of CORS, and their
    /// preflight requests an answer; requests from any other origin get neither, so a browser
    /// keeps the server's answers from their pages.
    public var allowedOrigins: Set<String> = []

    /// Creates a configuration. The defaults: 8 MiB bodies, blobs up to the engine's attachment
    /// limit (64 MiB), 1,000 events per push, pages of up to 5,000 events (1,000 by default)
    /// and 4 MiB, 50,000 ids per comparison, 10 minutes of clock skew, tokens valid for 30
    /// days, scrypt at ``PasswordCost/standard``, durable commits, connections closed after 60
    /// idle seconds, 1,024 connections (256 per address), 10 seconds for a connection's
    /// first request head, 120 seconds for a whole body (which must arrive at 500 bytes a second
    /// after its first 10), 20 new accounts per address an hour, 10 seconds for a call to the database,
    /// replaced values kept for 30 days, released attachment bytes for an hour, and 10,000 live
    /// channels (128 per account) pinged every 25 seconds.
    ///
    /// With these, every change a store accepts can be pushed: the largest event (a note text
    /// of `Limits/textBytes`) fits in a body even as escaped JSON, and every attachment the
    /// engine accepts fits in a blob, sealed or not.
    public init(
      maximumBodyBytes: Int = 8 << 20, maximumBlobBytes: Int = Limits.sealedAttachmentBytes,
      maximumEventsPerPush: Int = 1000, maximumPageSize: Int = 5000, defaultPageSize: Int = 1000,
      maximumPageBytes: Int = 4 << 20, maximumComparedIDs: Int = 50_000,
      maximumClockSkew: Duration = .seconds(600), tokenLifetime: Duration = .seconds(30 * 86400),
      passwordCost: PasswordCost = .standard, durability: NoteStore.Durability = .durable,
      concurrentPasswordChecks: Int = ProcessInfo.processInfo.activeProcessorCount,
      idleTimeout: Duration = .seconds(60), maximumConnections: Int = 1024,
      maximumConnectionsPerAddress: Int? = 256, requestHeadTimeout: Duration = .seconds(10),
      bodyTimeout: Duration = .seconds(120), databaseTimeout: Duration = .seconds(10),
      retention: Duration? = .seconds(30 * 86400), blobGracePeriod: Duration = .seconds(3600),
      maximumLiveChannels: Int = 10_000, maximumLiveChannelsPerAccount: Int = 128,
      liveKeepAlive: Duration = .seconds(25)
    ) {
      self.maximumLiveChannels = maximumLiveChannels
      self.maximumLiveChannelsPerAccount = maximumLiveChannelsPerAccount
      self.liveKeepAlive = liveKeepAlive
      self.maximumConnectionsPerAddress = maximumConnectionsPerAddress
      self.requestHeadTimeout = requestHeadTimeout
      self.databaseTimeout = databaseTimeout
      self.blobGracePeriod = blobGracePeriod
      self.bodyTimeout = bodyTimeout
      self.retention = retention
      self.idleTimeout = idleTimeout
      self.maximumConnections = maximumConnections
      self.concurrentPasswordChecks = concurrentPasswordChecks
      self.maximumBodyBytes = maximumBodyBytes
      self.maximumBlobBytes = maximumBlobBytes
      self.maximumEventsPerPush = maximumEventsPerPush
      self.maximumPageSize = maximumPageSize
      self.defaultPageSize = defaultPageSize
      self.maximumPageBytes = maximumPageBytes
      self.maximumComparedIDs = maximumComparedIDs
      self.maximumClockSkew = maximumClockSkew
      self.tokenLifetime = tokenLifetime
      self.passwordCost = passwordCost
      self.durability = durability
    }
  }

  /// The server's clock and source of randomness (token bytes, salts), injected so tests control
  /// them.
  public struct Dependencies: Sendable {
    /// The wall clock.
    public var now: @Sendable () -> Date
    /// `count` cryptographically random bytes.
    public var randomBytes: @Sendable (_ count: Int) -> [UInt8]

    /// Creates dependencies.
    public init(
      now: @escaping @Sendable () -> Date,
      randomBytes: @escaping @Sendable (_ count: Int) -> [UInt8]
    ) {
      self.now = now
      self.randomBytes = randomBytes
    }

    /// The system clock and the system's random number generator.
    public static let live = Dependencies(
      now: { Date() },
      randomBytes: { count in
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
      })
  }

  /// The configuration the server runs with.
  public let configuration: Configuration
  /// Where the server keeps its data: the LMDB data directory, or the PostgreSQL database
  /// (its URL without the password).
  public let location: String
  let store: any ServerStorage
  let dependencies: Dependencies
  package let logger: Logger
  /// A hash computed for unknown user names, so that signing in as one takes as long as a wrong
  /// password.
  let decoy: PasswordHash
  /// Bounds concurrent password hashing, failed sign-ins and sign-ups.
  let throttle: PasswordThrottle
  /// The storage's secret (``ServerStorage/serverSecret()``), once read.
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
  let metrics = ServerMetrics()
  /// Whether each account a push came for is end-to-end encrypted, once asked of storage: an
  /// account is one or the other for good, and its number is never given again.
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
    self.throttle = PasswordThrottle(
      limit: configuration.concurrentPasswordChecks,
      signUpsPerHour: configuration.signUpsPerAddressPerHour, store: store,
      secret: { try await secret.value() }, now: dependencies.now)
    self.decoy = try PasswordHash(
      hashing: "decoy", cost: configuration.passwordCost, salt: [UInt8](repeating: 0, count: 16))
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
    let now = UInt64(clamping: max(0, dependencies.now().milliseconds))
    return try await store.verify(retention: (configuration.retention, now))
  }

  /// Removes the attachment bytes that no event has used for longer than
  /// ``Configuration/blobGracePeriod``: what a running server does every minute.
  ///
  /// - Returns: The number of blobs removed.
  @discardableResult
  public func sweepReleasedBlobs() async throws -> Int {
    try await store.sweepReleasedBlobs(
      releasedBefore: releasedBefore(configuration.blobGracePeriod))
  }

  /// Removes the throttle counters whose windows are over: what a running server does every
  /// minute.
  ///
  /// - Returns: The number of counters removed.
  @discardableResult
  public func sweepThrottles() async throws -> Int {
    try await throttle.sweep()
  }

  /// The wall-clock time, in milliseconds, `age` ago.
  func releasedBefore(_ age: Duration) -> UInt64 {
    let now = UInt64(clamping: max(0, dependencies.now().milliseconds))
    let age = UInt64(clamping: max(0, age.components.seconds)) * 1000
    return now >= age ? now - age : 0
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

  /// The routes (`Routes.all`), behind the middleware that renders errors as JSON and logs
  /// each request.
  public func router() -> Router<ServerContext> {
    let router = Router(context: ServerContext.self)
    // Outside the middleware that renders errors, so that error answers carry the headers too.
    if !configuration.allowedOrigins.isEmpty {
      router.middlewares.add(AllowedOrigins(origins: configuration.allowedOrigins))
    }
    router.middlewares.add(ServerMiddleware(logger: logger, metrics: metrics))
    for route in Routes.all {
      let handler: @Sendable (Request, ServerContext) async throws -> Response = {
        [self] request, context in try await route.handler(self, request, context)
      }
      router.on(RouterPath(route.path), method: route.method, use: handler)
      // HEAD is GET without the body: the middleware drops it and keeps its length.
      if route.answersHead { router.on(RouterPath(route.path), method: .head, use: handler) }
    }
    return router
  }

  /// The OpenAPI document as an answer.
  func documentResponse() -> Response {
    var headers = HTTPFields()
    headers[.contentType] = "application/json"
    return Response(
      status: .ok, headers: headers,
      body: .init(byteBuffer: ByteBuffer(bytes: Self.openAPIDocument)))
  }

  /// The OpenAPI 3.1 document of the HTTP API, as served at `GET /v1/openapi.json`.
  public static let openAPIDocument: [UInt8] = PackageResources.openapi_json
}

/// The request context of the server's routes.
public struct ServerContext: RequestContext {
  /// Hummingbird's per-request storage.
  public var coreContext: CoreRequestContextStorage

  /// The connection the request arrived on.
  let channel: any Channel

  /// Creates a context for a request arriving on a channel.
  public init(source: ApplicationRequestContextSource) {
    coreContext = .init(source: source)
    channel = source.channel
  }
}

/// The HTTP API, written once: each path, method and handler. ``SyncServer/router()`` registers
/// them; the middleware answers a known path asked with another method 405 with `Allow` from
/// them; a `GET` that ``Route/answersHead`` answers `HEAD` too.
enum Routes {
  /// One path and method, and what answers it.
  struct Route: Sendable {
    /// The path, its parameters as `:name` segments.
    let path: String
    let method: HTTPRequest.Method
    /// Whether `HEAD` is answered too, as this `GET` without its body.
    let answersHead: Bool
    let handler: @Sendable (SyncServer, Request, ServerContext) async throws -> Response

    init(
      _ path: String, _ method: HTTPRequest.Method, answersHead: Bool = false,
      _ handler: @escaping @Sendable (SyncServer, Request, ServerContext) async throws -> Response
    ) {
      self.path = path
      self.method = method
      self.answersHead = answersHead
      self.handler = handler
    }
  }

  static let all: [Route] = [
    Route("metrics", .get) { server, _, _ in server.metricsResponse() },
    Route("v1/health", .get) { server, _, _ in try await server.health() },
    Route("v1/health/live", .get) { server, _, _ in try server.liveness() },
    Route("v1/openapi.json", .get, answersHead: true) { server, _, _ in
      server.documentResponse()
    },
    Route("v1/accounts", .post) { try await $0.createAccount($1, $2) },
    Route("v1/accounts/current", .delete) { try await $0.deleteAccount($1, $2) },
    Route("v1/accounts/current/password", .put) { try await $0.changePassword($1, $2) },
    Route("v1/accounts/recovery-keys", .post) { try await $0.recoveryKeys($1, $2) },
    Route("v1/accounts/recover", .post) { try await $0.recover($1, $2) },
    Route("v1/accounts/current/keys", .get) { try await $0.accountKeys($1, $2) },
    Route("v1/accounts/current/keys", .put) { try await $0.rotateKeys($1, $2) },
    Route("v1/object-keys", .get) { try await $0.listObjectKeys($1, $2) },
    Route("v1/object-keys", .post) { try await $0.storeObjectKeys($1, $2) },
    Route("v1/object-keys/lookup", .post) { try await $0.lookUpObjectKeys($1, $2) },
    Route("v1/sessions", .get) { try await $0.sessions($1, $2) },
    Route("v1/sessions", .post) { try await $0.signIn($1, $2) },
    Route("v1/sessions/parameters", .post) { try await $0.signInParameters($1, $2) },
    Route("v1/sessions/current", .delete) { try await $0.signOut($1, $2) },
    Route("v1/sessions/:id", .delete) { try await $0.revokeSession($1, $2) },
    Route("v1/live", .get) { try await $0.live($1, $2) },
    Route("v1/sync", .post) { try await $0.sync($1, $2) },
    Route("v1/sync/compare", .post) { try await $0.compare($1, $2) },
    Route("v1/sync/fetch", .post) { try await $0.fetch($1, $2) },
    Route("v1/sync/missing-blobs", .post) { try await $0.missingBlobs($1, $2) },
    Route("v1/blobs/:hash", .get, answersHead: true) { try await $0.blob($1, $2) },
    Route("v1/blobs/:hash", .put) { try await $0.putBlob($1, $2) },
  ]

  /// The methods of the route `path` names, or nil if none does. A literal segment wins over
  /// a parameter (`sessions/current` over `sessions/:id`), as in the router.
  static func methods(forPath path: String) -> [HTTPRequest.Method]? {
    let segments = path.split(separator: "/", omittingEmptySubsequences: true)
    func matches(_ route: Route) -> Bool {
      let pattern = route.path.split(separator: "/")
      return pattern.count == segments.count
        && zip(pattern, segments).allSatisfy { $0.hasPrefix(":") || $0 == $1 }
    }
    let matching = all.filter(matches)
    guard let best = matching.map(\.path).min(by: { parameters($0) < parameters($1) }) else {
      return nil
    }
    return matching.filter { $0.path == best }.flatMap {
      $0.answersHead ? [$0.method, .head] : [$0.method]
    }
  }

  private static func parameters(_ path: String) -> Int {
    path.split(separator: "/").filter { $0.hasPrefix(":") }.count
  }
}

/// Renders every error as a JSON ``ErrorBody`` and logs one structured line per request.
struct ServerMiddleware: RouterMiddleware {
  package let logger: Logger
  let metrics: ServerMetrics

  func handle(
    _ request: Request, context: ServerContext,
    next: (Request, ServerContext) async throws -> Response
  ) async throws -> Response {
    // Only what the wait below needs lives across it; the rest is synchronous.
    let start = ContinuousClock.now
    let (context, requestID) = Self.identify(request, context)
    let outcome: Result<Response, any Error>
    do {
      outcome = .success(try await next(request, context))
    } catch {
      outcome = .failure(error)
    }
    return answer(outcome, to: request, context: context, requestID: requestID, start: start)
  }

  /// The request's id, and the context that logs under it. A request id from the caller (a
  /// load balancer's, say) is kept, so one request can be followed through both logs;
  /// otherwise Hummingbird's own.
  private static func identify(
    _ request: Request, _ context: ServerContext
  ) -> (ServerContext, String) {
    var context = context
    let requestID: String
    if let given = request.headers[.requestID], isAcceptableRequestID(given) {
      requestID = given
    } else if let own = context.logger[metadataKey: "hb.request.id"] {
      requestID = own.description
    } else {
      // A context made without Hummingbird's application (the in-process transport).
      requestID = Hex.string((0..<8).map { _ in UInt8.random(in: 0...255) })
    }
    context.logger[metadataKey: "hb.request.id"] = .string(requestID)
    return (context, requestID)
  }

  /// The response to send for what the route answered or threw: every error as a JSON
  /// ``ErrorBody``, a HEAD without its body; counted and logged.
  private func answer(
    _ outcome: Result<Response, any Error>, to request: Request, context: ServerContext,
    requestID: String, start: ContinuousClock.Instant
  ) -> Response {
    var response: Response
    do {
      response = try outcome.get()
      if request.method == .head {
        // HEAD is GET without the body (the routes send HEAD to GET's handlers).
        let length = response.body.contentLength
        response.body = ResponseBody()
        if let length { response.headers[.contentLength] = String(length) }
      }
    } catch let error as ServerError {
      response = error.response()
    } catch let error as StorageError {
      // What storage says of itself is for the log; the client gets what it can act on.
      if ![.accountExists, .accountDeleted, .invalidCursor].contains(error.code) {
        context.logger.log(
          level: error.code == .unavailable ? .warning : .error, "storage failed",
          metadata: ["error": "\(error)", "path": "\(request.uri.path)"])
      }
      response = ServerError(error, requestID: requestID).response()
    } catch let error as HTTPError {
      // No route for the method: a path that exists with other methods is a 405.
      if error.status == .notFound,
        let allowed = Routes.methods(forPath: request.uri.path), !allowed.contains(request.method)
      {
        response = ServerError.methodNotAllowed(request.method, allowed: allowed).response()
      } else {
        response = ServerError.http(error).response()
      }
    } catch let error as HTTPParserError {
      // The client sent a broken request or went away in the middle of it: its doing, not the
      // server's, and nobody may be left to read the answer.
      context.logger.info(
        "request ended early or malformed",
        metadata: ["error": "\(error)", "path": "\(request.uri.path)"])
      response = ServerError.malformedRequest(error).response()
    } catch {
      // The full description: PostgreSQL's errors describe themselves only generically.
      context.logger.error(
        "request failed",
        metadata: ["error": "\(String(reflecting: error))", "path": "\(request.uri.path)"])
      response = ServerError.internalError(requestID: requestID).response()
    }
    response.headers[.requestID] = requestID
    let elapsed = ContinuousClock.now - start
    metrics.request(
      method: request.method.rawValue, path: context.endpointPath ?? "unmatched",
      status: response.status.code, duration: elapsed)
    let microseconds =
      elapsed.components.seconds * 1_000_000 + elapsed.components.attoseconds / 1_000_000_000_000
    context.logger.log(
      level: response.status.code >= 500 ? .error : .info, "request",
      metadata: [
        "method": "\(request.method)", "path": "\(request.uri.path)",
        "status": "\(response.status.code)", "microseconds": "\(microseconds)",
      ])
    return response
  }
}

extension ServerMiddleware {
  /// Whether a caller's request id may be logged and echoed: 1 to 128 letters, digits and
  /// `-_.:/`.
  static func isAcceptableRequestID(_ id: String) -> Bool {
    (1...128).contains(id.utf8.count)
      && id.utf8.allSatisfy { byte in
        (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte)
          || (0x61...0x7A).contains(byte) || "-_.:/".utf8.contains(byte)
      }
  }
}

extension HTTPField.Name {
  /// `X-Request-ID`: the id under which a request is logged.
  static let requestID = HTTPField.Name("X-Request-ID")!
  /// `VLog-Protocol`: the protocol version a client reads (`WireProtocol`).
  static let wireProtocol = HTTPField.Name(WireProtocol.headerName)!
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

/// Removes released attachment bytes past their grace period, and throttle counters past
/// their windows, every minute while the server runs (``SyncServer/sweepReleasedBlobs()``,
/// ``SyncServer/sweepThrottles()``); a failed sweep is logged and tried again.
struct BlobSweeper: Service {
  let server: SyncServer

  func run() async throws {
    while !Task.isCancelled {
      do {
        try await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(60)) }
      } catch {
        return
      }
      do {
        let removed = try await server.sweepReleasedBlobs()
        if removed > 0 {
          server.logger.info("swept released blobs", metadata: ["removed": "\(removed)"])
        }
      } catch {
        server.logger.warning("sweeping released blobs failed", metadata: ["error": "\(error)"])
      }
      do {
        try await server.sweepThrottles()
      } catch {
        server.logger.warning("sweeping throttle counters failed", metadata: ["error": "\(error)"])
      }
    }
  }
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
