import Foundation
import ServerTestSupport
import Synchronization
import Testing
import VLog
import VLogServer
import VLogSync
import VLogTesting

/// A value tasks share.
final class Shared<Value: Sendable>: Sendable {
  private let mutex: Mutex<Value>

  init(_ value: Value) { mutex = Mutex(value) }

  var value: Value {
    get { mutex.withLock { $0 } }
    set { mutex.withLock { $0 = newValue } }
  }

  /// Adds one to a count, and returns the new count.
  func increment() -> Int where Value == Int {
    mutex.withLock { count in
      count += 1
      return count
    }
  }
}

/// A transport that runs `hook` before each sync call it sends, with the call's number: what a
/// user does on the device while a sync is under way.
struct HookedTransport: Transport {
  let base: any Transport
  let hook: @Sendable (Int) async throws -> Void
  let calls = Shared(0)
  var server: String { base.server }

  func send(_ request: TransportRequest) async throws -> TransportResponse {
    if request.path == "/v1/sync" { try await hook(calls.increment()) }
    return try await base.send(request)
  }
}

@Suite("A sync's pipeline: the next page asked while one is ingested, the outbox sealed ahead")
struct SyncPipelineTests {
  /// A device of "ann" on `baseURL`, through `hook`.
  static func device(
    _ name: String, root: String, baseURL: String, encrypted: Bool, pageSize: Int = 1000,
    pushSize: Int = 1000, hook: @escaping @Sendable (Int) async throws -> Void = { _ in }
  ) throws -> (store: NoteStore, account: SyncAccount) {
    let store = try NoteStore.open(
      at: root + "/" + name, options: NoteStore.Options(durability: .noSync))
    let account = try SyncAccount(
      store: store,
      transport: HookedTransport(base: HTTPTransport(baseURL: baseURL), hook: hook),
      credentials: Credentials(username: "ann", password: "correct horse battery"),
      pageSize: pageSize, pushSize: pushSize,
      encryption: encrypted ? EncryptedSyncTests.encryption : .testingAsTheServerSays)
    return (store, account)
  }

  @Test(
    "An edit sealed ahead, then redacted by its note's deletion before its push, goes redacted: a sync that stops before the deletion is pushed leaves no device of the account its text"
  )
  func redactedWhileSealedAhead() async throws {
    try await withTemporaryDirectory { root in
      let server = try await openServer(backend: .lmdb, directory: root + "/server")
      defer { server.close() }
      try await withLiveServer(server) { baseURL in
        let doomedText = "CanaryRedactedAfterItsSeal"
        let box = Shared<(store: NoteStore, note: NoteID)?>(nil)
        // Pushes of 100 events: the notes (two pushes: a creation and its text), their edits,
        // then a batch that starts with the doomed edit. While the edits' push is on its way,
        // that batch is sealed ahead; the note is then deleted, which redacts the edit in the
        // outbox. The fifth push, which carries the deletion, fails.
        let a = try Self.device(
          "a", root: root, baseURL: baseURL, encrypted: true, pushSize: 100
        ) { call in
          if call == 5 { throw CancellationError() }
          guard call == 3, let target = box.value else { return }
          // Time for the batch after this push to be read and sealed (a few milliseconds):
          // a deletion before that would find nothing sealed ahead to change.
          try await Task.sleep(for: .milliseconds(500))
          try await target.store.write { $0.deleteNote(target.note) }
        }
        defer { a.store.close() }
        try await a.account.createAccount()
        let notes = try await a.store.write { changes in
          (0..<100).map { changes.createNote(text: "note \($0)") }
        }
        try await a.store.write { changes in
          for (index, note) in notes.enumerated() { changes.setText("edit \(index)", of: note) }
        }
        try await a.store.write { changes in
          changes.setText(doomedText, of: notes[7])
          for round in 0..<2 {
            for note in notes.dropFirst(8) { changes.setText("again \(round)", of: note) }
          }
        }
        box.value = (store: a.store, note: notes[7])
        await #expect(throws: (any Error).self) { try await a.account.sync() }
        #expect(try a.store.note(notes[7]) == nil)

        let b = try Self.device("b", root: root, baseURL: baseURL, encrypted: true)
        defer { b.store.close() }
        let pulled = try await b.account.sync()
        #expect(pulled.applied >= 300)
        // The deletion has not reached the server: the note is there, without the edit.
        #expect(try b.store.note(notes[7])?.text == "edit 7")
        for logged in try b.store.events() {
          if case .textSet(_, let text, _) = logged.event.change {
            #expect(!text.contains(doomedText))
          }
        }
      }
    }
  }

  /// What a replica holds of its notes: each note's text, by id.
  static func texts(_ store: NoteStore) throws -> [NoteID: String] {
    Dictionary(
      uniqueKeysWithValues: try store.events().compactMap { logged in
        guard case .noteCreated(let note, _) = logged.event.change else { return nil }
        return (note, try store.note(note)?.text ?? "")
      })
  }

