/// LMDB's on-disk layout (64-bit builds, 0.9): the page header, node header, database record
/// and meta page offsets.
private enum Layout {
  static let pageHeader = 16
  static let nodeHeader = 8
  static let databaseRecord = 48
  static let magic: UInt32 = 0xBEEF_C0DE
  static let dataVersion: UInt32 = 1
  static let branch: UInt16 = 0x01
  static let leaf: UInt16 = 0x02
  static let overflow: UInt16 = 0x04
  static let meta: UInt16 = 0x08
  static let leaf2: UInt16 = 0x20
  static let bigData: UInt16 = 0x01
  static let subData: UInt16 = 0x02
  /// `MDB_DUPSORT`, in a database record's flags.
  static let duplicateSort: UInt16 = 0x04
  /// `MDB_REVERSEKEY` and `MDB_INTEGERKEY`: keys not in byte order.
  static let ownOrder: UInt16 = 0x02 | 0x08
  /// `MDB_INTEGERDUP` and `MDB_REVERSEDUP`: harmless without `MDB_DUPSORT`.
  static let duplicateOrder: UInt16 = 0x20 | 0x40
  /// The free pages' record: `MDB_INTEGERKEY`, with the environment's `MDB_FIXEDMAP` and
  /// `MDB_NOSUBDIR` flags that liblmdb stores beside it.
  static let freeRecord: UInt16 = 0x08
  static let freeRecordEnvironment: UInt16 = 0x01 | 0x4000
  /// The page sizes liblmdb writes: the OS page size, from 4 KiB to `MAX_PAGESIZE`.
  static let pageSizes = 4096...32768
  /// The largest map a process can have (47 bits of address space).
  static let maximumMap: UInt64 = 1 << 47
  static let maximumDepth = 32
  /// The longest key liblmdb 0.9 stores (`mdb_env_get_maxkeysize`).
  static let maximumKey = 511
}

/// A database record (`MDB_db`) as read.
struct DatabaseRecord {
  var flags: UInt16 = 0
  var depth: UInt16 = 0
  var branchPages: UInt64 = 0
  var leafPages: UInt64 = 0
  var overflowPages: UInt64 = 0
  var entries: UInt64 = 0
  var root: UInt64 = 0
  /// `P_INVALID`: an empty tree.
  static let noRoot = UInt64.max
}

/// Reads a data file's meta pages and walks its trees (``LeafScan`` reads its meta pages
/// with it too).
struct Walker {
  let file: UnsafeRawBufferPointer
  var result = PageStructure()
  /// Pages reached so far (by any tree, as a node's page or an overflow run).
  var reached: [Bool] = []
  /// The pages the free-page lists name.
  var freeListed: [Int] = []
  /// The whole pages the file holds.
  var pagesInFile = 0
  var stopped = false

  /// Where the meta pages are read, if not from ``file``: a copy taken before the file was
  /// mapped, while a reader holds a snapshot (see ``PageStructure/check(directory:)``).
  var metaSource: UnsafeRawBufferPointer?

  init(file: UnsafeRawBufferPointer) { self.file = file }

  mutating func fault(_ message: String) {
    guard !stopped else { return }
    result.faults.append(message)
    if result.faults.count >= PageStructure.maximumFaults {
      result.faults.append("more faults not listed")
      stopped = true
    }
  }

  func read16(_ offset: Int) -> UInt16? {
    guard offset >= 0, offset + 2 <= file.count else { return nil }
    return file.loadUnaligned(fromByteOffset: offset, as: UInt16.self).littleEndian
  }

  func read32(_ offset: Int) -> UInt32? {
    guard offset >= 0, offset + 4 <= file.count else { return nil }
    return file.loadUnaligned(fromByteOffset: offset, as: UInt32.self).littleEndian
  }

  func read64(_ offset: Int) -> UInt64? {
    guard offset >= 0, offset + 8 <= file.count else { return nil }
    return file.loadUnaligned(fromByteOffset: offset, as: UInt64.self).littleEndian
  }

