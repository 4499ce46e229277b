public import Foundation
internal import LMDB
public import VLog
internal import VLogWire

extension SyncServer {
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
    /// The IP addresses of the proxies in front of the server whose `Forwarded` or
    /// `X-Forwarded-For` header names the client a request came from, for the throttles of
    /// failed sign-ins and sign-ups; empty by default, when the connection's peer is the
    /// client. Behind a TLS-terminating proxy every client otherwise has its address, and one
    /// client's failures would make them all wait.
    public var trustedProxies: [String] = []

    /// Whether `text` is an IPv4 or IPv6 address, as ``trustedProxies`` holds.
    public static func isIPAddress(_ text: String) -> Bool { ClientAddress.isIPAddress(text) }
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
}
