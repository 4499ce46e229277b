import Foundation
import LMDB
import Testing
import VLogTesting

@testable import VLog

/// Salvage: a damaged store's file read without its B-trees, into a new store.
@Suite("Salvage")
struct SalvageTests {
  static let canary = "salvage-canary-5f3a91"

  struct Made {
    let replica: ReplicaID
    let events: [LoggedEvent]
    let state: StateDigest
    let file: [UInt8]
    let attachment: AttachmentID
  }

  /// A store of 600 notes written 50 per commit (a log of several leaf pages under a branch
  /// root), one with an attachment, bound to an account, the first 300 events acknowledged,
  /// and a note with the canary deleted in the last commit (its old records stay on freed
  /// pages); closed.
  static func makeStore(at path: String) throws -> Made {
    let options = NoteStore.Options(
      durability: .noSync, dependencies: .testing(clock: ManualClock(), seed: 11))
    let store = try NoteStore.open(at: path, options: options)
    try store.bind(to: AccountBinding(server: "http://127.0.0.1:8080", username: "ann"))
    for batch in 0..<12 {
      try store.write { changes in
        for index in 0..<50 {
          changes.createNote(
            text: "note \(batch * 50 + index) " + String(repeating: "·", count: 60),
            tags: index % 7 == 0 ? ["work"] : [])
        }
      }
    }
    let attachment = try store.write { changes -> AttachmentID in
      let note = changes.createNote(text: "with a picture")
      return changes.addAttachment(
        Array(repeating: 0xAB, count: 10_000), mimeType: "image/png", to: note)
    }
    _ = try store.acknowledge(through: 300)
    let doomed = try store.write { $0.createNote(text: canary) }
    try store.write { $0.deleteNote(doomed) }
    let made = Made(
      replica: store.replicaID, events: try store.events(), state: try store.stateDigest(),
      file: [], attachment: attachment)
    store.close()
    return Made(
      replica: made.replica, events: made.events, state: made.state,
      file: try [UInt8](Data(contentsOf: URL(fileURLWithPath: path + "/data.mdb"))),
      attachment: attachment)
  }

  /// The page numbers of the log tree's root's children (its leaf pages, for a tree of
  /// depth 2), and the root.
  static func logPages(_ file: [UInt8]) throws -> (root: Int, leaves: [Int]) {
    let structure = file.withUnsafeBytes { PageStructure(file: $0) }
    let tree = try #require(structure.trees["log"])
    let root = try #require(tree.root)
    try #require(tree.depth == 2)
    let base = root * 4096
    let lower = Int(file[base + 12]) | Int(file[base + 13]) << 8
    let leaves = (0..<(lower - 16) / 2).map { index in
      let pointer = base + 16 + 2 * index
      let node = base + (Int(file[pointer]) | Int(file[pointer + 1]) << 8)
      return Int(file[node]) | Int(file[node + 1]) << 8 | Int(file[node + 2]) << 16
    }
    return (root, leaves)
  }

  /// The sequence numbers whose records lie on `page`.
  static func sequences(onPage page: Int, of file: [UInt8]) -> Set<UInt64> {
    var found = Set<UInt64>()
    file.withUnsafeBytes { bytes in
      LeafScan.forEachNode(in: bytes) { node in
        guard node.page == page, node.key.count == 8,
          let sequence = BigEndian.read(
            UInt64.self, from: UnsafeRawBufferPointer(rebasing: bytes[node.key]))
        else { return }
        found.insert(sequence)
      }
    }
    return found
  }

  static func write(_ bytes: [UInt8], to path: String) throws {
    try? FileManager.default.removeItem(atPath: path + "/lock.mdb")
    try Data(bytes).write(to: URL(fileURLWithPath: path + "/data.mdb"))
  }

