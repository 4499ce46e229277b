#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Darwin)
  internal import Darwin
#endif

/// A value behind a POSIX mutex: what `Synchronization.Mutex` offers, in a form
/// ThreadSanitizer understands. On Linux, `Mutex` locks with raw futex calls that TSan does not
/// model, so it reports every correct use of one as a data race; a pthread mutex it does model,
/// so under `tools/sanitize thread` a report is a real race.
///
/// It lives in this module, though it knows nothing of LMDB, because every module that needs
/// a lock (the engine, the server) already depends on this one, the bottom of the graph: a
/// module of its own for one small type would add a target and nothing else.
package final class Locked<Value>: @unchecked Sendable {
  // Guarded by `mutex`.
  private var value: Value
  private let mutex: UnsafeMutablePointer<pthread_mutex_t>

  /// Puts `value` behind the lock.
  package init(_ value: Value) {
    self.value = value
    mutex = .allocate(capacity: 1)
    mutex.initialize(to: pthread_mutex_t())
    pthread_mutex_init(mutex, nil)
  }

  deinit {
    pthread_mutex_destroy(mutex)
    mutex.deallocate()
  }

  /// Runs `body` with the value while holding the lock.
  package func withLock<Result, Failure: Error>(
    _ body: (inout Value) throws(Failure) -> Result
  ) throws(Failure) -> Result {
    pthread_mutex_lock(mutex)
    defer { pthread_mutex_unlock(mutex) }
    return try body(&value)
  }
}
