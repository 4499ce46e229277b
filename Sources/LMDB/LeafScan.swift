internal import Foundation

/// Every key and value that the pages of an LMDB data file hold, found without following any
/// tree: what a damaged file still holds when its B-trees cannot be trusted.
///
/// Each page is read as a leaf page might be, whatever its header says, and its nodes are
/// found two ways: through the page's node pointers, and by walking the nodes themselves, which
/// lie end to end from the page's free-space bound to its end. So one damaged byte — in a page
/// header, a node pointer, the free-space bounds — loses at most the node it lies in. A value
/// too large for its page is read from the overflow page its node names. Every offset and
/// length is checked against the file before it is read.
///
/// What it finds is raw: besides the live entries of every database, it finds entries on pages
/// LMDB has freed (older versions of what was rewritten), and anything in the file that parses
/// as a node. The caller checks what it takes (a checksum, a hash).
public enum LeafScan {
  /// One node found: where it lies, its key, and where its value lies.
  public struct Node: Sendable, Hashable {
    /// The page it was found on.
    public var page: Int
    /// The file offsets of the node's header, key and inline value (for an overflow value,
    /// its page number).
    public var bytes: Range<Int>
    /// The file offsets of its value: within ``bytes``, or on overflow pages.
    public var value: Range<Int>
    /// The key's file offsets.
    public var key: Range<Int>
    /// Whether the node is a named database's record (in the main tree).
    public var isDatabaseRecord: Bool
  }

  /// At most this many bytes per value: larger claims are damage (VLog's largest value is an
  /// attachment of 64 MiB).
  public static let maximumValueBytes = 1 << 27

  /// Calls `body` with every node found in a data file's bytes, in file order (a node found
  /// both ways once).
  public static func forEachNode<Failure: Error>(
    in file: UnsafeRawBufferPointer, _ body: (Node) throws(Failure) -> Void
  ) throws(Failure) {
    let pageSize = pageSize(of: file)
    let pages = file.count / pageSize
    guard pages > 2 else { return }
    for page in 2..<pages {
      for node in nodes(ofPage: page, in: file, pageSize: pageSize) { try body(node) }
    }
  }

  /// Calls `body` with the bytes of the data file of the environment in `directory`, mapped.
  ///
  /// - Throws: ``LMDBError`` if the file cannot be read; what `body` throws.
  public static func withFile<Result>(
    directory: String, _ body: (UnsafeRawBufferPointer) throws -> Result
  ) throws -> Result {
    let path = directory + "/data.mdb"
    let data: Data
    do {
      data = try Data(contentsOf: URL(fileURLWithPath: path), options: .alwaysMapped)
    } catch {
      throw LMDBError(
        code: .ioError, operation: "read the data file", path: directory,
        message: "cannot read \(path): \(error.localizedDescription)")
    }
    return try data.withUnsafeBytes { file in try body(file) }
  }

  /// A valid meta page's page size, transaction and main tree root, at `offset`.
  private static func meta(at offset: Int, in file: UnsafeRawBufferPointer) -> (
    pageSize: Int, transaction: UInt64, mainRoot: UInt64
  )? {
    Walker(file: file).meta(at: offset).map { ($0.pageSize, $0.transaction, $0.main.root) }
  }

  /// The two meta pages that agree with each other: the second lies one page after the first,
  /// and both give that page size. One damaged meta page leaves the other.
  private static func metas(in file: UnsafeRawBufferPointer) -> [(
    pageSize: Int, transaction: UInt64, mainRoot: UInt64
  )] {
    var found: [(pageSize: Int, transaction: UInt64, mainRoot: UInt64)] = []
    let first = meta(at: 0, in: file)
    for size in [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536] {
      guard let second = meta(at: size, in: file), second.pageSize == size else { continue }
      found.append(second)
      if let first, first.pageSize == size { found.append(first) }
      return found
    }
    return first.map { [$0] } ?? []
  }

