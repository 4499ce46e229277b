import Foundation
import VLogTesting

@testable import VLog

/// One store with its own wall clock, as one device would have.
struct Replica {
  let store: NoteStore
  let clock: ManualClock
}

/// Opens `count` replicas in temporary directories, each with its own clock (all showing the
/// same time) and seeded ids, closes them afterwards.
func withReplicas<R>(
  _ count: Int, seed: UInt64 = 1, mergePolicy: any MergePolicy = StandardMerge(),
  _ body: ([Replica]) async throws -> R
) async throws -> R {
  try await withTemporaryDirectory { root in
    var replicas: [Replica] = []
    for index in 0..<count {
      let clock = ManualClock()
      var options = NoteStore.Options(
        durability: .noSync,
        dependencies: .testing(clock: clock, seed: seed &* 1000 &+ UInt64(index)))
      options.mergePolicy = mergePolicy
      let store = try NoteStore.open(at: "\(root)/replica-\(index)", options: options)
      replicas.append(Replica(store: store, clock: clock))
    }
    defer { for replica in replicas { replica.store.close() } }
    return try await body(replicas)
  }
}

/// Every event of `source`'s log, in log order.
func allEvents(_ store: NoteStore) throws -> [Event] {
  try store.events().map(\.event)
}

/// Sends each store's events to the other, as a full sync would.
func exchange(_ a: NoteStore, _ b: NoteStore) throws {
  let fromA = try allEvents(a)
  let fromB = try allEvents(b)
  try b.ingest(fromA)
  try a.ingest(fromB)
}

/// Whether two stores hold the same events and the same state.
func converged(_ stores: [NoteStore]) throws -> Bool {
  let digests = try stores.map { try ($0.stateDigest(), $0.eventSetDigest()) }
  return digests.allSatisfy { $0 == digests[0] }
}