  func databaseRecord(at offset: Int) -> DatabaseRecord? {
    guard offset >= 0, offset + Layout.databaseRecord <= file.count else { return nil }
    return DatabaseRecord(
      flags: read16(offset + 4) ?? 0, depth: read16(offset + 6) ?? 0,
      branchPages: read64(offset + 8) ?? 0, leafPages: read64(offset + 16) ?? 0,
      overflowPages: read64(offset + 24) ?? 0, entries: read64(offset + 32) ?? 0,
      root: read64(offset + 40) ?? 0)
  }

  /// A meta page's fields, if it is one: page size, last page, transaction, free and main
  /// records.
  func meta(at offset: Int) -> (
    pageSize: Int, lastPage: UInt64, transaction: UInt64, mapSize: UInt64,
    free: DatabaseRecord, main: DatabaseRecord
  )? {
    if let metaSource { return Walker(file: metaSource).meta(at: offset) }
    let body = offset + Layout.pageHeader
    guard isMeta(at: offset), let free = databaseRecord(at: body + 24),
      let main = databaseRecord(at: body + 72),
      let pageSize = read32(body + 24), let lastPage = read64(body + 120),
      let transaction = read64(body + 128), let mapSize = read64(body + 16)
    else { return nil }
    let size = Int(pageSize)
    guard size >= 512, size <= 65536, size & (size - 1) == 0 else { return nil }
    return (size, lastPage, transaction, mapSize, free, main)
  }

  /// Whether the page at `offset` is a meta page by liblmdb's test (its flag, magic and
  /// version), whatever its fields hold.
  func isMeta(at offset: Int) -> Bool {
    if let metaSource { return Walker(file: metaSource).isMeta(at: offset) }
    let body = offset + Layout.pageHeader
    guard let flags = read16(offset + 10), flags & Layout.meta != 0 else { return false }
    return read32(body) == Layout.magic && read32(body + 4) == Layout.dataVersion
  }

  mutating func run() {
    // The first meta page gives the page size; the second sits one page later.
    guard let first = meta(at: 0) else {
      fault("page 0: not an LMDB meta page (the file's header is damaged)")
      return
    }
    // liblmdb keeps a page's free-space bounds in 16 bits, and its largest key fits a node only
    // from 4 KiB pages on: it writes none smaller, nor larger than 32 KiB.
    guard Layout.pageSizes.contains(first.pageSize) else {
      fault(
        "meta page 0: a page size of \(first.pageSize), which liblmdb does not write")
      return
    }
    // liblmdb reads the second where the first's page size says, refuses to open a file
    // whose second is not a meta page, and takes the newer of the two with its own page size.
    guard let second = meta(at: first.pageSize), second.pageSize == first.pageSize else {
      fault(
        isMeta(at: first.pageSize)
          ? "meta page 1: a page size other than meta page 0's \(first.pageSize)"
          : "page 1: not an LMDB meta page (the file's header is damaged)")
      return
    }
    var chosen = first
    var chosenPage = 0
    if second.transaction > first.transaction {
      chosen = second
      chosenPage = 1
    }
    // The next transaction's number must not wrap (liblmdb would file free pages under 0).
    guard chosen.transaction < 1 << 63 else {
      fault("meta page \(chosenPage): transaction \(chosen.transaction), near the numbers' end")
      return
    }
    // liblmdb writes transaction t's meta page to page t mod 2, and its transactions read the
    // meta page the lock file's transaction number names that way, not the newer of the two:
    // a newest meta page on the other page is not the one liblmdb would open.
    guard chosen.transaction % 2 == UInt64(chosenPage) else {
      result.pageSize = chosen.pageSize
      result.transaction = chosen.transaction
      fault(
        "meta page \(chosenPage): the newest, of transaction \(chosen.transaction), which "
          + "liblmdb reads from page \(chosen.transaction % 2)")
      return
    }
    result.pageSize = chosen.pageSize
    result.transaction = chosen.transaction
    guard chosen.mapSize <= Layout.maximumMap else {
      fault(
        "meta page \(chosenPage): a map of \(chosen.mapSize) bytes, more than a process can map")
      return
    }
    // The last page in use may lie past the file's end: LMDB counts pages a transaction took
    // and freed again without writing them. No tree may name one; a free-page list may.
    pagesInFile = file.count / chosen.pageSize
    // liblmdb takes no page past its map, and a commit records a map at least as large as the
    // one it took its pages in.
    result.mapSize = chosen.mapSize
    let mapPages = chosen.mapSize / UInt64(chosen.pageSize)
    // Pages 0 and 1 are the meta pages: a last page below 1 would have the next write take one.
    guard chosen.lastPage >= 1, chosen.lastPage < min(mapPages, UInt64(Int.max / chosen.pageSize))
    else {
      fault(
        "meta page: the last page in use is \(chosen.lastPage), not between 1 and the map of "
          + "\(mapPages) pages it records")
      return
    }
    result.pagesInUse = Int(chosen.lastPage) + 1
    reached = Array(repeating: false, count: min(result.pagesInUse, pagesInFile))
    if !reached.isEmpty { reached[0] = true }
    if reached.count > 1 { reached[1] = true }
    walkTree(named: "(free pages)", chosen.free, isFree: true)
    walkTree(named: "", chosen.main, isMain: true)
    // A page both listed free and used by a tree, or listed free twice, would be handed out
    // twice by the next write (liblmdb asserts when it dirties a page twice).
    var listed = Set<Int>()
    for page in freeListed where !stopped {
      if page < reached.count && reached[page] {
        fault("page \(page): listed as free, but a tree uses it")
      } else if !listed.insert(page).inserted {
        fault("page \(page): listed as free twice")
      }
    }
  }

