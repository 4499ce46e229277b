import Foundation
import LMDB
import Synchronization
import Testing
import VLogTesting

@Suite("Damaged files")
struct DamageTests {
  /// Stores a few values, then sets the top byte of one leaf node's data size in the file (as a
  /// flipped bit on disk would): LMDB then hands back a value that claims 1 GiB more than the
  /// node holds, past the end of the file and of the map.
  static func damagedEnvironment(_ path: String) throws -> [UInt8] {
    let marker = Array("damaged-node-key".utf8)
    let environment = try Environment.open(at: path, configuration: .init(durability: .noSync))
    let database = try environment.openDatabase(named: "values", flags: .create)
    try environment.write { transaction throws in
      for number in 0..<20 as Range<UInt64> {
        try transaction.put(value(number), forKey: key(number), in: database)
      }
      try transaction.put(value(99), forKey: marker, in: database)
    }
    environment.close()
    let file = URL(fileURLWithPath: path + "/data.mdb")
    var bytes = try [UInt8](Data(contentsOf: file))
    let offset = try #require(
      (0...(bytes.count - marker.count)).first {
        bytes[$0..<$0 + marker.count].elementsEqual(marker)
      })
    // The node header before the key: size low and high halves, flags, key size (little-endian
    // on the machines VLog runs on); the high half's top byte.
    bytes[offset - 5] = 0x40
    try Data(bytes).write(to: file)
    return marker
  }

  @Test("A value whose stored size runs past the file is an error, not a crash")
  func sizePastTheFile() throws {
    try withTemporaryDirectory { path in
      let marker = try Self.damagedEnvironment(path)
      let environment = try Environment.open(at: path, configuration: .init(durability: .noSync))
      defer { environment.close() }
      let database = try environment.openDatabase(named: "values")
      // Before, reading it crashed the process (SIGSEGV or SIGBUS).
      #expect {
        try environment.read { transaction throws in
          try transaction.withValue(forKey: marker, in: database) { $0.map(Array.init) }
        }
      } throws: { error in
        (error as? LMDBError)?.code == .corrupted
          && "\(error)".contains("runs past the end of the data")
      }
      #expect(throws: LMDBError.self) {
        try environment.read { transaction throws in try entries(transaction, in: database) }
      }
      // The undamaged values still read.
      let kept = try environment.read { transaction throws in
        try transaction.withValue(forKey: key(3), in: database) { $0.map(Array.init) }
      }
      #expect(kept == value(3))
    }
  }

  /// An environment with enough entries for branch pages, values on overflow pages, and three
  /// named databases, one empty; the data file's bytes.
  static func healthyFile(_ path: String) throws -> [UInt8] {
    let environment = try Environment.open(at: path, configuration: .init(durability: .noSync))
    let numbers = try environment.openDatabase(named: "numbers", flags: .create)
    let large = try environment.openDatabase(named: "large", flags: .create)
    _ = try environment.openDatabase(named: "empty", flags: .create)
    try environment.write { transaction throws in
      for number in 0..<3000 as Range<UInt64> {
        try transaction.put(value(number), forKey: key(number), in: numbers)
      }
      for number in 0..<10 as Range<UInt64> {
        try transaction.put(value(number, size: 20_000), forKey: key(number), in: large)
      }
    }
    // A second transaction frees pages, so the free pages' tree has entries.
    try environment.write { transaction throws in
      for number in stride(from: 0, to: 3000, by: 7) as StrideTo<UInt64> {
        _ = try transaction.delete(forKey: key(number), in: numbers)
      }
    }
    environment.close()
    return try [UInt8](Data(contentsOf: URL(fileURLWithPath: path + "/data.mdb")))
  }

  static func structure(_ bytes: [UInt8]) -> PageStructure {
    bytes.withUnsafeBytes { PageStructure(file: $0) }
  }

  /// Where a field of the newest meta page lies: LMDB writes transaction t's to page t mod 2,
  /// its body after 16 bytes of page header (the last page at 120, the transaction at 128).
  static func newestMeta(_ structure: PageStructure, field: Int) -> Int {
    Int(structure.transaction % 2) * structure.pageSize + 16 + field
  }

  /// A little-endian 16-bit number of the file, as LMDB stores offsets and sizes.
  static func read16(_ bytes: [UInt8], _ offset: Int) -> Int {
    Int(bytes[offset]) | Int(bytes[offset + 1]) << 8
  }

  /// Sets the 8 bytes at `offset` to `value`, little-endian, as LMDB stores its numbers.
  static func put(_ value: UInt64, at offset: Int, in bytes: inout [UInt8]) {
    bytes.replaceSubrange(
      offset..<offset + 8, with: withUnsafeBytes(of: value.littleEndian, Array.init))
  }

  @Test("A whole file's page structure checks whole, with every entry counted")
  func wholeStructure() throws {
    try withTemporaryDirectory { path in
      let bytes = try Self.healthyFile(path)
      let structure = Self.structure(bytes)
      #expect(structure.faults.isEmpty, "\(structure.faults)")
      #expect(structure.trees["numbers"]?.entries == 3000 - 429)
      #expect(structure.trees["numbers"]?.branchPages ?? 0 > 0)
      #expect(structure.trees["large"]?.overflowPages ?? 0 >= 10 * 5)
      #expect(structure.trees["(free pages)"]?.entries ?? 0 > 0)
      #expect(try PageStructure.check(directory: path).faults.isEmpty)
    }
  }

  @Test(
    "A meta page whose last page lies past the file's end — pages a commit took and freed without writing them — is whole; past its map, or with a tree that names a page past the end, it is not"
  )
  func lastPagePastTheEnd() throws {
    try withTemporaryDirectory { path in
      var bytes = try Self.healthyFile(path)
      let structure = Self.structure(bytes)
      #expect(structure.faults.isEmpty)
      // The newest meta page's last page, three pages on.
      let offset = Self.newestMeta(structure, field: 120)
      let last = bytes[offset..<offset + 8].reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
      #expect(last == UInt64(structure.pagesInUse - 1))
      Self.put(last + 3, at: offset, in: &bytes)
      let past = Self.structure(bytes)
      #expect(past.faults.isEmpty, "\(past.faults)")
      #expect(past.pagesInUse == structure.pagesInUse + 3)
      // Past the map the meta page records, it is damage: liblmdb takes no page there.
      let mapPages = structure.mapSize / UInt64(structure.pageSize)
      #expect(mapPages > last + 3)
      var pastTheMap = bytes
      Self.put(mapPages, at: offset, in: &pastTheMap)
      let faults = Self.structure(pastTheMap).faults
      #expect(faults.contains { $0.contains("not between 1 and the map") }, "\(faults)")
      // Cut to half its pages, the file's trees name pages past its end.
      let cut = Self.structure(Array(bytes.prefix(bytes.count / 2 / 4096 * 4096)))
      #expect(cut.faults.contains { $0.contains("past the file's") }, "\(cut.faults)")
    }
  }

  @Test("A flipped byte in a branch key, which liblmdb reads without complaint, is found")
  func branchKey() throws {
    try withTemporaryDirectory { path in
      var bytes = try Self.healthyFile(path)
      let structure = Self.structure(bytes)
      let tree = try #require(structure.trees["numbers"])
      #expect(tree.depth >= 2)
      // The root, a branch page: its second node's key set high, as flipped bits would.
      let base = try #require(tree.root) * structure.pageSize
      let pointer = base + 16 + 2
      let node = base + (Int(bytes[pointer]) | Int(bytes[pointer + 1]) << 8)
      let keySize = Int(bytes[node + 6]) | Int(bytes[node + 7]) << 8
      for offset in node + 8..<node + 8 + keySize { bytes[offset] = 0xFF }
      let damaged = keySize > 0
      #expect(damaged)
      let faults = Self.structure(bytes).faults
      #expect(!faults.isEmpty)
      #expect(faults.contains { $0.contains("order") || $0.contains("below") }, "\(faults)")
    }
  }

  @Test("A node size that runs past its page is found")
  func nodeSize() throws {
    try withTemporaryDirectory { path in
      _ = try Self.damagedEnvironment(path)
      let faults = try PageStructure.check(directory: path).faults
      #expect(faults.contains { $0.contains("runs past the page") }, "\(faults)")
    }
  }

  @Test(
    "Layouts liblmdb would write past a page for, hand a page out twice for, or assert on are found"
  )
  func layoutsLibLMDBTrusts() throws {
    try withTemporaryDirectory { path in
      let healthy = try Self.healthyFile(path)
      let structure = Self.structure(healthy)
      func faults(_ damage: (inout [UInt8]) throws -> Void) rethrows -> [String] {
        var bytes = healthy
        try damage(&bytes)
        return Self.structure(bytes).faults
      }
      let root = try #require(structure.trees["numbers"]?.root) * structure.pageSize
      #expect(Self.read16(healthy, root + 12) > 18)
      // The root, a branch page, cut to its first entry (the free space's start).
      let cut = faults { $0[root + 12] = 18 }
      #expect(cut.contains { $0.contains("a branch page with one entry") }, "\(cut)")
      // Its second node's offset one byte on.
      let odd = faults { $0[root + 18] |= 1 }
      #expect(odd.contains { $0.contains("at an odd offset") }, "\(odd)")
      // The first leaf, by the root's first node: its node nearest the free space grows by 16
      // bytes of data, into the node after it (liblmdb's delete would move bytes past the page).
      let rootNode = root + Self.read16(healthy, root + 16)
      let leaf =
        (Self.read16(healthy, rootNode) | Self.read16(healthy, rootNode + 2) << 16)
        * structure.pageSize
      let node = leaf + Self.read16(healthy, leaf + 14)
      let overlapping = faults {
        let grown = Self.read16($0, node) + 16
        $0[node] = UInt8(grown & 0xFF)
        $0[node + 1] = UInt8(grown >> 8)
      }
      #expect(overlapping.contains { $0.contains("overlap") }, "\(overlapping)")
      // The free pages' root leaf, its first node: the transaction that freed the pages, the
      // list's count, then its pages.
      let freeTree = try #require(structure.trees["(free pages)"])
      #expect(freeTree.depth == 1)
      let free = try #require(freeTree.root) * structure.pageSize
      let freeNode = free + Self.read16(healthy, free + 16)
      let list = freeNode + 8 + Self.read16(healthy, freeNode + 6)
      #expect(healthy[list] >= 2)
      // Filed under a transaction after the meta page's.
      let later = faults { Self.put(structure.transaction + 5, at: freeNode + 8, in: &$0) }
      #expect(later.contains { $0.contains("not filed under a transaction") }, "\(later)")
      // Filed under transaction 0 (liblmdb would read the lists from the first again and hand
      // their pages out twice).
      let zero = faults { Self.put(0, at: freeNode + 8, in: &$0) }
      #expect(zero.contains { $0.contains("not filed under a transaction") }, "\(zero)")
      // Its second page set to its first: out of the descending order liblmdb takes runs by.
      let unordered = faults {
        $0.replaceSubrange(list + 16..<list + 24, with: $0[list + 8..<list + 16])
      }
      #expect(unordered.contains { $0.contains("descending") }, "\(unordered)")
      // The second list's last page set to the first list's last (the least of each): a page
      // listed twice, which liblmdb would hand out twice.
      #expect(freeTree.entries >= 2)
      let secondNode = free + Self.read16(healthy, free + 18)
      let second = secondNode + 8 + Self.read16(healthy, secondNode + 6)
      let firstLast = list + 8 * Int(healthy[list])
      let secondLast = second + 8 * Int(healthy[second])
      let twice = faults {
        $0.replaceSubrange(secondLast..<secondLast + 8, with: $0[firstLast..<firstLast + 8])
      }
      #expect(twice.contains { $0.contains("listed as free twice") }, "\(twice)")
    }
  }

  @Test(
    "Flags, numbers and records liblmdb takes as they are are checked: page and node flags, an overflow run's header, an empty tree's depth, the meta pages' place, page sizes, map, last page and transaction"
  )
  func fieldsLibLMDBTrusts() throws {
    try withTemporaryDirectory { path in
      let healthy = try Self.healthyFile(path)
      let structure = Self.structure(healthy)
      #expect(structure.faults.isEmpty, "\(structure.faults)")
      func faults(_ damage: (inout [UInt8]) throws -> Void) rethrows -> [String] {
        var bytes = healthy
        try damage(&bytes)
        return Self.structure(bytes).faults
      }
      func expect(_ found: [String], _ fault: String) {
        #expect(found.contains { $0.contains(fault) }, "\(found)")
      }
      let size = structure.pageSize
      // A branch page flagged dirty too (liblmdb would write into the map in place).
      let numbers = try #require(structure.trees["numbers"]?.root) * size
      expect(faults { $0[numbers + 10] |= 0x10 }, "are not those of a branch or a leaf page")
      // The root of `large`, a leaf: its first node flagged as sorted duplicates, and the
      // overflow run it names with a header that gives another page number.
      let large = try #require(structure.trees["large"]?.root) * size
      let node = large + Self.read16(healthy, large + 16)
      #expect(healthy[node + 4] == 0x01)
      expect(faults { $0[node + 4] = 0x05 }, "node flags 5")
      let run = 8 + node + Self.read16(healthy, node + 6)
      let runPage = Int(healthy[run]) | Int(healthy[run + 1]) << 8
      expect(faults { $0[runPage * size] &+= 1 }, "not an overflow run")
      // The empty tree's record, in the main tree's leaf: a depth without a root.
      let main = try #require(structure.trees[""]?.root) * size
      let emptyNode = main + Self.read16(healthy, main + 16)
      #expect(healthy[emptyNode + 8..<emptyNode + 13].elementsEqual(Array("empty".utf8)))
      expect(faults { $0[emptyNode + 8 + 5 + 6] = 5 }, "no root page, but")
      // The second meta page with another page size; the newest with a last page of 0, and
      // with a transaction near 2^64.
      expect(faults { $0[size + 16 + 25] = 0x20 }, "meta page 1: a page size other than")
      expect(
        faults { Self.put(0, at: Self.newestMeta(structure, field: 120), in: &$0) },
        "not between 1 and the map")
      // A map past what a process can map (liblmdb would fail to remap it, and lose its map).
      expect(
        faults { Self.put(1 << 48, at: Self.newestMeta(structure, field: 16), in: &$0) },
        "more than a process can map")
      // A page size liblmdb never writes: 64 KiB, whose free-space bound does not fit 16 bits.
      expect(
        faults {
          $0[16 + 24 + 1] = 0
          $0[16 + 24 + 2] = 1
        }, "a page size of 65536")
      // A page's free space ending at an odd offset (the next node would lie at one).
      expect(faults { $0[numbers + 14] -= 1 }, "free-space bounds")
      // The flags of `numbers`'s record: sorted duplicates of fixed size, which make an empty
      // tree's next root a page of fixed-size keys; and the free pages' record's, the same.
      let numbersNode =
        emptyNode + Self.read16(healthy, main + 20) - Self.read16(healthy, main + 16)
      #expect(healthy[numbersNode + 8..<numbersNode + 15].elementsEqual(Array("numbers".utf8)))
      expect(faults { $0[numbersNode + 8 + 7 + 4] |= 0x10 }, "flags 16, which")
      let freeFlags = Self.newestMeta(structure, field: 24 + 4)
      expect(faults { $0[freeFlags] |= 0x10 }, "not those of the free pages' record")
      // The newest meta page's transaction one higher: still the newest, now of a transaction
      // liblmdb reads from the other meta page (transaction t's is page t mod 2).
      expect(
        faults {
          Self.put(
            structure.transaction + 1, at: Self.newestMeta(structure, field: 128), in: &$0)
        }, "liblmdb reads from page")
      let wrapping = UInt64(1) << 63 | structure.transaction % 2
      expect(
        faults { Self.put(wrapping, at: Self.newestMeta(structure, field: 128), in: &$0) },
        "near the numbers' end")
    }
  }

  @Test("Single-byte flips anywhere never trap the check, and most that matter are found")
  func flips() throws {
    try withTemporaryDirectory { path in
      let bytes = try Self.healthyFile(path)
      let pageSize = Self.structure(bytes).pageSize
      var generator = SeededGenerator(seed: 28)
      var found = 0
      for trial in 0..<400 {
        var damaged = bytes
        // Half aimed at page headers and node pointers, half anywhere.
        let page = Int.random(in: 0..<bytes.count / pageSize, using: &generator)
        let offset =
          trial % 2 == 0
          ? page * pageSize + Int.random(in: 0..<64, using: &generator)
          : Int.random(in: 0..<bytes.count, using: &generator)
        damaged[offset] ^= UInt8.random(in: 1...255, using: &generator)
        if !Self.structure(damaged).faults.isEmpty { found += 1 }
      }
      // Flips in free space, in values and in unused pages change nothing the structure says.
      #expect(found > 0)
    }
  }
}

