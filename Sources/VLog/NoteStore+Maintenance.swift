internal import Foundation
internal import LMDB

/// What ``NoteStore/compact(at:options:)`` did: the data file's size before and after.
public struct CompactionReport: Sendable, Hashable {
  /// Bytes of the data file before.
  public let bytesBefore: Int
  /// Bytes of the data file after.
  public let bytesAfter: Int
}

extension NoteStore {
  /// Rewrites a closed store into a compact file, so that erased content is not left in free
  /// pages: `vlog compact`.
  ///
  /// LMDB reuses the pages a store frees but never returns them to the file system and never
  /// clears them, so the bytes of an erased note can survive in the file until the pages are
  /// written again. Compaction opens the store (migrating it, and removing blobs that only
  /// erased attachments used), closes it, and replaces the data file with LMDB's compacting
  /// copy: free pages are left out, and with them every erased byte. A crash during
  /// compaction leaves the old file or the new one, whole.
  ///
  /// The store must not be open, in this process or another: compaction fails then
  /// (``VLogError/Code/storage``, after a second's grace for a process that is closing it), and
  /// a process that opens the store while compaction runs waits for it to finish. It takes about as long as reading the store once.
  ///
  /// - Parameters:
  ///   - path: The store's directory.
  ///   - options: How to open it (its map size).
  /// - Returns: The data file's size before and after.
  public static func compact(at path: String, options: Options = Options()) throws
    -> CompactionReport
  {
    try VLogError.wrapping { try Environment.refuseIfOpenInThisProcess(path) }
    let store = try open(at: path, options: options)
    store.close()
    let result = try VLogError.wrapping {
      try Environment.compact(
        at: path,
        configuration: .init(
          mapSize: options.mapSize, maximumMapSize: options.maximumMapSize,
          maximumDatabases: Schema.databaseCount + 4, durability: .durable))
    }
    // The compacted file is the store's own, not a copy: it keeps its replica id.
    try open(at: path, options: options, adoptingFile: true).close()
    return CompactionReport(bytesBefore: result.bytesBefore, bytesAfter: result.bytesAfter)
  }

  /// Checks the page structure of the store's file at `path` without opening it: what an app
  /// calls before opening a store that may be damaged — on the launch after a crash, or after
  /// an I/O error — because LMDB follows the page numbers in its file as they are, and a
  /// damaged one can end the process before any error can be raised. Every key and value VLog
  /// reads is checked against the file; the pages LMDB walks to find them are checked only
  /// here.
  ///
  /// Every B-tree of the file is walked from its newest meta page, reading the file itself
  /// with every length and page number checked: the meta page liblmdb would read, pages past
  /// the pages in use or reached twice, headers, node offsets, sizes and overlaps, free-page
  /// lists, overflow runs, key order within and across pages and against the branch keys, and
  /// the counts of each database. It reads the whole file once.
  ///
  /// When it finds faults, do not open the store: restore it from a backup, or replace it with
  /// a new store that syncs everything back from the server.
  ///
  /// - Parameter path: The store's directory.
  /// - Returns: What is wrong, one line each, naming the page; empty when the structure is
  ///   whole, or when there is no store at `path` yet.
  /// - Throws: ``VLogError/Code/storage`` if the file cannot be read.
  public static func structureFaults(at path: String) throws -> [String] {
    guard FileManager.default.fileExists(atPath: path + "/data.mdb") else { return [] }
    return try VLogError.wrapping { try PageStructure.check(directory: path).faults }
  }

  /// Redacts the changes replaced longer ago than ``retention``: what every commit does, for a
  /// store that has been open without writing for a while.
  ///
  /// - Returns: The number of changes redacted.
  @discardableResult
  public func applyRetention() throws -> Int {
    guard retention != nil else { return 0 }
    return try VLogError.wrapping {
      try environment.write { transaction in
        var log = try eventLog.appender(in: transaction)
        let now = Milliseconds(dependencies.now())
        let redacted = try log.applyRetention(retention, now: now, in: transaction)
        try log.commit(in: transaction)
        return redacted
      }
    }
  }

  /// Removes the blobs that no attachment still uses — those of deleted attachments and of
  /// deleted notes' attachments — but for those undo may still need (see ``undo()``; clear
  /// the history with ``clearUndoHistory()`` to let them go). This reads every blob's
  /// references; opening a store removes, more cheaply, the blobs released since the last
  /// open.
  ///
  /// - Returns: The number of blobs removed.
  @discardableResult
  public func removeUnusedBlobs() throws -> Int {
    let held = undoHistory.heldBlobs
    return try VLogError.wrapping {
      try environment.write { transaction in
        try Self.removeUnusedBlobs(schema: schema, keeping: held, in: transaction)
      }
    }
  }

