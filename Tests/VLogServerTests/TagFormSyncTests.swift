import Foundation
import ServerTestSupport
import Testing
import VLog
import VLogServerTesting
import VLogSync
import VLogTesting

@testable import VLogServer

/// One tag typed in two Unicode forms on two devices, through a server.
@Suite("Tags in two Unicode forms through a server")
struct TagFormSyncTests {
  /// Canonically equivalent spellings of three names: precomposed, decomposed, marks in
  /// another order, another case.
  static let forms: [[String]] = [
    ["Caf\u{E9}", "Cafe\u{301}", "CAF\u{C9}"],
    ["\u{1EC7} n\u{E0}y", "e\u{302}\u{323} na\u{300}y", "e\u{323}\u{302} n\u{E0}y"],
    ["\u{212B}ngstr\u{F6}m", "A\u{30A}ngstro\u{308}m"],
  ]

  @Test(
    "Two devices tag notes with the forms of one name, a third joins: one tag on all three, with every note, the same state, a clean verify and rebuild",
    arguments: Backend.allCases, [UInt64(1), 2, 3])
  func converge(backend: Backend, seed: UInt64) async throws {
    try await withServer(backend: backend, seed: seed) { server in
      try await withTemporaryDirectory { root in
        var generator = SeededGenerator(seed: seed)
        let devices = try openDevices(
          3, root: root, transport: { _ in InProcessTransport(server: server) },
          credentials: Credentials(username: "ann", password: "correct horse battery"), seed: seed)
        defer { for device in devices { device.store.close() } }
        try await devices[0].account.createAccount()
        for round in 0..<3 {
          for device in devices.prefix(2) {
            device.clock.advance(by: Double(round + 1))
            for names in Self.forms {
              let name = names.randomElement(using: &generator)!
              _ = try await device.store.write { $0.createNote(text: "n", tags: [name]) }
            }
            _ = try await device.account.sync()
          }
        }
        for device in devices { _ = try await device.account.sync() }
        let digests = try devices.map { try $0.store.stateDigest() }
        #expect(Set(digests).count == 1)
        for device in devices {
          let tags = try device.store.tags()
          #expect(tags.count == Self.forms.count, "\(tags.map(\.tag.name))")
          #expect(tags.allSatisfy { $0.noteCount == 6 })
          #expect(try device.store.verify().isEmpty)
          _ = try device.store.rebuildProjections()
          #expect(try device.store.stateDigest() == digests[0])
        }
      }
    }
  }
}
