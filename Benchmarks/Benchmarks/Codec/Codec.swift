// VLog's hand-written event codec (EventCodec: protocol-buffers fields, read without a schema
// compiler) next to swift-protobuf decoding and encoding the same bytes through a generated
// message (Sources/ProtobufPeer), on the events of the notes-app workload: bytes in, a checked
// `Event` out, and back. Both write byte-identical encodings; the setup checks it.
//
//   swift package -c release benchmark --target Codec
//
// `VLOG_CODEC_EVENTS` sets the workload's size (100,000 operations by default).

import Benchmark
import BenchmarkSupport
import Foundation
import ProtobufPeer
import SwiftProtobuf
import VLog
import Workload

let codecOperations =
  ProcessInfo.processInfo.environment["VLOG_CODEC_EVENTS"].flatMap(Int.init) ?? 100_000

struct EncodingsDiffer: Error, CustomStringConvertible {
  let event: Event
  var description: String { "VLog and swift-protobuf encode \(event) differently" }
}

/// The workload's events as a VLog store logs them, with their encodings, checked to be the
/// same bytes from both codecs.
func fixture() throws -> (events: [Event], encoded: [[UInt8]]) {
  let path = temporaryPath("codec")
  defer { removeTemporaryItem(atPath: path) }
  let backend = try VLogBackend.open(at: path, durable: false)
  defer { backend.close() }
  try Workload(size: codecOperations).apply(to: backend)
  let events = try backend.events()
  let encoded = events.map { $0.encoded() }
  for (event, bytes) in zip(events, encoded) {
    let message: [UInt8] = try VLogEventMessage(event).serializedBytes()
    guard message == bytes else { throw EncodingsDiffer(event: event) }
  }
  return (events, encoded)
}

let benchmarks: @Sendable () -> Void = {
  Benchmark.defaultConfiguration = .init(
    metrics: [.wallClock, .throughput, .mallocCountTotal],
    timeUnits: .milliseconds,
    warmupIterations: 1,
    scalingFactor: .one,
    maxDuration: .seconds(10),
    maxIterations: 10
  )

  Benchmark("decode-VLog") { benchmark in
    let (_, encoded) = try fixture()
    benchmark.startMeasurement()
    for bytes in encoded { blackHole(try Event(encoded: bytes)) }
    benchmark.stopMeasurement()
  }

  Benchmark("decode-swift-protobuf") { benchmark in
    let (_, encoded) = try fixture()
    benchmark.startMeasurement()
    for bytes in encoded { blackHole(try VLogEventMessage(serializedBytes: bytes).event()) }
    benchmark.stopMeasurement()
  }

  Benchmark("encode-VLog") { benchmark in
    let (events, _) = try fixture()
    benchmark.startMeasurement()
    for event in events { blackHole(event.encoded()) }
    benchmark.stopMeasurement()
  }

  Benchmark("encode-swift-protobuf") { benchmark in
    let (events, _) = try fixture()
    benchmark.startMeasurement()
    for event in events {
      let bytes: [UInt8] = try VLogEventMessage(event).serializedBytes()
      blackHole(bytes)
    }
    benchmark.stopMeasurement()
  }
}
