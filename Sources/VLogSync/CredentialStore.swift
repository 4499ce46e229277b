internal import Foundation
public import VLog

#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Darwin)
  internal import Darwin
#endif

/// Where a ``SyncAccount`` keeps its session token between launches, so that the app signs in
/// with the password once and never stores the password itself.
///
/// ``FileCredentialStore`` keeps tokens in a file only its owner can read, for Linux and the
/// command line. On Apple platforms, implement the two methods over the Keychain
/// (`SecItemCopyMatching` and `SecItemAdd`/`SecItemUpdate`/`SecItemDelete` on a
/// `kSecClassGenericPassword` item whose `kSecAttrService` names the server and whose
/// `kSecAttrAccount` is the user name, with `kSecAttrAccessibleAfterFirstUnlock` so background
/// syncs can read it).
///
/// A token is a bearer credential: whoever holds it can read and change the account until it
/// expires or is revoked (``SyncAccount/signOut()`` revokes it; a password change revokes every
/// other).
public protocol CredentialStore: Sendable {
  /// The token kept for `username`, or nil if there is none.
  ///
  /// - Throws: When the store cannot be read, or is not safe to read from.
  func token(for username: String) throws -> String?

  /// Keeps `token` for `username`, replacing any; nil removes it.
  ///
  /// - Throws: When the store cannot be written.
  func setToken(_ token: String?, for username: String) throws

  /// The keys of an end-to-end encrypted account kept for `username`
  /// (``AccountKeys/rawRepresentation``), or nil if there are none.
  ///
  /// A store that keeps none (the default) makes the device open the account's keys with the
  /// password at each launch.
  ///
  /// - Throws: When the store cannot be read, or is not safe to read from.
  func accountKeys(for username: String) throws -> [UInt8]?

  /// Keeps an encrypted account's keys for `username`, replacing any; nil removes them.
  ///
  /// - Throws: When the store cannot be written.
  func setAccountKeys(_ keys: [UInt8]?, for username: String) throws
}

extension CredentialStore {
  /// None: the default keeps no keys.
  public func accountKeys(for username: String) throws -> [UInt8]? { nil }

  /// Nothing: the default keeps no keys.
  public func setAccountKeys(_ keys: [UInt8]?, for username: String) throws {}
}

/// Why a credential store refused to read or write.
public struct CredentialStoreError: Error, Sendable, Hashable, CustomStringConvertible {
  /// What went wrong, naming the file.
  public let message: String

  /// Creates an error.
  public init(_ message: String) { self.message = message }

  /// The message.
  public var description: String { message }
}

/// Tokens, and encrypted accounts' keys, in a JSON file that only its owner can read or write
/// (mode 0600).
///
/// The file is replaced atomically on every change and created with mode 0600. A file that
/// anyone else can read or write, that belongs to another user, or that is not a regular file
/// (a symbolic link, say) is refused rather than used: the token in it may have been read, or
/// may not be ours.
public struct FileCredentialStore: CredentialStore {
  /// The file's path.
  public let path: String

  /// A store in the file at `path` (created when the first token is kept).
  public init(path: String) { self.path = path }

  /// The default file of a store: `credentials.json` in the store's directory.
  public static func file(for store: NoteStore) -> FileCredentialStore {
    file(forStoreAt: store.path)
  }

  /// The default file of the store in directory `path`.
  public static func file(forStoreAt path: String) -> FileCredentialStore {
    FileCredentialStore(path: path + "/credentials.json")
  }

  private struct File: Codable {
    var tokens: [String: String]
    /// Encrypted accounts' keys, base64, by user name; absent in files written before them.
    var keys: [String: String]?
  }

  /// The token kept for `username`.
  public func token(for username: String) throws -> String? {
    try read()?.tokens[username]
  }

  /// Keeps or removes the token for `username`.
  public func setToken(_ token: String?, for username: String) throws {
    var file = try read() ?? File(tokens: [:])
    guard file.tokens[username] != token else { return }
    file.tokens[username] = token
    try write(file)
  }

