#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Darwin)
  internal import Darwin
#endif

/// A readers–writer lock that prefers the writer, guarding an environment's handle.
///
/// Every transaction holds it shared for its whole life; resizing the map and closing the
/// environment hold it exclusively. LMDB requires that no transaction is active in the process
/// while `mdb_env_set_mapsize` runs, and this lock is what guarantees it. A waiting exclusive
/// holder blocks new shared holders, so a steady stream of readers cannot starve a resize.
///
/// Because the lock prefers the writer, a thread that took it shared must not take it shared
/// again (it would deadlock behind a waiting writer): ``TransactionDepth`` refuses nested
/// transactions before they reach the lock.
final class AccessLock: Sendable {
  private struct State {
    var mutex = pthread_mutex_t()
    var condition = pthread_cond_t()
    var readers = 0
    var writerActive = false
    var writersWaiting = 0
  }

  // Safe to share: every access to the pointee happens with `state.mutex` held (or, for the
  // mutex and condition themselves, through pthread functions made for concurrent use).
  private nonisolated(unsafe) let state: UnsafeMutablePointer<State>

  init() {
    state = .allocate(capacity: 1)
    state.initialize(to: State())
    pthread_mutex_init(&state.pointee.mutex, nil)
    pthread_cond_init(&state.pointee.condition, nil)
  }

  deinit {
    pthread_cond_destroy(&state.pointee.condition)
    pthread_mutex_destroy(&state.pointee.mutex)
    state.deinitialize(count: 1)
    state.deallocate()
  }

  /// Runs `body` holding the lock shared.
  func withShared<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
    pthread_mutex_lock(&state.pointee.mutex)
    while state.pointee.writerActive || state.pointee.writersWaiting > 0 {
      pthread_cond_wait(&state.pointee.condition, &state.pointee.mutex)
    }
    state.pointee.readers += 1
    pthread_mutex_unlock(&state.pointee.mutex)
    defer {
      pthread_mutex_lock(&state.pointee.mutex)
      state.pointee.readers -= 1
      let wake = state.pointee.readers == 0 && state.pointee.writersWaiting > 0
      pthread_mutex_unlock(&state.pointee.mutex)
      if wake { pthread_cond_broadcast(&state.pointee.condition) }
    }
    return try body()
  }

  /// Runs `body` holding the lock exclusively: no shared holder is inside.
  func withExclusive<R, E: Error>(_ body: () throws(E) -> R) throws(E) -> R {
    pthread_mutex_lock(&state.pointee.mutex)
    state.pointee.writersWaiting += 1
    while state.pointee.writerActive || state.pointee.readers > 0 {
      pthread_cond_wait(&state.pointee.condition, &state.pointee.mutex)
    }
    state.pointee.writersWaiting -= 1
    state.pointee.writerActive = true
    pthread_mutex_unlock(&state.pointee.mutex)
    defer {
      pthread_mutex_lock(&state.pointee.mutex)
      state.pointee.writerActive = false
      pthread_mutex_unlock(&state.pointee.mutex)
      pthread_cond_broadcast(&state.pointee.condition)
    }
    return try body()
  }
}

/// Counts the transactions open on the current thread, so that a nested one is refused with a
/// clear error instead of deadlocking.
///
/// A transaction body is synchronous, so it starts and ends on one thread even inside a Swift
/// task; a thread-specific value is therefore exact.
enum TransactionDepth {
  private static let key: pthread_key_t = {
    var key = pthread_key_t()
    let rc = pthread_key_create(&key, nil)
    precondition(rc == 0, "pthread_key_create failed with \(rc)")
    return key
  }()

  /// Runs `body` marked as inside a transaction, or throws
  /// ``LMDBError/Code/nestedTransaction`` if this thread is already inside one.
  static func enter<R>(
    _ operation: @autoclosure () -> String, path: String, _ body: () throws -> R
  ) throws -> R {
    try refuseInside(operation(), path: path)
    pthread_setspecific(key, UnsafeRawPointer(bitPattern: 1))
    defer { pthread_setspecific(key, nil) }
    return try body()
  }

  /// Throws ``LMDBError/Code/nestedTransaction`` if this thread is inside a transaction: for
  /// the calls outside transactions that take an environment's lock shared, or wait for a lock
  /// a writer holds while it waits for this thread's transaction to end.
  static func refuseInside(_ operation: @autoclosure () -> String, path: String)
    throws(LMDBError)
  {
    guard pthread_getspecific(key) == nil else {
      throw LMDBError(
        code: .nestedTransaction, operation: operation(), path: path,
        message: "this thread already has a transaction open; transactions don't nest, "
          + "so do this work inside the open transaction or after it ends")
    }
  }
}
