#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Darwin)
  internal import Darwin
#endif

/// An advisory `flock` on a file in a directory, held until ``release()`` or the lock goes
/// away: shared (waiting while someone holds it exclusively) or exclusive (failing if anyone
/// still holds it after ``exclusiveGrace``). `flock` locks belong to the open file, so a second
/// lock in the same process conflicts like one in another, and the kernel drops them when a
/// process dies.
package final class FileLock: Sendable {
  // Closed once, by `release()` or `deinit`, which the owner never runs concurrently.
  private nonisolated(unsafe) var descriptor: Int32

  /// How long an exclusive lock waits for holders to let go before it fails: a process that is
  /// closing the file, or a child process that a holder started at that moment (which holds
  /// the open file from its start until it runs its program), lets go within it.
  package static let exclusiveGrace: Duration = .seconds(1)

  /// Takes the lock of `fileName` in `directory`, creating the file if needed.
  ///
  /// - Parameter busy: What to throw when an exclusive lock finds the file held.
  /// - Returns: nil when a shared lock's file cannot be opened (read-only media).
  package init?(
    directory: String, fileName: String, exclusive: Bool, busy: @autoclosure () -> LMDBError
  ) throws(LMDBError) {
    let path = directory + "/" + fileName
    var descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
    if descriptor < 0 { descriptor = open(path, O_RDONLY | O_CLOEXEC) }
    guard descriptor >= 0 else {
      if exclusive { throw makeError(errno, "open \(fileName)", path: directory) }
      return nil
    }
    let clock = ContinuousClock()
    let giveUp = clock.now + Self.exclusiveGrace
    while flock(descriptor, exclusive ? LOCK_EX | LOCK_NB : LOCK_SH) != 0 {
      let error = errno
      if error == EINTR { continue }
      if error == EWOULDBLOCK && clock.now < giveUp {
        usleep(10_000)
        continue
      }
      close(descriptor)
      if error == EWOULDBLOCK { throw busy() }
      throw makeError(error, "lock \(fileName)", path: directory)
    }
    self.descriptor = descriptor
  }

  /// Gives the lock up.
  package func release() {
    guard descriptor >= 0 else { return }
    close(descriptor)
    descriptor = -1
  }

  deinit { release() }
}
