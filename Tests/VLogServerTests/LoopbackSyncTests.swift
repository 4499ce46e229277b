import Foundation
import ServerTestSupport
import Testing
import VLogServer
import VLogSync
import VLogTesting

@testable import VLog

/// A faulty transport for the planted-bug run: it strips the pushed events from sync requests, as
/// a client that acknowledged events it never sent would.
struct DroppingPushTransport: Transport {
  let base: any Transport
  var server: String { base.server }
  func send(_ request: TransportRequest) async throws -> TransportResponse {
    var request = request
    if request.path == "/v1/sync" {
      var push = try SyncPush(binary: request.body, maximumEvents: .max)
      push.events = []
      request.body = push.binaryEncoded()
    }
    return try await base.send(request)
  }
}

/// Syncs every device, in a random order each pass, until a whole pass moves nothing.
func syncUntilQuiet(_ devices: [Device], using generator: inout SeededGenerator) async throws {
  for _ in 0..<10 {
    var moved = false
    for device in devices.shuffled(using: &generator) {
      let report = try await device.account.sync()
      if report.pushed > 0 || report.applied > 0 { moved = true }
    }
    if !moved { return }
  }
  Issue.record("the devices kept exchanging events after 10 passes")
}

@Suite("Sync over loopback HTTP")
struct LoopbackSyncTests {
  static let credentials = Credentials(username: "ann", password: "correct horse battery")

  @Test(
    "Three devices with concurrent offline changes converge on the server's digest, one of them speaking JSON",
    arguments: Backend.allCases, [false, true])
  func threeDevicesConverge(backend: Backend, plantedBug: Bool) async throws {
    try await withServer(backend: backend) { server in
      try await withLiveServer(server) { baseURL in
        try await withTemporaryDirectory { root in
          let devices = try openDevices(
            3, root: root,
            transport: { index in
              let live = HTTPTransport(baseURL: baseURL)
              return plantedBug && index == 2 ? DroppingPushTransport(base: live) : live
            }, credentials: Self.credentials, seed: 11, pageSize: 25,
            encoding: { $0 == 1 ? .json : .binary })
          defer { for device in devices { device.store.close() } }
          try await devices[0].account.createAccount()
          var generator = SeededGenerator(seed: 5)
          let shared = try makeRandomChanges(
            on: devices[0].store, count: 12, shared: [], using: &generator)
          try await syncUntilQuiet(devices, using: &generator)
          for _ in 0..<3 {
            for device in devices {
              device.clock.advance(by: Double(generator.next() % 3))
              _ = try makeRandomChanges(
                on: device.store, count: 30, shared: shared, using: &generator)
            }
            try await syncUntilQuiet(devices, using: &generator)
          }
          let digests = try devices.map { try Digests($0.store) }
          if plantedBug {
            #expect(Set(digests.map(\.events)).count > 1, "the planted bug went unnoticed")
            return
          }
          #expect(digests[0].count > 100)
          #expect(digests.allSatisfy { $0 == digests[0] }, "\(digests)")
          for device in devices {
            let state = await device.account.state
            #expect(state.serverEventSetDigest == digests[0].events.description)
            #expect(state.lastError == nil)
            #expect(try device.store.outboxCount() == 0)
          }
          // Attachment bytes are downloaded when asked for, and match.
          for device in devices {
            let notes =
              try device.store.timeline(limit: 1000) + device.store.archivedNotes(limit: 1000)
            for summary in notes {
              for attachment in try device.store.note(summary.id)?.attachments ?? [] {
                let bytes = try await device.account.attachmentData(attachment.id)
                #expect(bytes.count == attachment.byteCount)
              }
            }
            #expect(try device.store.missingBlobs().isEmpty)
          }
        }
      }
    }
  }
}