  @Test(
    "With the log tree's root page zeroed, every event comes back: same notes, same replica and account, this device's events all in the outbox"
  )
  func rootPageLost() throws {
    try withTemporaryDirectory { root in
      let made = try Self.makeStore(at: root + "/store")
      let (logRoot, _) = try Self.logPages(made.file)
      var damaged = made.file
      for offset in logRoot * 4096..<(logRoot + 1) * 4096 { damaged[offset] = 0 }
      try Self.write(damaged, to: root + "/store")
      #expect(try !NoteStore.structureFaults(at: root + "/store").isEmpty)

      let report = try NoteStore.salvage(from: root + "/store", to: root + "/out")
      #expect(report.events == made.events.count, "\(report)")
      #expect(report.lostEvents == 0 && report.missing.isEmpty, "\(report)")
      #expect(report.loggedEvents == UInt64(made.events.count))
      #expect(report.replicaID == made.replica)
      #expect(report.blobs == 1 && report.missingBlobs == 0)

      let out = try NoteStore.open(at: root + "/out")
      defer { out.close() }
      #expect(out.replicaID == made.replica)
      // This device's events wait in the outbox again, and their notes are pending.
      let outboxNotes = Set(try out.outbox().compactMap(\.event.change.noteID))
      let pending = Set(try out.pendingNotes())
      #expect(!outboxNotes.isEmpty && outboxNotes.isSubset(of: pending))
      #expect(try out.account()?.username == "ann")
      #expect(try out.stateDigest() == made.state)
      #expect(try out.events().map(\.event) == made.events.map(\.event))
      #expect(try out.verify().isEmpty)
      #expect(try out.attachmentData(made.attachment) == Array(repeating: 0xAB, count: 10_000))
      // Every event of this device, acknowledged before or not, is to be pushed again.
      #expect(report.pending == made.events.count)
      #expect(try out.outboxCount() == made.events.count)
    }
  }

  @Test(
    "Sequence numbers a damaged event index gives — past the log's end, or another event's — are not taken: every event comes back at its place, and none is reported lost"
  )
  func damagedEventIndex() throws {
    try withTemporaryDirectory { root in
      let made = try Self.makeStore(at: root + "/store")
      var damaged = made.file
      func bytes(_ value: UInt64) -> [UInt8] { withUnsafeBytes(of: value.bigEndian, Array.init) }
      // Every copy of an event's index entry (a leaf node's key, the stamp, then its value)
      // made to say `sequence`.
      func damage(_ logged: LoggedEvent, to sequence: UInt64) {
        let entry = logged.event.stamp.bytes + bytes(logged.sequence)
        var copies = 0
        var from = damaged.startIndex
        while let range = damaged[from...].firstRange(of: entry) {
          damaged.replaceSubrange((range.upperBound - 8)..<range.upperBound, with: bytes(sequence))
          from = range.upperBound
          copies += 1
        }
        #expect(copies > 0)
      }
      damage(made.events[100], to: 134_220_117)
      damage(made.events[200], to: made.events[201].sequence)
      damage(made.events[300], to: 8_796_093_019_671)
      try Self.write(damaged, to: root + "/store")

      let report = try NoteStore.salvage(from: root + "/store", to: root + "/out")
      #expect(report.lostEvents == 0 && report.missing.isEmpty, "\(report)")
      #expect(report.events == made.events.count)
      let out = try NoteStore.open(at: root + "/out")
      defer { out.close() }
      #expect(try out.stateDigest() == made.state)
      #expect(try out.events().map(\.event) == made.events.map(\.event))
    }
  }

  @Test(
    "With a leaf page of the log zeroed, every event elsewhere comes back, and those lost are named by sequence number"
  )
  func leafPageLost() throws {
    try withTemporaryDirectory { root in
      let made = try Self.makeStore(at: root + "/store")
      let leaves = try Self.logPages(made.file).leaves
      try #require(leaves.count >= 3)
      let page = leaves[1]
      let onPage = Self.sequences(onPage: page, of: made.file)
      try #require(!onPage.isEmpty)
      var damaged = made.file
      for offset in page * 4096..<(page + 1) * 4096 { damaged[offset] = 0 }
      try Self.write(damaged, to: root + "/store")

      let report = try NoteStore.salvage(from: root + "/store", to: root + "/out")
      let out = try NoteStore.open(at: root + "/out")
      defer { out.close() }
      let recovered = Set(try out.events().map(\.event.stamp))
      for logged in made.events where !onPage.contains(logged.sequence) {
        #expect(recovered.contains(logged.event.stamp), "event \(logged.sequence) lost")
      }
      // What is lost is on the zeroed page (unless an older copy of the page survives), and
      // the report names it.
      let lost = made.events.filter { !recovered.contains($0.event.stamp) }.map(\.sequence)
      #expect(!lost.isEmpty)
      #expect(lost.allSatisfy { onPage.contains($0) })
      let named = report.missing.flatMap { Array($0) }
      #expect(named == lost, "\(report)")
      #expect(report.lostEvents == UInt64(lost.count))
      #expect(report.events == made.events.count - lost.count)
      #expect(try out.verify().isEmpty)
    }
  }

