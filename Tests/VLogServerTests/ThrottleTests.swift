import Foundation
import ServerTestSupport
import Testing
import VLog
import VLogServerTesting
import VLogSync
import VLogTesting
import VLogWire

@testable import VLogServer

/// The throttles of sign-ins, recoveries and sign-ups, tried as an attacker would: from another
/// server of the same storage, after a restart, under a flood of made-up names, against a
/// device that signed in before.
@Suite("Throttles that hold")
struct ThrottleTests {
  /// Opens servers over one storage, each with `clock`: for LMDB a directory (one server at a
  /// time, so the next opens after the last closed), for PostgreSQL one database that several
  /// serve at once.
  final class Storage: Sendable {
    let backend: Backend
    let location: String
    let clock: ManualClock
    let configuration: SyncServer.Configuration

    init(
      backend: Backend, location: String, clock: ManualClock,
      configuration: SyncServer.Configuration
    ) {
      (self.backend, self.location, self.clock) = (backend, location, clock)
      self.configuration = configuration
    }

    func open(seed: UInt64 = 1) async throws -> SyncServer {
      let bytes = SeededBytes(seed: seed)
      let clock = self.clock
      let dependencies = SyncServer.Dependencies(
        now: { clock.now }, randomBytes: { bytes.next($0) })
      switch backend {
      case .lmdb:
        return try SyncServer.open(
          dataDirectory: location, configuration: configuration, dependencies: dependencies,
          logger: quietLogger)
      case .postgres:
        return try await SyncServer.open(
          database: location, maximumConnections: 4, configuration: configuration,
          dependencies: dependencies, logger: quietLogger)
      }
    }
  }

  func withStorage<R>(
    _ backend: Backend, configuration: SyncServer.Configuration = .testing,
    _ body: (Storage) async throws -> R
  ) async throws -> R {
    let clock = ManualClock()
    switch backend {
    case .lmdb:
      return try await withTemporaryDirectory { root in
        try await body(
          Storage(
            backend: backend, location: root + "/server", clock: clock,
            configuration: configuration))
      }
    case .postgres:
      let url = try await TestCluster.shared.newDatabase()
      return try await body(
        Storage(backend: backend, location: url, clock: clock, configuration: configuration))
    }
  }

  static let wrong = "a wrong password"

