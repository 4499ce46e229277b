internal import Foundation

#if canImport(Glibc)
  public import Glibc
#elseif canImport(Darwin)
  public import Darwin
#endif

/// A child process started with `posix_spawn`, its standard output and error read through
/// pipes: for tests that run `vlog` or LMDB's tools.
///
/// Foundation's `Process.run()` on Linux over-reads the entries of `/proc/self/fd` and, in a
/// process with many open files such as a parallel test run, can crash it (fixed in
/// swift-corelibs-foundation after Swift 6.3.1, pull request 5472); this type does not read
/// that directory.
public final class ChildProcess: Sendable {
  /// The child's process id.
  public let pid: pid_t
  /// The read end of the child's standard output.
  public let output: Int32
  /// The read end of the child's standard error.
  public let errors: Int32

  /// An error starting a child, with the `errno` or `posix_spawn` result.
  public struct Failure: Error, CustomStringConvertible {
    /// What failed.
    public let description: String
  }

  #if canImport(Glibc)
    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34 and later), which its headers
    /// declare only to C compiled with `_GNU_SOURCE`; nil where the C library has none.
    private static let addCloseFrom:
      (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32)? =
        dlsym(nil, "posix_spawn_file_actions_addclosefrom_np").map {
          unsafeBitCast(
            $0,
            to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32)
              .self)
        }
  #endif

  /// Starts `executable` with `arguments`, and the environment of this process with
  /// `environment` laid over it.
  public init(_ executable: String, _ arguments: [String], environment: [String: String] = [:])
    throws
  {
    var outputPipe: [Int32] = [-1, -1]
    var errorPipe: [Int32] = [-1, -1]
    guard pipe(&outputPipe) == 0, pipe(&errorPipe) == 0 else {
      throw Failure(description: "pipe: errno \(errno)")
    }
    // Not inherited by other children; the child's own copies are made by `dup2`.
    for descriptor in outputPipe + errorPipe { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_adddup2(&actions, outputPipe[1], 1)
    posix_spawn_file_actions_adddup2(&actions, errorPipe[1], 2)
    // Nothing else of this process's: sockets are not close-on-exec (SwiftNIO accepts without
    // it), and a child that keeps a copy of a connection the server closed (a database server
    // started here lives on) holds it open, so its peer never sees it close.
    #if canImport(Glibc)
      if let closeFrom = Self.addCloseFrom { _ = closeFrom(&actions, 3) }
    #endif

    var variables: [String: String] = [:]
    var entry = environ
    while let pointer = entry.pointee {
      let text = String(cString: pointer)
      if let equals = text.firstIndex(of: "=") {
        variables[String(text[..<equals])] = String(text[text.index(after: equals)...])
      }
      entry += 1
    }
    variables.merge(environment) { $1 }
    let argv = ([executable] + arguments).map { strdup($0) } + [nil]
    let envp = variables.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer {
      for pointer in argv + envp { free(pointer) }
    }
    var pid: pid_t = 0
    let result = posix_spawn(&pid, executable, &actions, nil, argv, envp)
    close(outputPipe[1])
    close(errorPipe[1])
    guard result == 0 else {
      close(outputPipe[0])
      close(errorPipe[0])
      throw Failure(description: "cannot start \(executable): \(String(cString: strerror(result)))")
    }
    self.pid = pid
    self.output = outputPipe[0]
    self.errors = errorPipe[0]
  }

  deinit {
    close(output)
    close(errors)
  }

  /// Reads from the child's standard output until a line ends (or the output ends), and
  /// returns what was read.
  public func readLine() -> String {
    var bytes: [UInt8] = []
    var byte: UInt8 = 0
    while read(output, &byte, 1) == 1 {
      bytes.append(byte)
      if byte == UInt8(ascii: "\n") { break }
    }
    return String(decoding: bytes, as: UTF8.self)
  }

  /// Reads the rest of standard output and error (both at once, so that neither pipe fills),
  /// waits for the child to end, and returns its exit status (128 + the signal if a signal
  /// ended it) with what it wrote.
  public func finish() -> (status: Int32, output: String, errors: String) {
    var collected: [[UInt8]] = [[], []]
    var open = [output, errors]
    var buffer = [UInt8](repeating: 0, count: 65536)
    while open.contains(where: { $0 >= 0 }) {
      var descriptors = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
      guard poll(&descriptors, nfds_t(descriptors.count), -1) >= 0 else {
        if errno == EINTR { continue }
        break
      }
      for index in descriptors.indices where descriptors[index].revents != 0 {
        let count = read(open[index], &buffer, buffer.count)
        if count > 0 {
          collected[index] += buffer[..<count]
        } else if count == 0 || errno != EINTR {
          open[index] = -1
        }
      }
    }
    return (
      wait(), String(decoding: collected[0], as: UTF8.self),
      String(decoding: collected[1], as: UTF8.self)
    )
  }

  /// Sends `signal` to the child.
  public func send(_ signal: Int32) {
    _ = kill(pid, signal)
  }

  /// Waits for the child to end; returns its exit status, or 128 + the signal that ended it.
  @discardableResult
  public func wait() -> Int32 {
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    let signal = status & 0x7f
    return signal == 0 ? (status >> 8) & 0xff : 128 + signal
  }

  /// Runs `executable` to the end; returns its exit status, output and errors.
  public static func run(
    _ executable: String, _ arguments: [String], environment: [String: String] = [:]
  ) throws -> (status: Int32, output: String, errors: String) {
    try ChildProcess(executable, arguments, environment: environment).finish()
  }

  /// Runs `executable` to the end on a thread of its own; returns its exit status, output and
  /// errors. What a test in a task uses: waiting on the cooperative pool (two threads on a
  /// two-core machine) would stall every other task of the process meanwhile, a server this
  /// child talks to included.
  public static func runOffPool(
    _ executable: String, _ arguments: [String], environment: [String: String] = [:]
  ) async throws -> (status: Int32, output: String, errors: String) {
    let result = await offPool {
      Result { try run(executable, arguments, environment: environment) }
    }
    return try result.get()
  }
}
