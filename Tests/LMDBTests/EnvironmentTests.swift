import Foundation
import Testing
import VLogTesting

@testable import LMDB

@Suite("Environments")
struct EnvironmentTests {
  @Test(
    "data survives closing and reopening, in every durability mode",
    arguments: [Environment.Durability.durable, .noMetaSync, .noSync])
  func survivesReopen(durability: Environment.Durability) throws {
    try withTemporaryDirectory { path in
      let configuration = Environment.Configuration(durability: durability)
      do {
        let environment = try Environment.open(at: path, configuration: configuration)
        let database = try environment.openDatabase(named: "values", flags: .create)
        try environment.write { transaction throws in
          for number in 0..<500 as Range<UInt64> {
            try transaction.put(value(number), forKey: key(number), in: database, options: .append)
          }
        }
        try environment.sync()
        environment.close()
        #expect(!environment.isOpen)
      }
      let reopened = try Environment.open(at: path, configuration: configuration)
      defer { reopened.close() }
      let database = try reopened.openDatabase(named: "values")
      try reopened.read { transaction throws in
        #expect(try transaction.count(in: database) == 500)
        #expect(try transaction.value(forKey: key(499), in: database) == value(499))
      }
    }
  }

  @Test("a second open of a path returns the same environment, or says why it cannot")
  func secondOpen() throws {
    try withTemporaryDirectory { path in
      let configuration = Environment.Configuration(durability: .noSync)
      let first = try Environment.open(at: path, configuration: configuration)
      // Same configuration (map size may differ), even through another spelling of the path.
      let again = try Environment.open(
        at: path + "/./", configuration: .init(mapSize: 1 << 20, durability: .noSync))
      #expect(first === again)
      let link = path + "-link"
      try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: path)
      defer { try? FileManager.default.removeItem(atPath: link) }
      #expect(try Environment.open(at: link, configuration: configuration) === first)

      let error = #expect(throws: LMDBError.self) {
        try Environment.open(at: path, configuration: .init(durability: .durable))
      }
      #expect(error?.code == .alreadyOpen)
      #expect(error?.message.contains("durability noSync") == true)

