import BenchmarkSupport
import Foundation
import VLog

/// What writers that share commits gain: 16 `write` calls made at once from 16 tasks, against
/// the same 16 made one after another, on one durable store, in rounds that alternate the
/// two; medians of `rounds` rounds, in milliseconds per 16 writes.
func measureSharedCommits(rounds: Int = 101) async throws -> (together: Double, apart: Double) {
  let path = temporaryPath("compare-shared-commits")
  defer { removeTemporaryItem(atPath: path) }
  let store = try NoteStore.open(
    at: path, options: .init(durability: .durable, mapSize: 1 << 30))
  defer { store.close() }
  var together: [Double] = []
  var apart: [Double] = []
  for round in 0..<rounds {
    let start = ContinuousClock.now
    for index in 0..<16 {
      _ = try await store.write { $0.createNote(text: "apart \(round) \(index)") }
    }
    apart.append(seconds(ContinuousClock.now - start) * 1000)
    let started = ContinuousClock.now
    try await withThrowingTaskGroup(of: Void.self) { group in
      for index in 0..<16 {
        group.addTask {
          _ = try await store.write { $0.createNote(text: "together \(round) \(index)") }
        }
      }
      try await group.waitForAll()
    }
    together.append(seconds(ContinuousClock.now - started) * 1000)
  }
  return (median(together), median(apart))
}
