import Foundation
import LMDB
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
}
