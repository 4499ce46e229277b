import Testing

@testable import VLog

@Suite("Migrations: named steps by format")
struct MigrationsTests {
  @Test("a store of each format runs the steps its format needs, in order; a newer one none")
  func storeSteps() {
    let migrations = NoteStore.migrations
    #expect(migrations.current == NoteStore.formatVersion)
    // What opening each format did before the steps were registered, as a ladder of ifs.
    func ladder(_ version: UInt32) -> [String] {
      guard version < NoteStore.formatVersion else { return [] }
      var steps: [String] = []
      if version == 1 { steps.append("checksums and digests: XXH64 to XXH3") }
      if version < 3 {
        steps.append("erasure indexes: objects, blobs, fields")
      } else if version == 3 {
        steps.append("the object index in buckets of sequence numbers")
      } else if version < 8 {
        steps.append("tags filed by their composed names")
      }
      if version < 7 { steps.append("deleted tags' names erased") }
      return steps
    }
    for version in UInt32(1)...NoteStore.formatVersion {
      #expect(
        migrations.pending(from: version)?.map(\.name) == ladder(version), "format \(version)")
    }
    #expect(migrations.pending(from: NoteStore.formatVersion + 1) == nil)
  }

  @Test("steps run in the order registered, each for the formats it names")
  func order() {
    var migrations = Migrations<Int>(current: 5)
    migrations.register("a", below: 5, 1)
    migrations.register("b", formats: 2..<4, 2)
    migrations.register("c", below: 2, 3)
    #expect(migrations.pending(from: 0)?.map(\.step) == [1, 3])
    #expect(migrations.pending(from: 3)?.map(\.step) == [1, 2])
    #expect(migrations.pending(from: 4)?.map(\.step) == [1])
    #expect(migrations.pending(from: 5)?.isEmpty == true)
    #expect(migrations.pending(from: 6) == nil)
  }
}
