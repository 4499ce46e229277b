// What end-to-end encryption costs on the device: sealing and opening the notes-app workload's
// events, next to encoding and decoding them (the reference, measured in the same run), and
// one 1 MB attachment's bytes sealed and opened, next to hashing them (what every upload
// does). The bytes sealing adds to an event are a metric of their own.
//
//   swift package -c release benchmark --target Encryption
//
// `VLOG_ENCRYPTION_EVENTS` sets the workload's size (100,000 operations by default). An
// attachment's addition is sealed naming its bytes as sealed, which the 1 MB benchmarks seal.

import Benchmark
import BenchmarkSupport
import Crypto
import Foundation
import VLog
import VLogSync
import Workload

let operations =
  ProcessInfo.processInfo.environment["VLOG_ENCRYPTION_EVENTS"].flatMap(Int.init) ?? 100_000

extension BenchmarkMetric {
  /// Bytes an event's encoding grows by when sealed, on average over the workload.
  static let bytesAdded = BenchmarkMetric.custom(
    "bytes added/event", polarity: .prefersSmaller, useScalingFactor: false)
  /// Bytes of those that are padding (`Padding`), on average over the workload.
  static let paddingAdded = BenchmarkMetric.custom(
    "padding bytes/event", polarity: .prefersSmaller, useScalingFactor: false)
}

/// The workload's events, sealed by an account's keys, and their encodings.
struct Fixture: Sendable {
  let events: [Event]
  let encoded: [[UInt8]]
  let sealed: [Event]
  let sealedEncoded: [[UInt8]]
  let sealer: EventSealer
  let keys: [Identifier: ObjectKey]

  static func make() throws -> Fixture {
    let path = temporaryPath("encryption")
    defer { removeTemporaryItem(atPath: path) }
    let backend = try VLogBackend.open(at: path, durable: false)
    defer { backend.close() }
    try Workload(size: operations).apply(to: backend)
    let events = try backend.events()
    let sealer = EventSealer(keys: try AccountKeys(random: systemRandomBytes))
    var keys: [Identifier: ObjectKey] = [:]
    for event in events {
      if let object = EventSealer.keyedObject(of: event.change), keys[object] == nil {
        keys[object] = try ObjectKey(random: systemRandomBytes)
      }
    }
    let sealed = try events.map { event in
      try sealer.seal(event, objectKey: { keys[$0]! }, sealedBlob: sealedName)
    }
    return Fixture(
      events: events, encoded: events.map { $0.encoded() }, sealed: sealed,
      sealedEncoded: sealed.map { $0.encoded() }, sealer: sealer, keys: keys)
  }

  /// How many bytes sealing adds to an event's encoding, on average.
  var bytesAddedPerEvent: Int {
    let clear = encoded.reduce(0) { $0 + $1.count }
    let sealed = sealedEncoded.reduce(0) { $0 + $1.count }
    return (sealed - clear) / max(1, events.count)
  }

  /// How many of those bytes are padding, on average: each sealed value's size less the seal's
  /// 28 bytes and the clear event's fields after its kind (its encoding but the time, 9
  /// bytes, the replica, 18, and the kind, 2).
  var paddingPerEvent: Int {
    var padding = 0
    for (clear, sealed) in zip(encoded, self.sealed) {
      guard let values = sealed.sealedValues else { continue }
      padding += values.count - SealedBlob.overhead - (clear.count - 29)
    }
    return padding / max(1, events.count)
  }
}

/// The name of an attachment's bytes as sealed (the bytes themselves are not sealed here).
@Sendable func sealedName(_ attachment: Attachment) -> SealedBlob {
  SealedBlob(
    hash: attachment.blobHash,
    byteCount: Padding.padme(attachment.byteCount + 1) + SealedBlob.overhead)
}

/// Builds the fixture once per process.
actor Fixtures {
  static let shared = Fixtures()
  private var fixture: Fixture?

  func get() throws -> Fixture {
    if let fixture { return fixture }
    let made = try Fixture.make()
    fixture = made
    return made
  }
}

/// One attachment's bytes: 1 MB of random bytes, its metadata, and its key.
let attachmentBytes = systemRandomBytes(1 << 20)
let attachment = Attachment(
  id: AttachmentID(Identifier(high: 1, low: 1)), noteID: NoteID(Identifier(high: 1, low: 2)),
  mimeType: "image/jpeg", width: 0, height: 0,
  blobHash: BlobHash(bytes: Array(SHA256.hash(data: attachmentBytes)))!,
  byteCount: attachmentBytes.count)
let attachmentKey = try! ObjectKey(random: systemRandomBytes)

