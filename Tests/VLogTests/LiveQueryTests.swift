import Foundation
import Synchronization
import Testing
import VLogTesting

@testable import VLog

/// What a live query's consumer saw: the values yielded and how often the query ran.
private final class Seen: Sendable {
  let values = Mutex<[[String]]>([])
  let runs = Mutex(0)

  /// Waits (polling, up to ten seconds) until `condition` holds, and says whether it did.
  func wait(until condition: (Seen) -> Bool) async -> Bool {
    for _ in 0..<1000 {
      if condition(self) { return true }
      try? await Task.sleep(for: .milliseconds(10))
    }
    return condition(self)
  }

  var valueCount: Int { values.withLock { $0.count } }
  var runCount: Int { runs.withLock { $0 } }
}

/// Sets a note's text to 1, 2 … `times`, one commit each, on the caller's thread.
private func edit(_ id: NoteID, in store: NoteStore, times: Int) throws {
  for index in 1...times {
    try store.write { $0.setText("\(index)", of: id) }
  }
}

@Suite("Live queries", .timeLimit(.minutes(5)))
struct LiveQueryTests {
  /// The timeline's texts, counting runs.
  private static func timeline(_ seen: Seen, limit: Int = 50)
    -> @Sendable (NoteStore) throws ->
    [String]
  {
    { store in
      seen.runs.withLock { $0 += 1 }
      return try store.timeline(limit: limit).map(\.truncatedText)
    }
  }

  @Test("a live query yields its result at once, then once per change that alters it")
  func yieldsChanges() async throws {
    try await withReplicas(1) { replicas in
      let (store, clock) = (replicas[0].store, replicas[0].clock)
      let first = try await store.write { $0.createNote(text: "one") }
      let seen = Seen()
      let consumer = Task {
        for try await texts in store.observe(Self.timeline(seen)) {
          seen.values.withLock { $0.append(texts) }
        }
      }
      #expect(await seen.wait { $0.valueCount == 1 })
      clock.advance(by: 1)
      try await store.write { $0.setText("one, edited", of: first) }
      #expect(await seen.wait { $0.valueCount == 2 })
      #expect(seen.values.withLock { $0 } == [["one"], ["one, edited"]])
      consumer.cancel()
      try await consumer.value
    }
  }

  @Test("a change that leaves the result as it was yields nothing")
  func unrelatedChange() async throws {
    try await withReplicas(1) { replicas in
      let (store, clock) = (replicas[0].store, replicas[0].clock)
      let first = try await store.write { $0.createNote(text: "first") }
      clock.advance(by: 1)
      let newest = try await store.write { $0.createNote(text: "newest") }
      let seen = Seen()
      // The newest note only: an edit to the older one does not change the result.
      let consumer = Task {
        for try await texts in store.observe(Self.timeline(seen, limit: 1)) {
          seen.values.withLock { $0.append(texts) }
        }
      }
      #expect(await seen.wait { $0.valueCount == 1 })
      try await store.write { $0.setText("first, edited", of: first) }
      // The query ran again for the commit, and yielded nothing.
      #expect(await seen.wait { $0.runCount == 2 })
      #expect(seen.valueCount == 1)
      try await store.write { $0.setText("newest, edited", of: newest) }
      #expect(await seen.wait { $0.valueCount == 2 })
      #expect(seen.values.withLock { $0 } == [["newest"], ["newest, edited"]])
      consumer.cancel()
      try await consumer.value
    }
  }

  @Test("a thousand commits while the consumer is busy run the query once and yield once")
  func burst() async throws {
    try await withReplicas(1) { replicas in
      let store = replicas[0].store
      let id = try await store.write { $0.createNote(text: "0") }
      let seen = Seen()
      var iterator = store.observe(Self.timeline(seen)).makeAsyncIterator()
      #expect(try await iterator.next() == ["0"])
      try edit(id, in: store, times: 1000)
      #expect(try await iterator.next() == ["1000"])
      #expect(seen.runCount == 2)
      // Nothing else is pending: the next value is the next change's.
      try await store.write { $0.setText("after", of: id) }
      #expect(try await iterator.next() == ["after"])
      #expect(seen.runCount == 3)
    }
  }

  @Test("events arriving by sync wake a live query like local changes")
  func syncedChanges() async throws {
    try await withReplicas(2) { replicas in
      let (store, other) = (replicas[0].store, replicas[1].store)
      let seen = Seen()
      var iterator = store.observe(Self.timeline(seen)).makeAsyncIterator()
      #expect(try await iterator.next() == [])
      try await other.write { _ = $0.createNote(text: "from elsewhere") }
      try await store.ingest(try other.events().map(\.event))
      #expect(try await iterator.next() == ["from elsewhere"])
    }
  }

  @Test("cancelling the consumer's task, or closing the store, ends the sequence")
  func ending() async throws {
    try await withTemporaryStore { store in
      let seen = Seen()
      let cancelled = Task {
        for try await texts in store.observe(Self.timeline(seen)) {
          seen.values.withLock { $0.append(texts) }
        }
      }
      #expect(await seen.wait { $0.valueCount == 1 })
      cancelled.cancel()
      try await cancelled.value
      // Writes after the end reach nobody; the query does not run again.
      let runs = seen.runCount
      try await store.write { _ = $0.createNote(text: "later") }
      #expect(seen.runCount == runs)

      var iterator = store.observe { try $0.noteCount() }.makeAsyncIterator()
      #expect(try await iterator.next() == 1)
      store.close()
      #expect(try await iterator.next() == nil)
      // Subscribing after the close ends at once too (the query itself then fails).
      var late = store.observe { _ in 0 }.makeAsyncIterator()
      #expect(try await late.next() == 0)
      #expect(try await late.next() == nil)
    }
  }

  @Test("a query that fails ends the sequence with its error")
  func failingQuery() async throws {
    try await withTemporaryStore { store in
      struct Refused: Error {}
      var iterator = store.observe { _ -> Int in throw Refused() }.makeAsyncIterator()
      await #expect(throws: Refused.self) { try await iterator.next() }
    }
  }
}