  @Test(
    "A pull whose pages wait to be projected until its last one, cut short by a failure, shows every page it committed; the next sync ends it"
  )
  func pullCutShort() async throws {
    struct Cut: Error {}
    try await withTemporaryDirectory { root in
      let server = try await openServer(backend: .lmdb, directory: root + "/server")
      defer { server.close() }
      try await withLiveServer(server) { baseURL in
        let a = try Self.device("a", root: root, baseURL: baseURL, encrypted: false)
        defer { a.store.close() }
        try await a.account.createAccount()
        let notes = try await a.store.write { changes in
          (0..<200).map { changes.createNote(text: "note \($0)") }
        }
        #expect(try await a.account.sync().inSync)
        // The second device pulls pages of 50; from its fourth call on, every call fails.
        let failing = Shared(true)
        let b = try Self.device("b", root: root, baseURL: baseURL, encrypted: false, pageSize: 50) {
          call in if call >= 4 && failing.value { throw Cut() }
        }
        defer { b.store.close() }
        await #expect(throws: APIError.self) { try await b.account.sync() }
        // The pages committed show: the failed sync brought their projections up to date.
        let held = Set(
          try b.store.events().compactMap { logged -> NoteID? in
            guard case .noteCreated(let id, _) = logged.event.change else { return nil }
            return id
          })
        #expect(!held.isEmpty && held.count < notes.count)
        #expect(try b.store.unprojectedEventCount() == 0)
        #expect(try Set(b.store.timeline(limit: 1000).map(\.id)) == held)
        failing.value = false
        #expect(try await b.account.sync().inSync)
        #expect(try Set(b.store.timeline(limit: 1000).map(\.id)) == Set(notes))
      }
    }
  }

  @Test(
    "A device pushes its outbox in many pushes while its user edits, deletes a note whose edit is being sealed ahead, and writes new notes; another device pulls it all in many pages while its own user writes: both end with the server's digest and the same notes, and the deleted note's text is nowhere",
    arguments: Backend.allCases, [false, true])
  func editsDuringSync(backend: Backend, encrypted: Bool) async throws {
    try await withTemporaryDirectory { root in
      let server = try await openServer(backend: backend, directory: root + "/server")
      defer { server.close() }
      try await withLiveServer(server) { baseURL in
        try await Self.editsDuringSync(root: root, baseURL: baseURL, encrypted: encrypted)
      }
    }
  }

  /// The body of ``editsDuringSync(backend:encrypted:)``, in `root`.
  static func editsDuringSync(root: String, baseURL: String, encrypted: Bool) async throws {
    let doomedText = "CanaryDeletedWhileSealedAhead"
    let box = Shared<(store: NoteStore, note: NoteID)?>(nil)
    // During the second push, a note whose edit is in the batch after it is deleted,
    // and a note is written: the events sealed ahead change under the sync.
    let a = try Self.device(
      "a", root: root, baseURL: baseURL, encrypted: encrypted, pushSize: 200
    ) { call in
      guard call == 2, let target = box.value else { return }
      try await target.store.write { changes in
        changes.deleteNote(target.note)
        _ = changes.createNote(text: "written during the push")
      }
    }
    defer { a.store.close() }
    try await a.account.createAccount()
    let notes = try await a.store.write { changes in
      (0..<100).map { changes.createNote(text: "note \($0)") }
    }
    for round in 0..<5 {
      try await a.store.write { changes in
        for (index, note) in notes.enumerated() {
          changes.setText("note \(index), edit \(round)", of: note)
        }
      }
    }
    // The doomed note's text is edited last, in the outbox's last pushes.
    try await a.store.write { $0.setText(doomedText, of: notes[7]) }
    box.value = (store: a.store, note: notes[7])
    let pushed = try await a.account.sync()
    #expect(pushed.inSync && pushed.pushed > 600 && pushed.repaired == 0)

    // The second device pulls in pages of 50, writing a note during the third call.
    let bBox = Shared<NoteStore?>(nil)
    let b = try Self.device(
      "b", root: root, baseURL: baseURL, encrypted: encrypted, pageSize: 50
    ) { call in
      guard call == 3, let store = bBox.value else { return }
      try await store.write { _ = $0.createNote(text: "written during the pull") }
    }
    defer { b.store.close() }
    bBox.value = b.store
    let pulled = try await b.account.sync()
    // Every event went in its push: none needed the repair that would hide a lost one.
    #expect(pulled.inSync && pulled.calls > 10 && pulled.repaired == 0)
    #expect(try await a.account.sync().inSync)

    let textsA = try Self.texts(a.store)
    let textsB = try Self.texts(b.store)
    #expect(textsA == textsB)
    #expect(textsA[notes[7]] == nil || textsA[notes[7]] == "")
    #expect(textsA.values.contains("written during the push"))
    #expect(textsA.values.contains("written during the pull"))
    #expect(textsA[notes[8]] == "note 8, edit 4")
    for logged in try b.store.events() {
      if case .textSet(_, let text, _) = logged.event.change {
        #expect(!text.contains(doomedText))
      }
    }
  }
}