  @Test(
    "Failed sign-ins are counted in the storage: another server of it, and one started again, make the name wait",
    arguments: Backend.allCases)
  func sharedAndKept(backend: Backend) async throws {
    try await withStorage(backend) { storage in
      let first = try await storage.open()
      let firstCaller = APICaller(transport: InProcessTransport(server: first))
      _ = try await signUp(firstCaller, "ann")
      for _ in 0..<3 {
        #expect(
          await firstCaller.signIn(Credentials(username: "ann", password: Self.wrong)).status == 401
        )
      }
      // PostgreSQL: a second server serves the same database at once. LMDB: the next server
      // of the directory, after a restart.
      if backend == .lmdb { first.close() }
      let second = try await storage.open(seed: 2)
      defer { second.close() }
      let caller = APICaller(transport: InProcessTransport(server: second))
      for _ in 0..<2 {
        #expect(
          await caller.signIn(Credentials(username: "ann", password: Self.wrong)).status == 401)
      }
      // Five failures, three of them on the other server: the name waits, even with the right
      // password.
      let refused = await caller.signIn(
        Credentials(username: "ann", password: "correct horse battery"))
      #expect(refused.status == 429, "\(refused)")
      #expect(refused.error?.retryAfter == .seconds(1))
      if backend == .postgres {
        #expect(
          await firstCaller.signIn(Credentials(username: "ann", password: "correct horse battery"))
            .status
            == 429)
        first.close()
      }
      storage.clock.advance(by: 1)
      _ = try await caller.signIn(Credentials(username: "ann", password: "correct horse battery"))
        .get()
    }
  }

  @Test(
    "10,001 failed sign-ins under made-up names do not make the server forget a locked name",
    arguments: Backend.allCases)
  func noEviction(backend: Backend) async throws {
    try await withStorage(backend) { storage in
      let server = try await storage.open()
      defer { server.close() }
      let caller = APICaller(transport: InProcessTransport(server: server))
      _ = try await signUp(caller, "ann")
      for _ in 0..<6 {
        _ = await caller.signIn(Credentials(username: "ann", password: Self.wrong))
      }
      #expect(
        await caller.signIn(Credentials(username: "ann", password: "correct horse battery")).status
          == 429)
      // Made-up names, eight at a time.
      try await withThrowingTaskGroup(of: Void.self) { group in
        for worker in 0..<8 {
          group.addTask {
            for index in stride(from: worker, to: 10_001, by: 8) {
              let status = await caller.signIn(
                Credentials(username: "made-up-\(index)", password: Self.wrong)
              ).status
              #expect(status == 401)
            }
          }
        }
        try await group.waitForAll()
      }
      let locked = await caller.signIn(
        Credentials(username: "ann", password: "correct horse battery"))
      #expect(locked.status == 429, "\(locked)")
      // The counters of the made-up names are in the storage, until their window ends.
      storage.clock.advance(by: 24 * 3600 + 1)
      #expect(try await server.sweepThrottles() == 10_002)
    }
  }

  @Test(
    "A device that signed in before is judged by its own failures: someone else's at the name do not lock it out",
    arguments: Backend.allCases)
  func deviceCredential(backend: Backend) async throws {
    try await withStorage(backend) { storage in
      let server = try await storage.open()
      defer { server.close() }
      let caller = APICaller(transport: InProcessTransport(server: server))
      _ = try await signUp(caller, "ann")
      _ = try await signUp(caller, "bob")
      let session = try await caller.signIn(
        Credentials(username: "ann", password: "correct horse battery")
      )
      .get()
      let device = try #require(session.device)
      // Someone else fails at the name: a sign-in without the credential waits.
      for _ in 0..<6 {
        _ = await caller.signIn(Credentials(username: "ann", password: Self.wrong))
      }
      #expect(
        await caller.signIn(Credentials(username: "ann", password: "correct horse battery")).status
          == 429)
      // The device signs in, and keeps its credential.
      let again = try await caller.signIn(
        Credentials(username: "ann", password: "correct horse battery", device: device)
      ).get()
      #expect(again.device == device)
      // A credential made for another name, a changed one, or made up is no credential.
      let bobs = try #require(
        try await caller.signIn(Credentials(username: "bob", password: "correct horse battery"))
          .get()
          .device)
      var flipped = Array(device.utf8)
      flipped[30] = flipped[30] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
      for forged in [
        bobs, String(decoding: flipped, as: UTF8.self), String(repeating: "A", count: 43),
      ] {
        let refused = await caller.signIn(
          Credentials(username: "ann", password: "correct horse battery", device: forged))
        #expect(refused.status == 429, "\(forged)")
      }
      // The device's own failures count for it: five, then it waits too.
      for _ in 0..<5 {
        let failed = await caller.signIn(
          Credentials(username: "ann", password: Self.wrong, device: device))
        #expect(failed.status == 401)
      }
      #expect(
        await caller.signIn(
          Credentials(username: "ann", password: "correct horse battery", device: device)
        )
        .status == 429)
      storage.clock.advance(by: 1)
      let token = try await caller.signIn(
        Credentials(username: "ann", password: "correct horse battery", device: device)
      ).get().token
      // A password change ends every credential made before it: the old one is no credential,
      // and the sign-in is judged by the name's failures.
      _ = try await caller.changePassword(
        PasswordChange(currentPassword: "correct horse battery", newPassword: "a new password"),
        token: token
      ).get()
      // (A credential the server takes comes back as it is; any other is replaced.)
      let stale = try await caller.signIn(
        Credentials(username: "ann", password: "a new password", device: device)
      ).get()
      #expect(stale.device != nil && stale.device != device)
    }
  }

  @Test(
    "A SyncAccount keeps its device credential and signs in, and syncs, while someone else is locked out of the name",
    arguments: Backend.allCases)
  func syncAccountKeepsItsCredential(backend: Backend) async throws {
    try await withStorage(backend) { storage in
      let server = try await storage.open()
      defer { server.close() }
      let caller = APICaller(transport: InProcessTransport(server: server))
      _ = try await signUp(caller, "ann")
      try await withTemporaryDirectory { root in
        let device = try openDevice(
          0, root: root, transport: InProcessTransport(server: server),
          credentials: Credentials(username: "ann", password: "correct horse battery"), seed: 1,
          clock: storage.clock)
        try await device.account.signIn()
        let kept = try #require(await device.account.state.deviceCredential)
        for _ in 0..<6 {
          _ = await caller.signIn(Credentials(username: "ann", password: Self.wrong))
        }
        #expect(
          await caller.signIn(Credentials(username: "ann", password: "correct horse battery"))
            .status
            == 429)
        try await device.account.signIn()
        _ = try await device.store.write { $0.createNote(text: "still here") }
        try await device.account.sync()
        #expect(await device.account.state.deviceCredential == kept)
        #expect(try device.store.outboxCount() == 0)
      }
    }
  }

  @Test(
    "Recovery is limited per address: wrong recovery secrets from other addresses do not lock the owner out, ten from one make it wait a minute, sign-ins are not touched, and the secret is kept as a plain hash",
    arguments: Backend.allCases)
  func recovery(backend: Backend) async throws {
    try await withServerBehindProxy(backend) { storage, server, baseURL in
      func client(_ address: String) -> APICaller {
        APICaller(
          transport: ForwardingTransport(
            base: HTTPTransport(baseURL: baseURL), forwardedFor: address))
      }
      let account = try NewEncryptedAccount(
        username: "lost", password: "correct horse battery", cost: .testing,
        random: SystemRandom.bytes)
      _ = try await client("192.0.2.1").createAccount(
        account.credentials, keys: account.serverKeys
      ).get()
      let number = try #require(try await server.store.account(named: "lost")).number
      let record = try #require(try await server.store.encryption(of: number))
      #expect(record.recoverySecret.cost == PasswordHash.plain)
      let right = RecoveryCredentials(
        username: "lost", recoverySecret: try account.recoveryKey.keys().signInSecret)
      let wrong = RecoveryCredentials(username: "lost", recoverySecret: "not the secret")
      // Anyone's failures, from addresses of their own, leave the owner's recovery open.
      for index in 0..<20 {
        #expect(await client("198.51.100.\(index)").recoveryKeys(wrong).status == 401)
      }
      _ = try await client("192.0.2.1").recoveryKeys(right).get()
      // One address's eleventh try waits, right or wrong; another's does not.
      for _ in 0..<10 {
        #expect(await client("203.0.113.5").recoveryKeys(wrong).status == 401)
      }
      let refused = await client("203.0.113.5").recoveryKeys(right)
      #expect(refused.status == 429, "\(refused)")
      #expect(refused.error?.retryAfter == .seconds(60))
      _ = try await client("192.0.2.1").recoveryKeys(right).get()
      // Sign-ins count apart: the account's device still signs in from there.
      _ = try await client("203.0.113.5").signIn(account.credentials).get()
      storage.clock.advance(by: 60)
      _ = try await client("203.0.113.5").recoveryKeys(right).get()
    }
  }

  @Test(
    "An address's failures under many names make it wait; a sign-up limit holds across a restart",
    arguments: Backend.allCases)
  func addresses(backend: Backend) async throws {
    var configuration = SyncServer.Configuration.testing
    configuration.signUpsPerAddressPerHour = 3
    try await withStorage(backend, configuration: configuration) { storage in
      let server = try await storage.open()
      try await withLiveServer(server) { baseURL in
        let caller = APICaller(transport: HTTPTransport(baseURL: baseURL))
        for name in ["a1", "a2"] { _ = try await signUp(caller, name) }
        let known = try #require(
          try await caller.signIn(Credentials(username: "a2", password: "correct horse battery"))
            .get().device)
        // 100 failures from 127.0.0.1, each under a new name: the 101st waits, whatever name.
        for index in 0..<100 {
          let status = await caller.signIn(
            Credentials(username: "guess-\(index)", password: Self.wrong)
          ).status
          #expect(status == 401)
        }
        let refused = await caller.signIn(
          Credentials(username: "a1", password: "correct horse battery"))
        #expect(refused.status == 429, "\(refused)")
        // A device the server knows (its credential) is not locked out by others' failures
        // behind its address: it signs in; its own failures still count for the address.
        let device = await caller.signIn(
          Credentials(username: "a2", password: "correct horse battery", device: known))
        #expect(device.status == 200, "\(device)")
        let failed = await caller.signIn(
          Credentials(username: "a2", password: Self.wrong, device: known))
        #expect(failed.status == 401)
        let stillRefused = await caller.signIn(
          Credentials(username: "a1", password: "correct horse battery"))
        #expect(stillRefused.status == 429)
      }
      if backend == .lmdb { server.close() }
      let next = try await storage.open(seed: 2)
      defer { next.close() }
      if backend == .postgres { server.close() }
      try await withLiveServer(next) { baseURL in
        let caller = APICaller(transport: HTTPTransport(baseURL: baseURL))
        _ = try await caller.createAccount(
          Credentials(username: "a3", password: "correct horse battery")
        )
        .get()
        let refused = await caller.createAccount(
          Credentials(username: "a4", password: "correct horse battery"))
        #expect(refused.status == 429, "\(refused)")
        #expect(refused.error?.retryAfter == .seconds(3600))
      }
    }
  }

  @Test("A budget's waits double from the first past the free counts, and end with the window")
  func budgets() {
    let name = ThrottleBudget.name
    #expect(name.wait(nil, now: 0) == nil)
    #expect(name.wait(ThrottleCount(count: 4, first: 0, last: 0), now: 0) == nil)
    #expect(name.wait(ThrottleCount(count: 5, first: 0, last: 0), now: 0) == 1000)
    #expect(name.wait(ThrottleCount(count: 7, first: 0, last: 10), now: 10) == 4000)
    #expect(name.wait(ThrottleCount(count: 500, first: 0, last: 10), now: 10) == 300_000)
    // The window over: forgotten.
    #expect(name.wait(ThrottleCount(count: 500, first: 0, last: 10), now: 86_400_000) == nil)
    let signUps = ThrottleBudget.signUps(20)
    #expect(signUps.wait(ThrottleCount(count: 19, first: 0, last: 5), now: 5) == nil)
    #expect(signUps.wait(ThrottleCount(count: 20, first: 0, last: 5), now: 1000) == 3_599_000)
    #expect(ThrottleKey.addressPrefix("192.0.2.7") == "192.0.2.7")
    #expect(ThrottleKey.addressPrefix("::ffff:192.0.2.7") == "192.0.2.7")
    #expect(
      ThrottleKey.addressPrefix("2001:db8:1:2:aaaa::1")
        == ThrottleKey.addressPrefix("2001:db8:1:2:bbbb::9"))
    #expect(
      ThrottleKey.addressPrefix("2001:db8:1:2::1") != ThrottleKey.addressPrefix("2001:db8:1:3::1"))
  }

  @Test(
    "Behind a trusted proxy, failed sign-ins count for the client it forwarded for: one client's failures do not make the others behind it wait, and what a client writes into the header itself moves nothing",
    arguments: Backend.allCases)
  func trustedProxy(backend: Backend) async throws {
    try await withServerBehindProxy(backend) { _, _, baseURL in
      // The proxy appends the client's address to what the client sent.
      func client(_ address: String, claiming claim: String = "203.0.113.9") -> APICaller {
        APICaller(
          transport: ForwardingTransport(
            base: HTTPTransport(baseURL: baseURL), forwardedFor: "\(claim), \(address)"))
      }
      _ = try await signUp(APICaller(transport: HTTPTransport(baseURL: baseURL)), "a1")
      for index in 0..<100 {
        let guess = await client("198.51.100.7", claiming: "192.0.2.\(index)").signIn(
          Credentials(username: "guess-\(index)", password: Self.wrong))
        #expect(guess.status == 401)
      }
      let right = Credentials(username: "a1", password: "correct horse battery")
      #expect(await client("198.51.100.7").signIn(right).status == 429)
      #expect(await client("198.51.100.8").signIn(right).status == 200)
    }
  }

  /// A server on `backend`, live on loopback, that trusts 127.0.0.1 as its proxy: each client
  /// names its own address in `X-Forwarded-For` (``ForwardingTransport``).
  func withServerBehindProxy(
    _ backend: Backend,
    _ body: @escaping @Sendable (Storage, SyncServer, String) async throws -> Void
  ) async throws {
    var configuration = SyncServer.Configuration.testing
    configuration.trustedProxies = ["127.0.0.1"]
    try await withStorage(backend, configuration: configuration) { storage in
      let server = try await storage.open()
      defer { server.close() }
      try await withLiveServer(server) { baseURL in try await body(storage, server, baseURL) }
    }
  }

  @Test(
    "The client's address: the peer unless it is a trusted proxy; then the rightmost forwarded address that is not a trusted proxy, from Forwarded before X-Forwarded-For; the proxy's own when that is no IP address"
  )
  func clientAddress() {
    let trusted: Set<String> = ["10.0.0.1", "10.0.0.2"]
    func of(_ peer: String?, forwarded: String? = nil, _ forwardedFor: String? = nil) -> String? {
      ClientAddress.of(
        peer: peer, forwarded: forwarded, forwardedFor: forwardedFor, trusted: trusted)
    }
    #expect(of("198.51.100.1", "203.0.113.5") == "198.51.100.1")
    #expect(of(nil, "203.0.113.5") == nil)
    #expect(of("10.0.0.1") == "10.0.0.1")
    #expect(of("10.0.0.1", "203.0.113.5") == "203.0.113.5")
    #expect(of("10.0.0.1", "1.1.1.1, 203.0.113.5 , 10.0.0.2") == "203.0.113.5")
    #expect(of("10.0.0.1", "10.0.0.2") == "10.0.0.1")
    #expect(of("10.0.0.1", "unknown") == "10.0.0.1")
    #expect(of("10.0.0.1", "2001:db8::1") == "2001:db8::1")
    #expect(
      of("10.0.0.1", forwarded: #"for=192.0.2.60;proto=http, for="[2001:db8:cafe::17]:4711""#)
        == "2001:db8:cafe::17")
    #expect(of("10.0.0.1", forwarded: "for=192.0.2.43:80", "203.0.113.5") == "192.0.2.43")
    #expect(of("10.0.0.1", forwarded: "For=_hidden") == "10.0.0.1")
  }
}

/// A transport that adds the `X-Forwarded-For` header a proxy in front of the server would.
struct ForwardingTransport: Transport {
  let base: any Transport
  let forwardedFor: String
  var server: String { base.server }

  func send(_ request: TransportRequest) async throws -> TransportResponse {
    var request = request
    request.headers["x-forwarded-for"] = forwardedFor
    return try await base.send(request)
  }
}