  /// The page size the meta pages give, or 4,096 if neither is readable.
  public static func pageSize(of file: UnsafeRawBufferPointer) -> Int {
    metas(in: file).first?.pageSize ?? 4096
  }

  /// The root page of the main tree (which holds the named databases' records) as the newest
  /// readable meta page gives it; nil if none is readable.
  public static func mainTreeRoot(in file: UnsafeRawBufferPointer) -> Int? {
    guard let newest = metas(in: file).max(by: { $0.transaction < $1.transaction }),
      newest.mainRoot < UInt64(file.count / newest.pageSize)
    else { return nil }
    return Int(newest.mainRoot)
  }

  private static func read16(_ file: UnsafeRawBufferPointer, _ offset: Int) -> Int {
    Int(file.loadUnaligned(fromByteOffset: offset, as: UInt16.self).littleEndian)
  }

  /// The nodes of `page`, read as a leaf page.
  private static func nodes(ofPage page: Int, in file: UnsafeRawBufferPointer, pageSize: Int)
    -> [Node]
  {
    let base = page * pageSize
    let lower = read16(file, base + 12)
    let upper = read16(file, base + 14)
    var offsets = Set<Int>()
    // Through the pointers, if the bounds say where they end.
    if lower >= 16, lower <= pageSize {
      for index in 0..<(lower - 16) / 2 {
        let offset = read16(file, base + 16 + 2 * index)
        if offset >= 16, offset + 8 <= pageSize { offsets.insert(offset) }
      }
    }
    // End to end from the free-space bound, as far as the nodes fit.
    if upper >= 16, upper < pageSize {
      var offset = upper
      while offset + 8 <= pageSize {
        guard let size = nodeSize(file, base + offset, room: pageSize - offset) else { break }
        offsets.insert(offset)
        offset += size
      }
    }
    return offsets.sorted().compactMap {
      node(file, page: page, at: base + $0, pageEnd: base + pageSize, pageSize: pageSize)
    }
  }

  /// The bytes a node takes on its page (rounded up to an even count), if it fits in `room`.
  private static func nodeSize(_ file: UnsafeRawBufferPointer, _ start: Int, room: Int) -> Int? {
    let flags = read16(file, start + 4)
    let keySize = read16(file, start + 6)
    let dataSize = read16(file, start) | (read16(file, start + 2) << 16)
    let size = 8 + keySize + (flags & 0x01 != 0 ? 8 : dataSize)
    let even = (size + 1) & ~1
    guard keySize > 0, size <= room else { return nil }
    return min(even, room)
  }

  /// The node at `start`, if its key and value lie within the page and the file.
  private static func node(
    _ file: UnsafeRawBufferPointer, page: Int, at start: Int, pageEnd: Int, pageSize: Int
  ) -> Node? {
    let flags = read16(file, start + 4)
    let keySize = read16(file, start + 6)
    let dataSize = read16(file, start) | (read16(file, start + 2) << 16)
    let keyStart = start + 8
    let dataStart = keyStart + keySize
    guard keySize > 0, dataStart <= pageEnd, flags & 0x04 == 0 else { return nil }
    if flags & 0x01 != 0 {
      // An overflow value: a page number here, the bytes after that page's header.
      guard dataStart + 8 <= pageEnd, dataSize <= maximumValueBytes else { return nil }
      let number = file.loadUnaligned(fromByteOffset: dataStart, as: UInt64.self).littleEndian
      guard number >= 2, number < UInt64(file.count / pageSize) else { return nil }
      let valueStart = Int(number) * pageSize + 16
      guard valueStart + dataSize <= file.count else { return nil }
      return Node(
        page: page, bytes: start..<dataStart + 8, value: valueStart..<valueStart + dataSize,
        key: keyStart..<dataStart, isDatabaseRecord: false)
    }
    guard dataStart + dataSize <= pageEnd else { return nil }
    return Node(
      page: page, bytes: start..<dataStart + dataSize, value: dataStart..<dataStart + dataSize,
      key: keyStart..<dataStart, isDatabaseRecord: flags & 0x02 != 0)
  }
}