@Suite("Page structure beside writers")
struct ConcurrentStructureTests {
  @Test(
    "A healthy file whose pages a writer rewrites and reuses while it is checked is never called damaged"
  )
  func checkedWhileWritten() throws {
    try withTemporaryDirectory { path in
      let environment = try Environment.open(at: path, configuration: .init(durability: .noSync))
      defer { environment.close() }
      let database = try environment.openDatabase(named: "values", flags: .create)
      try environment.write { transaction throws in
        for number in 0..<2000 as Range<UInt64> {
          try transaction.put(value(number, size: 200), forKey: key(number), in: database)
        }
      }
      let done = DispatchSemaphore(value: 0)
      let stop = Flag()
      DispatchQueue.global().async {
        var generator = SeededGenerator(seed: 7)
        // Each commit rewrites 50 values: their pages are freed, and reused two commits later
        // when no reader holds the snapshot that used them.
        while !stop.isSet {
          do {
            try environment.write { transaction throws in
              for _ in 0..<50 {
                let number = UInt64.random(in: 0..<2000, using: &generator)
                try transaction.put(
                  value(number &+ generator.next(), size: 200), forKey: key(number), in: database)
              }
            }
          } catch {
            stop.fail("\(error)")
          }
        }
        done.signal()
      }
      var damaged: [[String]] = []
      for _ in 0..<300 {
        let faults = try PageStructure.check(directory: path).faults
        if !faults.isEmpty { damaged.append(faults) }
      }
      stop.set()
      done.wait()
      #expect(stop.failure == nil, "the writer failed: \(stop.failure ?? "")")
      #expect(
        damaged.isEmpty, "\(damaged.count) checks of 300 found faults: \(damaged.first ?? [])")
    }
  }
}

/// A flag one thread sets and another reads, with the writer's error if it failed.
private final class Flag: Sendable {
  private let state = Mutex<(isSet: Bool, failure: String?)>((false, nil))
  var isSet: Bool { state.withLock { $0.isSet } }
  var failure: String? { state.withLock { $0.failure } }
  func set() { state.withLock { $0.isSet = true } }
  /// Stops the writer, keeping its error.
  func fail(_ error: String) { state.withLock { $0 = (true, $0.failure ?? error) } }
}