  /// Walks one tree from its record; compares what it found with the record's counts.
  mutating func walkTree(
    named name: String, _ record: DatabaseRecord, isMain: Bool = false, isFree: Bool = false
  ) {
    var tree = PageStructure.Tree()
    tree.depth = Int(record.depth)
    if record.root != DatabaseRecord.noRoot, record.root < UInt64(result.pagesInUse) {
      tree.root = Int(record.root)
    }
    let label = name.isEmpty ? "the main tree" : "tree '\(name)'"
    if record.flags & Layout.duplicateSort != 0 {
      fault("\(label): sorted duplicates, which this check does not walk")
      return
    }
    // Other flags change how liblmdb lays pages out (`MDB_DUPFIXED` makes an empty tree's
    // next root a page of fixed-size keys, copied at the record's size).
    if isFree, record.flags & ~Layout.freeRecordEnvironment != Layout.freeRecord {
      fault("\(label): flags \(record.flags), not those of the free pages' record")
      return
    }
    if !isFree, record.flags & ~Layout.duplicateOrder != 0 {
      fault("\(label): flags \(record.flags), which this check does not walk")
      return
    }
    if record.root != DatabaseRecord.noRoot {
      var last: [UInt8]? = nil
      walk(
        page: record.root, level: 1, depth: Int(record.depth), in: label, tree: &tree,
        lowerBound: nil, last: &last, isMain: isMain, isFree: isFree)
    } else if record.entries != 0 || record.depth != 0 {
      // liblmdb trusts an empty tree's depth when it next empties one: it must be 0.
      fault(
        "\(label): no root page, but the record counts \(record.entries) entries and depth "
          + "\(record.depth)")
    }
    if !stopped {
      if UInt64(tree.entries) != record.entries {
        fault(
          "\(label): \(tree.entries) entries found, the database record counts "
            + "\(record.entries)")
      }
      if UInt64(tree.branchPages) != record.branchPages
        || UInt64(tree.leafPages) != record.leafPages
        || UInt64(tree.overflowPages) != record.overflowPages
      {
        fault(
          "\(label): \(tree.branchPages) branch, \(tree.leafPages) leaf and "
            + "\(tree.overflowPages) overflow pages found; the record counts "
            + "\(record.branchPages), \(record.leafPages) and \(record.overflowPages)")
      }
    }
    result.trees[name] = tree
  }

