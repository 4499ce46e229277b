import Foundation
import ServerTestSupport
import Synchronization
import Testing
import VLogServer
import VLogServerTesting
import VLogSync
import VLogTesting

@testable import VLog

/// Counts the attachment bytes a device sends and receives, and can refuse its next sync call
/// that pushes events with 413, as a server with a small body limit would.
final class BlobTraffic: Transport {
  struct Counts: Sendable {
    var uploaded = 0
    var downloaded = 0
    var refuseNextPush = false
    /// Whether the server answers which blobs it lacks (false: a server from before the
    /// question, which answers 404).
    var answersQuestion = true
  }

  let base: any Transport
  var server: String { base.server }
  private let state = Mutex(Counts())

  init(_ base: any Transport) { self.base = base }

  var counts: Counts { state.withLock { $0 } }

  func refuseNextPush() { state.withLock { $0.refuseNextPush = true } }

  func stopAnsweringQuestion() { state.withLock { $0.answersQuestion = false } }

  func send(_ request: TransportRequest) async throws -> TransportResponse {
    if request.method == "POST", request.path == "/v1/sync", request.body.count > 64,
      state.withLock({ counts in
        defer { counts.refuseNextPush = false }
        return counts.refuseNextPush
      })
    {
      let body = #"{"code":"bodyTooLarge","message":"the body is over the limit"}"#
      return TransportResponse(
        status: 413, headers: ["content-type": "application/json"], body: Array(body.utf8))
    }
    if request.path == "/v1/sync/missing-blobs", !state.withLock({ $0.answersQuestion }) {
      let body = #"{"code":"notFound","message":"no such route"}"#
      return TransportResponse(
        status: 404, headers: ["content-type": "application/json"], body: Array(body.utf8))
    }
    let response = try await base.send(request)
    if request.path.hasPrefix("/v1/blobs/") {
      state.withLock { counts in
        if request.method == "PUT" { counts.uploaded += request.body.count }
        if request.method == "GET", response.status == 200 {
          counts.downloaded += response.body.count
        }
      }
    }
    return response
  }
}

@Suite("Attachment bytes travel once")
struct BlobTransferTests {
  static let ann = Credentials(username: "ann", password: "correct horse battery")

  @Test(
    "a device asks before it uploads: bytes go up once through a 413 retry, a second device with the same bytes and a repair, and come down once",
    arguments: Backend.allCases)
  func bytesTravelOnce(backend: Backend) async throws {
    try await withServer(backend: backend) { server in
      try await withTemporaryDirectory { root in
        let base = InProcessTransport(server: server)
        let traffics = (0..<3).map { _ in BlobTraffic(base) }
        let devices = try openDevices(
          3, root: root, transport: { traffics[$0] }, credentials: Self.ann, seed: 11)
        defer { for device in devices { device.store.close() } }
        let (phone, laptop, restored) = (devices[0], devices[1], devices[2])
        try await phone.account.createAccount()
        let photo = [UInt8](repeating: 0x5A, count: 200_000)
        let other = [UInt8](repeating: 0x33, count: 50_000)

        // The push that carries the attachments is refused once as too large; the retry, with
        // half the events, does not send the bytes again.
        try await phone.store.write { changes in
          for index in 0..<4 {
            let note = changes.createNote(text: "note \(index)")
            changes.addAttachment(photo, mimeType: "image/png", to: note)
          }
          changes.addAttachment(other, mimeType: "image/png", to: changes.createNote())
        }
        traffics[0].refuseNextPush()
        let first = try await phone.account.sync()
        #expect(first.inSync)
        #expect(traffics[0].counts.uploaded == photo.count + other.count)
        #expect(first.blobsUploaded == 2)

        // Another device that adds the same bytes uploads none of them.
        try await laptop.store.write { changes in
          changes.addAttachment(photo, mimeType: "image/png", to: changes.createNote())
        }
        let second = try await laptop.account.sync()
        #expect(second.inSync && second.blobsUploaded == 0)
        #expect(traffics[1].counts.uploaded == 0)
        // It downloads each distinct blob it needs once.
        for note in try laptop.store.timeline() {
          for attachment in try #require(try laptop.store.note(note.id)).attachments {
            _ = try await laptop.account.attachmentData(attachment.id)
          }
        }
        #expect(traffics[1].counts.downloaded == other.count)

        // Events imported from a store that never synced are pushed by repair (they were never
        // in an outbox); the server holds their bytes, so none go up.
        let offline = try NoteStore.open(
          at: root + "/offline",
          options: NoteStore.Options(dependencies: .testing(clock: ManualClock(), seed: 99)))
        defer { offline.close() }
        try await offline.write { changes in
          changes.addAttachment(photo, mimeType: "image/png", to: changes.createNote())
        }
        let imported = try offline.events().map(\.event)
        try await restored.store.ingest(imported)
        let hash = try #require(
          imported.compactMap { event -> BlobHash? in
            guard case .attachmentAdded(let attachment) = event.change else { return nil }
            return attachment.blobHash
          }.first)
        try restored.store.storeBlob(try #require(try offline.blob(hash)), hash: hash)
        let repaired = try await restored.account.sync()
        #expect(repaired.inSync && repaired.repaired == imported.count)
        #expect(repaired.blobsUploaded == 0)
        #expect(traffics[2].counts.uploaded == 0)

        // A server from before the question gets the bytes without being asked.
        traffics[2].stopAnsweringQuestion()
        let fresh = [UInt8](repeating: 0x77, count: 10_000)
        try await restored.store.write { changes in
          changes.addAttachment(fresh, mimeType: "image/png", to: changes.createNote())
        }
        let unasked = try await restored.account.sync()
        #expect(unasked.inSync && unasked.blobsUploaded == 1)
        #expect(traffics[2].counts.uploaded == fresh.count)
      }
    }
  }
}
