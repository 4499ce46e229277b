/// A query whose result is delivered now and again whenever a commit could have changed it:
/// the store's live queries (see ``NoteStore/observe(_:)``).
///
/// Iterating runs the query once at once, then waits for commits — user changes and ingested
/// sync events alike — and runs it again after each, yielding the result only when it differs
/// from the last one yielded. A burst of commits while the consumer is busy counts as one: the
/// query runs once for all of them. Writers never wait for a live query; the query reads a
/// snapshot of its own, on the consumer's task.
///
/// Each iterator is its own subscription. Iteration ends when the task iterating is cancelled
/// or the store closes, and throws what the query throws.
public struct LiveQuery<Value: Equatable & Sendable>: AsyncSequence, Sendable {
  /// The element type: the query's result.
  public typealias Element = Value
  /// What iteration throws: what the query throws.
  public typealias Failure = any Error

  private let store: NoteStore
  private let query: @Sendable (NoteStore) throws -> Value

  init(store: NoteStore, query: @escaping @Sendable (NoteStore) throws -> Value) {
    self.store = store
    self.query = query
  }

  /// Starts a subscription: commits from now on are seen by the iterator.
  public func makeAsyncIterator() -> Iterator {
    // Only the newest change set is kept while the consumer is busy: the query re-reads the
    // store, so one wake-up stands for any number of commits.
    let commits = store.observers.stream(bufferingPolicy: .bufferingNewest(1))
    return Iterator(store: store, query: query, commits: commits.makeAsyncIterator())
  }

  /// Yields the query's results as they change.
  public struct Iterator: AsyncIteratorProtocol {
    let store: NoteStore
    let query: @Sendable (NoteStore) throws -> Value
    var commits: AsyncStream<ChangeSet>.Iterator
    var last: Value?
    var started = false

    /// The query's first result, then its next different one after a commit; nil once the
    /// task is cancelled or the store closed.
    public mutating func next() async throws -> Value? {
      try await next(isolation: nil)
    }

    /// See ``next()``.
    public mutating func next(isolation actor: isolated (any Actor)?) async throws -> Value? {
      if !started {
        guard !Task.isCancelled else { return nil }
        started = true
        let value = try query(store)
        last = value
        return value
      }
      while await commits.next(isolation: actor) != nil {
        guard !Task.isCancelled else { return nil }
        let value = try query(store)
        if value != last {
          last = value
          return value
        }
      }
      return nil
    }
  }
}

extension NoteStore {
  /// A live query: `query`'s result now, and again each time a commit changes it.
  ///
  /// ```swift
  /// for try await notes in store.observe({ try $0.timeline(limit: 50) }) {
  ///   show(notes)  // now, then after each change that alters the first 50 notes
  /// }
  /// ```
  ///
  /// Equal results are not repeated, so a change to a note outside the query's result yields
  /// nothing; a burst of commits yields at most once for the commits that arrived while the
  /// consumer was busy. The query runs on the iterating task, in read transactions of its own:
  /// it never blocks a writer. Use ``changes()`` to see each commit's ``ChangeSet`` instead.
  ///
  /// - Parameter query: Reads the store; runs once per iteration start and once per wake-up.
  /// - Returns: A sequence of the query's distinct results; it ends when the iterating task is
  ///   cancelled or the store closes, and throws what `query` throws (for example, after the
  ///   store was closed elsewhere).
  public func observe<Value: Equatable & Sendable>(
    _ query: @escaping @Sendable (NoteStore) throws -> Value
  ) -> LiveQuery<Value> {
    LiveQuery(store: self, query: query)
  }
}