let benchmarks: @Sendable () -> Void = {
  Benchmark.defaultConfiguration = .init(
    metrics: [.wallClock, .cpuTotal, .mallocCountTotal, .eventsPerSecond],
    timeUnits: .milliseconds, warmupIterations: 1, scalingFactor: .one,
    maxDuration: .seconds(10), maxIterations: 10)

  Benchmark("events · 1 encode (reference)") { benchmark in
    let fixture = try await Fixtures.shared.get()
    let start = ContinuousClock.now
    benchmark.startMeasurement()
    for event in fixture.events { blackHole(event.encoded()) }
    benchmark.stopMeasurement()
    benchmark.measurement(.eventsPerSecond, perSecond(fixture.events.count, since: start))
  }

  Benchmark(
    "events · 2 seal and encode",
    configuration: .init(
      metrics: [
        .wallClock, .cpuTotal, .mallocCountTotal, .eventsPerSecond, .bytesAdded, .paddingAdded,
      ],
      timeUnits: .milliseconds, warmupIterations: 1, scalingFactor: .one,
      maxDuration: .seconds(10), maxIterations: 10)
  ) { benchmark in
    let fixture = try await Fixtures.shared.get()
    let keys = fixture.keys
    let start = ContinuousClock.now
    benchmark.startMeasurement()
    for event in fixture.events {
      blackHole(
        try fixture.sealer.seal(event, objectKey: { keys[$0]! }, sealedBlob: sealedName).encoded())
    }
    benchmark.stopMeasurement()
    benchmark.measurement(.eventsPerSecond, perSecond(fixture.events.count, since: start))
    benchmark.measurement(.bytesAdded, fixture.bytesAddedPerEvent)
    benchmark.measurement(.paddingAdded, fixture.paddingPerEvent)
  }

  Benchmark("events · 3 decode (reference)") { benchmark in
    let fixture = try await Fixtures.shared.get()
    let start = ContinuousClock.now
    benchmark.startMeasurement()
    for bytes in fixture.encoded { blackHole(try Event(encoded: bytes)) }
    benchmark.stopMeasurement()
    benchmark.measurement(.eventsPerSecond, perSecond(fixture.events.count, since: start))
  }

  Benchmark("events · 4 decode and open") { benchmark in
    let fixture = try await Fixtures.shared.get()
    let keys = fixture.keys
    let start = ContinuousClock.now
    benchmark.startMeasurement()
    for bytes in fixture.sealedEncoded {
      blackHole(try fixture.sealer.open(try Event(encoded: bytes), objectKey: { keys[$0]! }))
    }
    benchmark.stopMeasurement()
    benchmark.measurement(.eventsPerSecond, perSecond(fixture.events.count, since: start))
  }

  Benchmark(
    "1 MB attachment · 1 SHA-256 (reference)",
    configuration: .init(
      metrics: [.wallClock, .cpuTotal], timeUnits: .microseconds, maxIterations: 100)
  ) { benchmark in
    benchmark.startMeasurement()
    blackHole(SHA256.hash(data: attachmentBytes))
    benchmark.stopMeasurement()
  }

  Benchmark(
    "1 MB attachment · 2 seal",
    configuration: .init(
      metrics: [.wallClock, .cpuTotal], timeUnits: .microseconds, maxIterations: 100)
  ) { benchmark in
    benchmark.startMeasurement()
    blackHole(try attachmentKey.sealBlob(attachmentBytes, of: attachment))
    benchmark.stopMeasurement()
  }

  Benchmark(
    "1 MB attachment · 3 open",
    configuration: .init(
      metrics: [.wallClock, .cpuTotal], timeUnits: .microseconds, maxIterations: 100)
  ) { benchmark in
    let sealed = try attachmentKey.sealBlob(attachmentBytes, of: attachment)
    benchmark.startMeasurement()
    blackHole(try attachmentKey.openBlob(sealed, of: attachment))
    benchmark.stopMeasurement()
  }

  // What one guess at a password costs whoever holds the server's files: a stretching at the
  // device's cost (an encrypted account's, version 2), and at OWASP's scrypt recommendation,
  // the server's hash of a clear account's password as earlier versions kept it. Seconds and
  // peak memory per guess.
  for (name, cost) in [
    ("the device's, N=2^18", KeyDerivationCost.standard),
    ("the server's, N=2^17", KeyDerivationCost(logRounds: 17)),
  ] {
    Benchmark(
      "password guess · scrypt \(name)",
      configuration: .init(
        metrics: [.wallClock, .cpuTotal, .peakMemoryResident], timeUnits: .milliseconds,
        warmupIterations: 0, maxIterations: 5)
    ) { benchmark in
      let derivation = KeyDerivation.new(cost: cost, random: systemRandomBytes)
      benchmark.startMeasurement()
      blackHole(
        try PasswordKeys(username: "ann", password: "a guess at it", derivation: derivation))
      benchmark.stopMeasurement()
    }
  }

  // A clear account's record now: the hash of a secret the device stretched (N = 2¹⁸), hashed
  // again by the server (N = 2¹⁷, the same scrypt work as the stretching at that cost, which
  // stands in for it here). A guess pays both.
  Benchmark(
    "password guess · a clear account's record: the device's N=2^18, then the server's N=2^17",
    configuration: .init(
      metrics: [.wallClock, .cpuTotal, .peakMemoryResident], timeUnits: .milliseconds,
      warmupIterations: 0, maxIterations: 5)
  ) { benchmark in
    let device = KeyDerivation.new(cost: .standard, random: systemRandomBytes)
    let server = KeyDerivation.new(
      cost: KeyDerivationCost(logRounds: 17), random: systemRandomBytes)
    benchmark.startMeasurement()
    let secret = try PasswordKeys(username: "ann", password: "a guess at it", derivation: device)
      .signInSecret
    blackHole(try PasswordKeys(username: "ann", password: secret, derivation: server))
    benchmark.stopMeasurement()
  }
}
