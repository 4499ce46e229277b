import Foundation
import Testing
import VLogTesting

@testable import VLog

@Suite("A store whose map cannot grow")
struct ExhaustedAddressSpaceTests {
  /// In a child process whose address space has room for the store's map but not for its
  /// double, as on a device whose address space is exhausted: the write that needs the grown
  /// map fails with an error that says so, the store refuses further use instead of reading
  /// memory liblmdb has unmapped (the child would die by a signal), and the store opens again
  /// with every change committed before.
  @Test(
    "a write that needs a map the process cannot make fails; the store opens again whole",
    .disabled(if: runsUnderSanitizer, "sanitizers' shadow memory takes the address space"))
  func failedGrowth() async {
    await #expect(processExitsWith: .success) {
      try withTemporaryDirectory { path in
        // A growth that succeeds after all stops at 64 MiB rather than fill the disk.
        let options = NoteStore.Options(
          durability: .noSync, mapSize: 32 << 20, maximumMapSize: 64 << 20)
        let store = try NoteStore.open(at: path, options: options)
        let text = String(repeating: "a line of a note that fills the map. ", count: 25)
        var committed = 0
        let failure = try withAddressSpaceLimited(toCurrentPlus: 16 << 20) {
          #expect(throws: VLogError.self) {
            while true {
              try store.write { edits in
                for _ in 0..<20 { edits.createNote(text: text) }
              }
              committed += 20
            }
          }
        }
        #expect(failure?.message.contains("so the environment was closed; open it again") == true)
        #expect(committed > 5000, "the first 32 MiB filled before the growth failed")
        #expect(throws: VLogError.self) { try store.noteCount() }
        #expect(store.observers.isFinished, "the streams of changes ended with the store")
        store.close()
        let reopened = try NoteStore.open(at: path, options: options)
        defer { reopened.close() }
        #expect(try reopened.noteCount() == committed)
        try reopened.write { edits in
          for _ in 0..<2000 { edits.createNote(text: text) }
        }
        #expect(try reopened.noteCount() == committed + 2000)
        #expect(try reopened.verify().isEmpty)
      }
    }
  }
}