  /// Takes page `number` for a tree, or reports why it cannot be one.
  mutating func claim(_ number: UInt64, _ label: String, _ what: String) -> Int? {
    guard number >= 2, number < UInt64(result.pagesInUse) else {
      fault("\(label): \(what) names page \(number), outside the \(result.pagesInUse) pages in use")
      return nil
    }
    guard number < UInt64(pagesInFile) else {
      fault("\(label): \(what) names page \(number), past the file's \(pagesInFile) pages")
      return nil
    }
    let page = Int(number)
    guard !reached[page] else {
      fault("\(label): \(what) names page \(page), which another node already uses")
      return nil
    }
    reached[page] = true
    return page
  }

  /// Walks the subtree at `page`, in key order: `last` is the greatest key seen so far in the
  /// tree, `lowerBound` the branch key that led here (every key below must be at least it).
  mutating func walk(
    page number: UInt64, level: Int, depth: Int, in label: String,
    tree: inout PageStructure.Tree, lowerBound: [UInt8]?, last: inout [UInt8]?,
    isMain: Bool, isFree: Bool
  ) {
    guard !stopped else { return }
    guard level <= min(depth, Layout.maximumDepth) else {
      fault("\(label): deeper than the record's depth \(depth) at page \(number)")
      return
    }
    guard let page = claim(number, label, "a branch") else { return }
    let size = result.pageSize
    let base = page * size
    let flags = read16(base + 10) ?? 0
    let stored = read64(base) ?? 0
    guard stored == UInt64(page) else {
      fault("page \(page) (\(label)): its header says it is page \(stored)")
      return
    }
    // Exactly: liblmdb takes a page flagged dirty as its own to write in place (into the map),
    // and never writes one flagged loose or kept.
    let isBranch = flags == Layout.branch
    let isLeaf = flags == Layout.leaf
    guard isBranch || isLeaf else {
      fault("page \(page) (\(label)): flags \(flags) are not those of a branch or a leaf page")
      return
    }
    guard isBranch == (level < depth) else {
      fault(
        "page \(page) (\(label)): a \(isBranch ? "branch" : "leaf") page at level \(level) "
          + "of a tree of depth \(depth)")
      return
    }
    let lower = Int(read16(base + 12) ?? 0)
    let upper = Int(read16(base + 14) ?? 0)
    guard lower >= Layout.pageHeader, lower <= upper, upper <= size,
      (lower - Layout.pageHeader) % 2 == 0, upper % 2 == 0
    else {
      fault("page \(page) (\(label)): free-space bounds \(lower)–\(upper) do not fit the page")
      return
    }
    let count = (lower - Layout.pageHeader) / 2
    guard count > 0 else {
      fault("page \(page) (\(label)): no entries")
      return
    }
    // liblmdb asserts that a branch page has two entries at least (the free pages' tree holds
    // one only in the middle of a rebalance, never in a committed file).
    guard isLeaf || count >= 2 else {
      fault("page \(page) (\(label)): a branch page with one entry")
      return
    }
    if let fault = nodeFault(page: page, upper: upper, count: count, isLeaf: isLeaf) {
      self.fault("page \(page) (\(label)): \(fault)")
      return
    }
    if isBranch { tree.branchPages += 1 } else { tree.leafPages += 1 }
    for index in 0..<count {
      guard !stopped else { return }
      let offset = Int(read16(base + Layout.pageHeader + 2 * index) ?? 0)
      let place = "page \(page) (\(label)), node \(index)"
      // `nodeFault` has placed every node, its key and its value within the page.
      let node = base + offset
      let low = UInt64(read16(node) ?? 0)
      let high = UInt64(read16(node + 2) ?? 0)
      let nodeFlags = read16(node + 4) ?? 0
      let keySize = Int(read16(node + 6) ?? 0)
      let keyStart = node + Layout.nodeHeader
      // The free pages' keys are transaction numbers in native (little-endian) order: read
      // big-endian, they compare as bytes.
      let raw = Array(file[keyStart..<keyStart + keySize])
      let key = isFree ? Array(raw.reversed()) : raw
      if isBranch {
        let child = low | (high << 16) | (UInt64(nodeFlags) << 32)
        // The first node's key is empty; every other is the least key of its subtree.
        let bound: [UInt8]? = index == 0 ? lowerBound : key
        if index > 0 {
          // The free pages' tree compares keys as 8-byte numbers, whatever their size.
          if isFree, keySize != 8 {
            fault("\(place): a branch key of \(keySize) bytes in the free pages' tree, not 8")
            return
          }
          if let fault = Self.orderFault(key, last: last, lowerBound: lowerBound, isBranch: true) {
            self.fault("\(place): \(fault)")
            return
          }
        }
        walk(
          page: child, level: level + 1, depth: depth, in: label, tree: &tree,
          lowerBound: bound, last: &last, isMain: isMain, isFree: isFree)
        continue
      }
      // A leaf node: its key in order, then its value.
      if let fault = Self.orderFault(key, last: last, lowerBound: lowerBound, isBranch: false) {
        self.fault("\(place): \(fault)")
        return
      }
      // A free-page list is filed under the transaction that freed its pages: none after the
      // meta page's (liblmdb asserts as much when it saves the lists again).
      if isFree {
        guard keySize == 8, let freedBy = read64(keyStart), freedBy >= 1,
          freedBy <= result.transaction
        else {
          fault(
            "\(place): a free-page list not filed under a transaction from 1 to the meta page's")
          return
        }
      }
      // A value, on the page or in an overflow run; in the main tree, a database record too.
      guard nodeFlags == 0 || nodeFlags == Layout.bigData || (isMain && nodeFlags == Layout.subData)
      else {
        fault("\(place): node flags \(nodeFlags), not those of a value or a database record")
        return
      }
      last = key
      tree.entries += 1
      let dataSize = low | (high << 16)
      let dataStart = keyStart + keySize
      if nodeFlags & Layout.bigData != 0 {
        let first = read64(dataStart) ?? 0  // within the page: never nil
        let run = checkOverflow(first, size: dataSize, label: label, place: place, tree: &tree)
        if isFree, let run {
          // A long free-page list lies in an overflow run, past the run's page header.
          checkFreeList(
            at: run * result.pageSize + Layout.pageHeader, size: Int(dataSize), place: place)
        }
        continue
      }
      if isMain, nodeFlags & Layout.subData != 0 {
        guard dataSize == UInt64(Layout.databaseRecord),
          let record = databaseRecord(at: dataStart)
        else {
          fault("\(place): a database record of \(dataSize) bytes, not 48")
          continue
        }
        let name = String(decoding: key, as: UTF8.self)
        walkTree(named: name, record)
      } else if isFree {
        checkFreeList(at: dataStart, size: Int(dataSize), place: place)
      }
    }
  }

