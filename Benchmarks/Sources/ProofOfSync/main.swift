// What the proof of sync costs: `SyncAccount.checkSync()` against a live LMDB server on
// loopback, with a store of 100,000 events in sync, with one event missing on the server (taken
// in from another store, never in the outbox), and with one missing on the device (pushed by
// another device), next to a sync that has nothing to do, measured in the same run.
//
//   .build/release/ProofOfSync [EVENTS]   (default 100000)
//
// Progress goes to standard error, the Markdown table to standard output. `tools/trust` builds
// and runs it.

import Foundation
import VLog
import VLogServer
import VLogSync

let eventCount = CommandLine.arguments.dropFirst().compactMap { Int($0) }.first ?? 100_000

func log(_ message: String) {
  FileHandle.standardError.write(Data((message + "\n").utf8))
}

/// The median of `runs` timings of `body`, in milliseconds.
func milliseconds(runs: Int = 11, _ body: () async throws -> Void) async rethrows -> Double {
  var samples: [Double] = []
  for _ in 0..<runs {
    let start = ContinuousClock.now
    try await body()
    let elapsed = ContinuousClock.now - start
    samples.append(
      Double(elapsed.components.seconds) * 1e3 + Double(elapsed.components.attoseconds) / 1e15)
  }
  return samples.sorted()[runs / 2]
}

struct Failure: Error, CustomStringConvertible {
  let description: String
}

let root = FileManager.default.temporaryDirectory
  .appendingPathComponent("vlog-proof-\(UUID().uuidString)").path
// A temporary directory: a failure to remove it leaves files there, not a wrong figure.
defer { try? FileManager.default.removeItem(atPath: root) }
let server = try SyncServer.open(
  dataDirectory: root + "/server",
  configuration: .init(passwordCost: .testing, durability: .noSync))
defer { server.close() }
let credentials = Credentials(username: "ann", password: "correct horse battery")

try await server.serving { port in
  let url = "http://127.0.0.1:\(port)"
  let store = try NoteStore.open(
    at: root + "/device", options: NoteStore.Options(durability: .noSync))
  defer { store.close() }
  let account = try SyncAccount(
    store: store, transport: HTTPTransport(baseURL: url), credentials: credentials,
    stateFile: SyncAccount.stateFile(for: store))
  try await account.createAccount()

  // 1,000 notes, then edits of them in turn; about 100-byte texts.
  log("writing and pushing \(eventCount) events")
  let filler = String(repeating: "x", count: 90)
  let notes = try await store.write { edits in
    (0..<1_000).map { edits.createNote(text: "note \($0)") }
  }
  var written = try store.eventCount()
  while written < eventCount {
    let batch = min(1_000, eventCount - written)
    let start = written
    try await store.write { edits in
      for index in start..<start + batch {
        edits.setText("\(filler) \(index)", of: notes[index % notes.count])
      }
    }
    written += batch
  }
  try await account.sync()

  let nothing = try await milliseconds { try await account.sync() }
  var check = try await account.checkSync()
  guard check.inSync else { throw Failure(description: "not in sync after the sync") }
  let inSync = try await milliseconds { _ = try await account.checkSync() }

  // One event the server lacks: another store's change, taken in here, never in the outbox.
  let other = try NoteStore.open(
    at: root + "/other", options: NoteStore.Options(durability: .noSync))
  try await other.write { $0.createNote(text: "from a file") }
  let imported = try other.events(after: 0).map(\.event)
  other.close()
  try await store.ingest(Array(imported.prefix(1)))
  check = try await account.checkSync()
  guard check.differences.count == 1, check.differences[0].repair == .push else {
    throw Failure(description: "missing on the server: \(check.differences)")
  }
  let missingOnServer = try await milliseconds { _ = try await account.checkSync() }
  try await account.sync()

  // One event the device lacks: pushed by another device, not pulled here.
  let caller = APICaller(transport: HTTPTransport(baseURL: url))
  let token = try await caller.signIn(
    username: credentials.username, password: credentials.password
  ).session.token
  _ = try await caller.sync(
    SyncPush(cursor: 0, events: Array(imported.suffix(1)), limit: 1), token: token
  ).get()
  check = try await account.checkSync()
  guard check.differences.count == 1, check.differences[0].repair == .fetch else {
    throw Failure(description: "missing on the device: \(check.differences)")
  }
  let missingOnDevice = try await milliseconds { _ = try await account.checkSync() }

  func format(_ value: Double) -> String { String(format: value < 1 ? "%.3f" : "%.1f", value) }
  func ratio(_ value: Double) -> String {
    String(format: "%.2f× a sync with nothing to do", value / nothing)
  }
  print("| figure | events | differences | ms, median of 11 | ratio |")
  print("|---|---:|---:|---:|---|")
  print(
    "| check, in sync (`checkSync()`) | \(eventCount) | 0 | \(format(inSync)) | \(ratio(inSync)) |")
  print(
    "| check, one event missing on the server | \(eventCount + 1) | 1 | \(format(missingOnServer)) | \(ratio(missingOnServer)) |"
  )
  print(
    "| check, one event missing on the device | \(eventCount + 1) | 1 | \(format(missingOnDevice)) | \(ratio(missingOnDevice)) |"
  )
  print("| sync with nothing to do (the reference) | \(eventCount) | 0 | \(format(nothing)) | 1 |")
}