  /// The keys kept for `username`.
  public func accountKeys(for username: String) throws -> [UInt8]? {
    guard let text = try read()?.keys?[username] else { return nil }
    guard let data = Data(base64Encoded: text) else {
      throw CredentialStoreError("'\(path)' holds keys for '\(username)' that are not base64")
    }
    return Array(data)
  }

  /// Keeps or removes the keys for `username`.
  public func setAccountKeys(_ keys: [UInt8]?, for username: String) throws {
    var file = try read() ?? File(tokens: [:])
    let text = keys.map { Data($0).base64EncodedString() }
    guard file.keys?[username] != text else { return }
    file.keys = file.keys ?? [:]
    file.keys?[username] = text
    if file.keys?.isEmpty == true { file.keys = nil }
    try write(file)
  }

  /// The file's contents, or nil if there is no file; checks its owner and mode first, on the
  /// file opened (not followed through a link), so the file checked is the file read.
  private func read() throws -> File? {
    let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
    guard descriptor >= 0 else {
      switch errno {
      case ENOENT: return nil
      case ELOOP:
        throw CredentialStoreError(
          "'\(path)' is not a regular file; refusing to read a token from it")
      default:
        throw CredentialStoreError("cannot read '\(path)': \(String(cString: strerror(errno)))")
      }
    }
    let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
    var status = stat()
    guard fstat(descriptor, &status) == 0 else {
      throw CredentialStoreError("cannot read '\(path)': \(String(cString: strerror(errno)))")
    }
    guard status.st_mode & S_IFMT == S_IFREG else {
      throw CredentialStoreError(
        "'\(path)' is not a regular file; refusing to read a token from it")
    }
    guard status.st_uid == geteuid() else {
      throw CredentialStoreError(
        "'\(path)' belongs to user \(status.st_uid), not to this user; refusing to use its tokens")
    }
    let mode = status.st_mode & 0o777
    guard mode & 0o077 == 0 else {
      throw CredentialStoreError(
        "'\(path)' can be read or written by other users (mode \(String(mode, radix: 8))); "
          + "its tokens may have been read: sign in again after `chmod 600 '\(path)'`, "
          + "or remove the file")
    }
    let data: Data
    do {
      data = try handle.readToEnd() ?? Data()
    } catch {
      throw CredentialStoreError("cannot read '\(path)': \(error)")
    }
    do {
      return try JSONDecoder().decode(File.self, from: data)
    } catch {
      throw CredentialStoreError("'\(path)' is not a credentials file: \(error)")
    }
  }

  /// Writes the file with mode 0600: a new file beside it, synced, then renamed over it.
  private func write(_ file: File) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
    let bytes = Array(try encoder.encode(file))
    // A name of its own, so a file left by a crash never blocks the next write.
    let temporary = path + ".\(UUID().uuidString).tmp"
    let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
    guard descriptor >= 0 else {
      throw CredentialStoreError(
        "cannot create '\(temporary)': \(String(cString: strerror(errno)))")
    }
    var failure: String?
    var written = 0
    while written < bytes.count, failure == nil {
      let result = bytes.withUnsafeBytes { buffer -> Int in
        guard let base = buffer.baseAddress else { return 0 }
        return systemWrite(descriptor, base + written, buffer.count - written)
      }
      if result < 0, errno != EINTR { failure = String(cString: strerror(errno)) }
      if result > 0 { written += result }
    }
    if failure == nil, fsync(descriptor) != 0 { failure = String(cString: strerror(errno)) }
    close(descriptor)
    if failure == nil, rename(temporary, path) != 0 { failure = String(cString: strerror(errno)) }
    if let failure {
      unlink(temporary)
      throw CredentialStoreError("cannot write '\(path)': \(failure)")
    }
  }
}

/// `write(2)`, which the struct's own `write` hides.
private func systemWrite(_ descriptor: Int32, _ bytes: UnsafeRawPointer, _ count: Int) -> Int {
  #if canImport(Glibc)
    Glibc.write(descriptor, bytes, count)
  #else
    Darwin.write(descriptor, bytes, count)
  #endif
}