      first.close()
      let afterClose = #expect(throws: LMDBError.self) {
        try again.read { _ in }
      }
      #expect(afterClose?.code == .environmentClosed)
      let reopened = try Environment.open(at: path, configuration: .init(durability: .durable))
      #expect(reopened !== first)
      reopened.close()
    }
  }

  @Test("an environment released by every holder closes, and the path opens afresh")
  func releasedEnvironmentCloses() throws {
    try withTemporaryDirectory { path in
      weak var weakEnvironment: Environment?
      do {
        let environment = try Environment.open(at: path)
        weakEnvironment = environment
        _ = try environment.openDatabase(named: "values", flags: .create)
      }
      #expect(weakEnvironment == nil)
      let reopened = try Environment.open(at: path)
      defer { reopened.close() }
      _ = try reopened.openDatabase(named: "values")
    }
  }

  @Test("errors carry the code, the operation, the path and LMDB's message")
  func errorsAreDescriptive() throws {
    try withTemporaryEnvironment { environment, path throws in
      let missing = #expect(throws: LMDBError.self) {
        try environment.openDatabase(named: "missing")
      }
      #expect(missing?.code == .notFound)
      #expect(missing?.operation == "open database 'missing'")
      #expect(missing?.path == path)
      #expect(missing?.message.hasPrefix("MDB_NOTFOUND") == true)
      #expect(missing?.message.contains("create flag") == true)
      #expect(missing?.description.contains("cannot open database 'missing' in '\(path)'") == true)

      let database = try environment.openDatabase(named: "values", flags: .create)
      let emptyKey = #expect(throws: LMDBError.self) {
        try environment.write { try $0.put(value(1), forKey: [UInt8](), in: database) }
      }
      #expect(emptyKey?.code == .badValueSize)
      let longKey = #expect(throws: LMDBError.self) {
        try environment.write {
          try $0.put(
            value(1), forKey: [UInt8](repeating: 1, count: environment.maximumKeySize + 1),
            in: database)
        }
      }
      #expect(longKey?.code == .badValueSize)
      #expect(longKey?.message.contains("511") == true)
    }
    let notDirectory = #expect(throws: LMDBError.self) {
      try Environment.open(at: "/etc/hostname")
    }
    #expect(notDirectory?.code == .invalidArgument)
    let readOnlyMissing = #expect(throws: LMDBError.self) {
      try Environment.open(at: "/nonexistent/store", configuration: .init(isReadOnly: true))
    }
    #expect(readOnlyMissing?.code == .noSuchFile)
  }

  @Test("a file that is not an LMDB file is refused with invalidFile")
  func notAnLMDBFile() throws {
    try withTemporaryDirectory { path in
      try Data(repeating: 0x5A, count: 64 << 10).write(to: URL(fileURLWithPath: path + "/data.mdb"))
      let error = #expect(throws: LMDBError.self) { try Environment.open(at: path) }
      #expect(error?.code == .invalidFile)
      #expect(error?.operation == "open environment")
    }
  }

  @Test("a read-only environment reads and refuses writes")
  func readOnly() throws {
    try withTemporaryDirectory { path in
      do {
        let writable = try Environment.open(at: path)
        let database = try writable.openDatabase(named: "values", flags: .create)
        try writable.write { try $0.put(value(1), forKey: key(1), in: database) }
        writable.close()
      }
      let readOnly = try Environment.open(at: path, configuration: .init(isReadOnly: true))
      defer { readOnly.close() }
      let database = try readOnly.openDatabase(named: "values")
      #expect(try readOnly.read { try $0.value(forKey: key(1), in: database) } == value(1))
      let error = #expect(throws: LMDBError.self) {
        try readOnly.write { try $0.put(value(2), forKey: key(2), in: database) }
      }
      #expect(error?.code == .accessDenied)
    }
  }

  @Test("lmdb-utils' mdb_stat reads a file written by the wrapper")
  func mdbStatReadsTheFile() throws {
    try withTemporaryEnvironment(.init(durability: .durable)) { environment, path throws in
      let database = try environment.openDatabase(named: "events", flags: .create)
      try environment.write { transaction throws in
        for number in 0..<1234 as Range<UInt64> {
          try transaction.put(value(number), forKey: key(number), in: database, options: .append)
        }
      }
      let (status, output, errors) = try ChildProcess.run(
        "/usr/bin/mdb_stat", ["-s", "events", path])
      #expect(status == 0, "mdb_stat said: \(output)\(errors)")
      #expect(output.contains("Entries: 1234"), "mdb_stat said: \(output)")
    }
  }

  @Test("info and statistics report the map, pages and entries")
  func infoAndStatistics() throws {
    try withTemporaryEnvironment(.init(mapSize: 8 << 20, durability: .noSync)) {
      environment, _ throws in
      let database = try environment.openDatabase(named: "values", flags: .create)
      let before = try environment.info()
      try environment.write { transaction throws in
        for number in 0..<2000 as Range<UInt64> {
          try transaction.put(value(number), forKey: key(number), in: database, options: .append)
        }
      }
      let after = try environment.info()
      #expect(after.mapSize == 8 << 20)
      #expect(after.pageSize >= 4096)
      #expect(after.lastTransactionID > before.lastTransactionID)
      #expect(after.usedSize > 2000 * 100)
      #expect(after.maximumReaders == 126)
      let statistics = try environment.read { try $0.statistics(of: database) }
      #expect(statistics.entries == 2000)
      #expect(statistics.leafPages > 1)
      #expect(statistics.depth >= 2)
      #expect(try environment.statistics().entries == 1)  // the main database lists 'values'
    }
  }

  @Test(
    "a copy, plain or compacted, holds the same data and opens on its own",
    arguments: [false, true])
  func copy(compacting: Bool) throws {
    try withTemporaryEnvironment { environment, path throws in
      let database = try environment.openDatabase(named: "values", flags: .create)
      try environment.write { transaction throws in
        for number in 0..<3000 as Range<UInt64> {
          try transaction.put(value(number), forKey: key(number), in: database, options: .append)
        }
      }
      try environment.write { transaction throws in
        for number in 0..<2000 as Range<UInt64> {
          try transaction.delete(forKey: key(number), in: database)
        }
      }
      let destination = path + "-copy"
      defer { try? FileManager.default.removeItem(atPath: destination) }
      try environment.copy(to: destination, compacting: compacting)
      let copied = try Environment.open(at: destination)
      defer { copied.close() }
      let copiedDatabase = try copied.openDatabase(named: "values")
      let original = try environment.read { try entries($0, in: database) }
      let copy = try copied.read { try entries($0, in: copiedDatabase) }
      #expect(copy.count == 1000)
      #expect(copy.map(\.key) == original.map(\.key))
      #expect(copy.map(\.value) == original.map(\.value))
      if compacting {
        #expect(try copied.info().lastPageNumber < environment.info().lastPageNumber)
      }
      let again = #expect(throws: LMDBError.self) { try environment.copy(to: destination) }
      #expect(again != nil)
    }
  }

  @Test("stale reader slots are cleared without harm")
  func staleReaders() throws {
    try withTemporaryEnvironment { environment, _ throws in
      #expect(try environment.clearStaleReaders() == 0)
    }
  }
}

@Suite("A failed commit's error")
struct CommitErrorTests {
  @Test(
    "A full disk is called a full disk, whether the write said so (ENOSPC) or the flush said only EIO with next to nothing free; another EIO stays an I/O error"
  )
  func fullDisk() {
    let spaceless = Environment.commitError(ENOSPC, path: "/s", freeBytes: 0)
    #expect(spaceless.code == .noSpace)
    #expect(spaceless.message.contains("the disk is full (0 bytes free)"), "\(spaceless)")
    let flushed = Environment.commitError(EIO, path: "/s", freeBytes: 12_288)
    #expect(flushed.code == .noSpace && flushed.message.contains("12 KiB free"), "\(flushed)")
    let failing = Environment.commitError(EIO, path: "/s", freeBytes: 10 << 30)
    #expect(failing.code == .ioError)
    #expect(failing.message.contains("the transaction was not committed"))
    #expect(Environment.commitError(EIO, path: "/s", freeBytes: nil).code == .ioError)
  }
}