  /// Why `key` is out of order: not after `last`, the greatest key before it in the tree, or
  /// below `lowerBound`, the branch key that leads to its page; nil when it is in order.
  static func orderFault(
    _ key: [UInt8], last: [UInt8]?, lowerBound: [UInt8]?, isBranch: Bool
  ) -> String? {
    let what = isBranch ? "branch key" : "key"
    if let last, !last.lexicographicallyPrecedes(key) {
      return "\(what) out of order with the keys before it"
    }
    if let lowerBound, key.lexicographicallyPrecedes(lowerBound) {
      return "\(what) below the \(isBranch ? "" : "branch ")key that leads to its page"
    }
    return nil
  }

  /// Why the nodes of a page are not as liblmdb lays them out, or nil when they are: each at an
  /// even offset between the free space's end and the page's, with a key liblmdb could have
  /// stored, and no two overlapping. liblmdb moves the bytes between the free space and a node
  /// by the node's size (rounded up to even) when it deletes it, and trusts that no other node
  /// shares them: nodes that overlap or run past the page make that move write past the page;
  /// and it asserts that a node it moves lies at an even address.
  func nodeFault(page: Int, upper: Int, count: Int, isLeaf: Bool) -> String? {
    let size = result.pageSize
    let base = page * size
    var extents: [(start: Int, end: Int, index: Int)] = []
    extents.reserveCapacity(count)
    for index in 0..<count {
      let offset = Int(read16(base + Layout.pageHeader + 2 * index) ?? 0)
      guard offset >= upper, offset + Layout.nodeHeader <= size else {
        return "node \(index): offset \(offset) is outside the page's nodes (\(upper)–\(size))"
      }
      guard offset % 2 == 0 else { return "node \(index): at an odd offset, \(offset)" }
      let node = base + offset
      let keySize = Int(read16(node + 6) ?? 0)
      guard keySize <= Layout.maximumKey else {
        return "node \(index): a key of \(keySize) bytes, longer than liblmdb stores"
      }
      var length = Layout.nodeHeader + keySize
      if isLeaf {
        let flags = read16(node + 4) ?? 0
        let dataSize = Int(read16(node) ?? 0) | Int(read16(node + 2) ?? 0) << 16
        length += flags & Layout.bigData != 0 ? 8 : dataSize
      }
      let end = offset + ((length + 1) & ~1)
      guard end <= size else {
        return "node \(index) at offset \(offset), of \(length) bytes, runs past the page"
      }
      extents.append((offset, end, index))
    }
    extents.sort { $0.start < $1.start }
    for (before, after) in zip(extents, extents.dropFirst()) where after.start < before.end {
      return
        "nodes \(before.index) and \(after.index) overlap (offsets \(before.start) and "
        + "\(after.start))"
    }
    return nil
  }