  @Test(
    "A deleted note's text, left on pages LMDB freed, is not in the new store: erasure applies as events are written"
  )
  func deletedContentStaysErased() throws {
    try withTemporaryDirectory { root in
      let made = try Self.makeStore(at: root + "/store")
      // The damaged file does hold it (the test would show nothing otherwise).
      #expect(made.file.firstRange(of: Array(Self.canary.utf8)) != nil)
      _ = try NoteStore.salvage(from: root + "/store", to: root + "/out")
      let salvaged = try [UInt8](Data(contentsOf: URL(fileURLWithPath: root + "/out/data.mdb")))
      #expect(salvaged.firstRange(of: Array(Self.canary.utf8)) == nil)
    }
  }

  @Test("Salvage refuses a directory that is not empty, and a path with no store, changing nothing")
  func refusals() throws {
    try withTemporaryDirectory { root in
      _ = try Self.makeStore(at: root + "/store")
      try FileManager.default.createDirectory(
        atPath: root + "/full", withIntermediateDirectories: true)
      try Data("x".utf8).write(to: URL(fileURLWithPath: root + "/full/keep"))
      #expect(throws: VLogError.self) {
        try NoteStore.salvage(from: root + "/store", to: root + "/full")
      }
      #expect(try FileManager.default.contentsOfDirectory(atPath: root + "/full") == ["keep"])
      #expect(throws: VLogError.self) {
        try NoteStore.salvage(from: root + "/nothing", to: root + "/out")
      }
      #expect(!FileManager.default.fileExists(atPath: root + "/out"))
    }
  }

  @Test(
    "A damaged page header or node pointer of a log page loses nothing: the nodes are found both through the pointers and end to end"
  )
  func headerAndPointerFlips() async throws {
    try await withTemporaryDirectory { root in
      let made = try Self.makeStore(at: root + "/store")
      let expected = made.events.map(\.event)
      // The first, a middle and the last leaf page.
      let leaves = try Self.logPages(made.file).leaves
      let pages = [leaves[0], leaves[leaves.count / 2], leaves[leaves.count - 1]]
      // The free-space bounds (lower, upper) and the first two node pointers.
      let flips = pages.flatMap { page in (12..<20).map { page * 4096 + $0 } }
      let lost = await offPool {
        flips.filter { offset in
          var bytes = made.file
          bytes[offset] ^= 0xFF
          return bytes.withUnsafeBytes { SalvagedLog(file: $0) }.events != expected
        }
      }
      #expect(lost.isEmpty, "flips at \(lost) lost events")
    }
  }

  @Test("Single-byte flips anywhere never trap the reading, and records left intact are found")
  func flips() async throws {
    try await withTemporaryDirectory { root in
      let made = try Self.makeStore(at: root + "/store")
      let healthy = made.file.withUnsafeBytes { SalvagedLog(file: $0) }
      #expect(healthy.events == made.events.map(\.event))
      var generator = SeededGenerator(seed: 3)
      let flips = (0..<60).map { _ in
        (
          Int.random(in: 0..<made.file.count, using: &generator),
          UInt8.random(in: 1...255, using: &generator)
        )
      }
      let found = await offPool {
        flips.map { offset, mask in
          var bytes = made.file
          bytes[offset] ^= mask
          return bytes.withUnsafeBytes { SalvagedLog(file: $0) }.events.count
        }
      }
      // One byte damages at most the record it lies in: one event, or none.
      for (count, flip) in zip(found, flips) {
        #expect(count >= made.events.count - 1, "flip at \(flip.0)")
      }
    }
  }
}