  /// Removes every blob no attachment uses but those in `held`; forgets the released list but
  /// for the held ones.
  @discardableResult
  static func removeUnusedBlobs(
    schema: Schema, keeping held: Set<BlobHash> = [], in transaction: borrowing WriteTransaction
  ) throws -> Int {
    var unused: [BlobHash] = []
    try transaction.forEach(in: schema.blobs) { key, _ in
      guard let hash = BlobHash(bytes: Array(key)), !held.contains(hash) else { return }
      if try !schema.eventLog.references(hash, in: transaction) { unused.append(hash) }
    }
    for hash in unused { _ = try transaction.delete(forKey: hash.bytes, in: schema.blobs) }
    try writeReleasedBlobs(
      releasedBlobs(schema: schema, in: transaction).filter(held.contains),
      schema: schema, in: transaction)
    return unused.count
  }

  // MARK: Released blobs

  /// The blobs whose last reference went while undo could still need them: a list in `meta`
  /// (`releasedBlobs`: SHA-256 hashes, 32 bytes each), so that opening a store checks those,
  /// not every blob.
  static let releasedBlobsKey = Array("releasedBlobs".utf8)

  static func releasedBlobs(schema: Schema, in transaction: borrowing some Transaction & ~Copyable)
    throws -> Set<BlobHash>
  {
    guard let value = try transaction.value(forKey: releasedBlobsKey, in: schema.meta) else {
      return []
    }
    guard value.count % 32 == 0 else {
      throw VLogError(.corruptStore, "the released blobs list is \(value.count) bytes")
    }
    var hashes = Set<BlobHash>()
    for offset in stride(from: 0, to: value.count, by: 32) {
      if let hash = BlobHash(bytes: Array(value[offset..<(offset + 32)])) { hashes.insert(hash) }
    }
    return hashes
  }

  static func writeReleasedBlobs(
    _ hashes: Set<BlobHash>, schema: Schema, in transaction: borrowing WriteTransaction
  ) throws {
    guard !hashes.isEmpty else {
      _ = try transaction.delete(forKey: releasedBlobsKey, in: schema.meta)
      return
    }
    let value = hashes.sorted { $0.bytes.lexicographicallyPrecedes($1.bytes) }.flatMap(\.bytes)
    try transaction.put(value, forKey: releasedBlobsKey, in: schema.meta)
  }

  /// Adds blobs a commit released to the list.
  static func recordReleasedBlobs(
    _ hashes: Set<BlobHash>, schema: Schema, in transaction: borrowing WriteTransaction
  ) throws {
    guard !hashes.isEmpty else { return }
    try writeReleasedBlobs(
      releasedBlobs(schema: schema, in: transaction).union(hashes), schema: schema,
      in: transaction)
  }

  /// Removes the released blobs that nothing references again, but for `held`; the list keeps
  /// the held ones. What opening a store does.
  @discardableResult
  static func removeReleasedBlobs(
    schema: Schema, keeping held: Set<BlobHash> = [], in transaction: borrowing WriteTransaction
  ) throws -> Int {
    let released = try releasedBlobs(schema: schema, in: transaction)
    guard !released.isEmpty else { return 0 }
    var removed = 0
    for hash in released where !held.contains(hash) {
      if try !schema.eventLog.references(hash, in: transaction),
        try transaction.delete(forKey: hash.bytes, in: schema.blobs)
      {
        removed += 1
      }
    }
    try writeReleasedBlobs(released.filter(held.contains), schema: schema, in: transaction)
    return removed
  }
}

extension NoteStore {
  /// Deletes the store at `path`: its log, notes, attachments' bytes and the account it
  /// belongs to. What was not synced is lost. The directory and files other than the store's
  /// own stay (a sync client removes its state next to it).
  ///
  /// The way to start over with another account: a store belongs to the first account it
  /// signed in to (see ``AccountBinding``).
  ///
  /// - Throws: ``VLogError/Code/storage`` if this or another process has the store open; then
  ///   nothing is deleted.
  public static func erase(at path: String) throws {
    try VLogError.wrapping { try Environment.remove(at: path) }
  }
}
