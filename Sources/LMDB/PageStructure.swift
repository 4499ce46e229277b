internal import Foundation

/// A check of an LMDB data file's page structure that trusts nothing in the file: it reads the
/// file itself (not through liblmdb, which follows page numbers and node sizes as they are and
/// dies on damaged ones), checks every length and page number against the file before using
/// it, and walks every B-tree — the free pages', the main one, and each named database's —
/// from the newest valid meta page.
///
/// It checks every field liblmdb takes from the file as it is, and so finds what liblmdb would
/// crash on, assert on, or silently misread: the meta pages (the one liblmdb reads, their page
/// size, last page, map and transaction), each page's header and flags and the free space's
/// bounds, each node's place, flags, key and value sizes (nodes that overlap or run past their
/// page), overflow runs, page numbers past the pages in use or reached twice, database records
/// (flags, depth, counts), the free-page lists (their order, a page listed twice or used by a
/// tree), and keys out of order within a page, across pages, or against the branch keys that
/// lead to them. Run it before opening a store that may be damaged: when it reports faults,
/// opening with liblmdb is not safe.
public struct PageStructure: Sendable {
  /// One B-tree's figures, as walked.
  public struct Tree: Sendable, Hashable {
    /// The root page; nil for an empty tree.
    public var root: Int?
    /// The tree's depth, as its record gives it: 1 for a root that is a leaf.
    public var depth = 0
    /// Entries (leaf nodes) found.
    public var entries = 0
    /// Branch pages found.
    public var branchPages = 0
    /// Leaf pages found.
    public var leafPages = 0
    /// Overflow pages found.
    public var overflowPages = 0
  }

  /// The page size the meta page gives.
  public var pageSize = 0
  /// Pages in use: the newest meta page's last page, plus one.
  public var pagesInUse = 0
  /// The map size the meta page used records, in bytes: no page in use lies past it.
  public var mapSize: UInt64 = 0
  /// The transaction that wrote the meta page used.
  public var transaction: UInt64 = 0
  /// Each named database's tree, by name; the main tree as `""`, the free pages' as
  /// `"(free pages)"`.
  public var trees: [String: Tree] = [:]
  /// What is wrong, each naming the page and what was found there; empty when the structure
  /// is whole.
  public var faults: [String] = []

  /// Whether no fault was found.
  public var isWhole: Bool { faults.isEmpty }

  /// At most this many faults are listed; past it, the walk stops.
  public static let maximumFaults = 100

  /// Checks the data file of the environment in `directory`.
  ///
  /// A process may be writing to the environment meanwhile, and a commit reuses the pages of
  /// snapshots no reader holds: the walk can then read pages rewritten under it, a torn view
  /// that looks like damage. So when the walk finds faults and the file's newest transaction
  /// moved meanwhile, the file is read again as a reader of the environment: while a read
  /// transaction holds a snapshot, no commit reuses a page of it or of any newer one. Faults
  /// found when no transaction moved, or under a reader, are the file's. liblmdb is opened
  /// only then, when other processes are committing to the file — which they could not, were
  /// its structure damaged where they read.
  ///
  /// - Throws: ``LMDBError`` if the file cannot be read (damage is reported, not thrown).
  public static func check(directory: String) throws -> PageStructure {
    let path = directory + "/data.mdb"
    func read() throws -> Data {
      do {
        return try Data(contentsOf: URL(fileURLWithPath: path), options: .alwaysMapped)
      } catch {
        throw LMDBError(
          code: .ioError, operation: "read the data file", path: directory,
          message: "cannot read \(path): \(error.localizedDescription)")
      }
    }
    /// The meta pages as they are now: the first 128 KiB (two pages of the largest size).
    func metaPages() throws -> Data {
      guard let handle = FileHandle(forReadingAtPath: path) else { return try read() }
      defer { try? handle.close() }  // only read: nothing to lose at the close
      return try handle.read(upToCount: 2 * 65536) ?? Data()
    }
    /// A walk, and whether it stands: whole, or no commit came during it. A pinned walk takes
    /// the meta pages before it maps the file, so that the file it maps holds every page they
    /// name.
    func walk(pinned: Bool = false) throws -> (structure: PageStructure, stands: Bool) {
      let meta = pinned ? try metaPages() : nil
      let structure = try read().withUnsafeBytes { file in
        guard let meta else { return PageStructure(file: file) }
        return meta.withUnsafeBytes { meta in
          var walker = Walker(file: file)
          walker.metaSource = meta
          walker.run()
          return walker.result
        }
      }
      if structure.isWhole { return (structure, true) }
      let after = try read().withUnsafeBytes { PageStructure.newestTransaction(in: $0) }
      return (structure, after == structure.transaction)
    }
    let first = try walk()
    if first.stands { return first.structure }
    // Under a reader no page of the snapshot walked is reused, nor of any newer one. The meta
    // pages are read before the file is mapped: a commit after the mapping writes pages past
    // it (the file grows at each commit while pages are held). When the environment cannot be
    // opened as a reader (read-only media without its lock file, say), the first walk's faults
    // are what there is to report.
    let pinned = try? asReader(of: directory) { () throws -> PageStructure in
      var last = first.structure
      for _ in 0..<5 {
        let next = try walk(pinned: true)
        if next.stands { return next.structure }
        last = next.structure
      }
      return last
    }
    return pinned ?? first.structure
  }

  /// `body`, run while a read transaction of the environment in `directory` holds its newest
  /// snapshot: through this process's open environment, or one opened read-only for it.
  private static func asReader<R>(of directory: String, _ body: () throws -> R) throws -> R {
    let canonical = try Environment.canonicalDirectory(directory, creating: false)
    for _ in 0..<2 {
      if let open = Registry.environments.withLock({ $0[canonical]?.environment }), open.isOpen {
        return try open.read { _ in try body() }
      }
      let environment: Environment
      do {
        environment = try Environment.open(
          at: canonical, configuration: .init(maximumDatabases: 1, isReadOnly: true))
      } catch let error as LMDBError where error.code == .alreadyOpen {
        continue  // opened meanwhile by this process: read through that one
      }
      defer { environment.close() }
      return try environment.read { _ in try body() }
    }
    throw LMDBError(
      code: .alreadyOpen, operation: "check the page structure", path: directory,
      message: "the environment kept being opened and closed during the check")
  }

  /// The transaction of the newest valid meta page, or nil if neither is valid.
  static func newestTransaction(in file: UnsafeRawBufferPointer) -> UInt64? {
    let walker = Walker(file: file)
    guard let first = walker.meta(at: 0) else { return nil }
    let second = walker.meta(at: first.pageSize)
    return max(first.transaction, second?.transaction ?? 0)
  }

}

extension PageStructure {
  /// Checks a data file's bytes.
  public init(file: UnsafeRawBufferPointer) {
    var walker = Walker(file: file)
    walker.run()
    self = walker.result
  }
}
