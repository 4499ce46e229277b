import Foundation
import LMDB
import Testing
import VLog
import VLogTesting

extension BinaryTests {
  /// A store of 600 notes (enough for branch pages in its log), closed; its data file's bytes.
  static func storeFile(_ path: String) throws -> [UInt8] {
    let store = try NoteStore.open(at: path)
    for batch in 0..<6 {
      try store.write { changes in
        for index in 0..<100 {
          changes.createNote(
            text: "note \(batch * 100 + index) " + String(repeating: "·", count: 80))
        }
      }
    }
    store.close()
    return try [UInt8](Data(contentsOf: URL(fileURLWithPath: path + "/data.mdb")))
  }

  /// The offset of node `index` of page `page`.
  static func node(_ index: Int, of page: Int, in bytes: [UInt8]) -> Int {
    let pointer = page * 4096 + 16 + 2 * index
    return page * 4096 + (Int(bytes[pointer]) | Int(bytes[pointer + 1]) << 8)
  }

  @Test(
    "A damaged store is an error that says so, never a crash: a node's size past the file, a branch key out of order"
  )
  func damagedStore() async throws {
    try await withTemporaryDirectory { root in
      let path = root + "/store"
      let healthy = try Self.storeFile(path)
      let binary = try #require(Self.binary())
      let (status, _, _) = try await ChildProcess.runOffPool(
        binary.path, ["verify", "--store", path])
      #expect(status == 0)

      // The top byte of a leaf node's size, as in a 5,060-event store where it made verify,
      // export, log, rebuild and stats die by SIGBUS; and a branch key's first byte, which
      // verify passed while notes then failed.
      let log = try #require(healthy.withUnsafeBytes { PageStructure(file: $0) }.trees["log"])
      let root = try #require(log.root)
      #expect(log.depth == 2)
      let branch = Self.node(1, of: root, in: healthy)
      // The root's first child, a leaf page.
      let firstChild = Self.node(0, of: root, in: healthy)
      let leafPage = Int(healthy[firstChild]) | Int(healthy[firstChild + 1]) << 8
      let leaf = Self.node(1, of: leafPage, in: healthy)
      for (offset, byte) in [(leaf + 3, UInt8(0x40)), (branch + 8, UInt8(0xFF))] {
        var damaged = healthy
        damaged[offset] = byte
        try Data(damaged).write(to: URL(fileURLWithPath: path + "/data.mdb"))
        for command in [["verify"], ["export"], ["log"], ["stats"], ["notes"], ["rebuild"]] {
          let (status, output, errors) = try await ChildProcess.runOffPool(
            binary.path, command + ["--store", path])
          // Before, several died by SIGBUS (status 135) or SIGSEGV (139), and verify passed
          // the branch key.
          #expect(status == 1, "\(command) at \(offset): \(status) \(errors)")
          // verify reports the faults as its findings; the other commands refuse with them.
          let said = command == ["verify"] ? output : errors
          #expect(said.contains("page structure is damaged"), "\(command): \(said)")
        }
        // Nothing was written: the file is as damaged as it was.
        #expect(try Data(contentsOf: URL(fileURLWithPath: path + "/data.mdb")) == Data(damaged))
      }
    }
  }
}