  /// Checks an overflow run: its first page's header and that it lies within the pages in use.
  ///
  /// - Returns: The run's first page, if it is whole.
  @discardableResult
  mutating func checkOverflow(
    _ first: UInt64, size: UInt64, label: String, place: String, tree: inout PageStructure.Tree
  ) -> Int? {
    let pageSize = UInt64(result.pageSize)
    let needed = (UInt64(Layout.pageHeader) - 1 + size) / pageSize + 1
    guard let start = claim(first, label, "\(place)'s overflow value") else { return nil }
    let base = start * result.pageSize
    let flags = read16(base + 10) ?? 0
    let pages = UInt64(read32(base + 12) ?? 0)
    // liblmdb frees the run its header names (page number and count), flagged exactly.
    guard flags == Layout.overflow, read64(base) == UInt64(start), pages >= needed,
      UInt64(start) + pages <= UInt64(min(result.pagesInUse, pagesInFile))
    else {
      fault(
        "page \(start) (\(label)): not an overflow run of \(needed) pages within the file for "
          + "\(place)'s value of \(size) bytes")
      return nil
    }
    for page in start + 1..<start + Int(pages) {
      guard !reached[page] else {
        fault("page \(page) (\(label)): in \(place)'s overflow run and used elsewhere")
        return nil
      }
      reached[page] = true
    }
    tree.overflowPages += Int(pages)
    return start
  }

  /// Checks one free-list value: a count, then that many page numbers within the file.
  mutating func checkFreeList(at offset: Int, size: Int, place: String) {
    guard size >= 8, let count = read64(offset), count <= UInt64((size - 8) / 8) else {
      fault("\(place): a free-page list whose count does not fit its \(size) bytes")
      return
    }
    // liblmdb takes runs of pages from a list it trusts to descend.
    var previous = UInt64.max
    for index in 0..<Int(count) {
      let page = read64(offset + 8 + 8 * index) ?? 0
      guard page >= 2, page < UInt64(result.pagesInUse) else {
        fault("\(place): lists free page \(page), outside the pages in use")
        return
      }
      guard page < previous else {
        fault("\(place): a free-page list not in descending order at page \(page)")
        return
      }
      previous = page
      freeListed.append(Int(page))
    }
  }
}
