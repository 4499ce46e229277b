import Foundation
import ServerTestSupport
import Synchronization
import Testing
import VLogServer
import VLogServerTesting
import VLogSync
import VLogTesting

@testable import VLog

/// A transport that, while faults are on, drops requests, drops responses after the server
/// committed, duplicates requests, and holds requests back to deliver them later, out of order —
/// each decided by a seeded generator.
final class FaultyTransport: Transport {
  struct Dropped: Error {}

  private struct State {
    var generator: SeededGenerator
    var delayed: [TransportRequest] = []
    var faultsOn = true
  }

  let base: any Transport
  var server: String { base.server }
  private let state: Mutex<State>

  init(_ base: any Transport, seed: UInt64) {
    self.base = base
    state = Mutex(State(generator: SeededGenerator(seed: seed)))
  }

  var faultsOn: Bool {
    get { state.withLock { $0.faultsOn } }
    set { state.withLock { $0.faultsOn = newValue } }
  }

  func send(_ request: TransportRequest) async throws -> TransportResponse {
    let roll = state.withLock { state -> UInt64 in
      state.faultsOn ? state.generator.next() % 100 : 99
    }
    switch roll {
    case 0..<8:
      throw Dropped()
    case 8..<16:
      _ = try await base.send(request)
      throw Dropped()
    case 16..<21:
      _ = try await base.send(request)
      return try await base.send(request)
    case 21..<29:
      state.withLock { $0.delayed.append(request) }
      throw Dropped()
    default:
      return try await base.send(request)
    }
  }

  /// Delivers some held-back requests, in a random order; their answers go nowhere.
  func deliverDelayed() async throws {
    let batch = state.withLock { state -> [TransportRequest] in
      guard !state.delayed.isEmpty else { return [] }
      state.delayed.shuffle(using: &state.generator)
      let count = Int(state.generator.next() % UInt64(state.delayed.count)) + 1
      defer { state.delayed.removeFirst(count) }
      return Array(state.delayed.prefix(count))
    }
    for request in batch { _ = try await base.send(request) }
  }
}

/// What one simulated run did and where it ended.
struct SimulationOutcome: Equatable {
  var trace: [String] = []
  var deviceDigests: [String] = []
  var serverDigests: [String] = []
  /// Attachments a device does not show although the merge rule says it must, each with the
  /// device: an add lost.
  var lostAdds: [String] = []
  /// Texts a device neither shows nor lists as a conflict although no change replaced them,
  /// each with the device: a text lost.
  var lostTexts: [String] = []
  /// Each device's notes with conflicts, and their conflicting texts' stamps.
  var conflicts: [String] = []

  var converged: Bool {
    Set(deviceDigests).count == 1 && Set(serverDigests).count == 1
      && Set(conflicts).count <= 1
  }
}

/// Five devices of one account and a server in one process, over the in-process transport with
/// faults, on manual clocks: random edits, syncs, restarts, clock steps and late deliveries, then
/// a healed network and syncs until nothing moves.
func simulate(
  seed: UInt64, backend: Backend = .lmdb, mergePolicy: any MergePolicy = StandardMerge(),
  steps: Int = 60
) async throws
  -> SimulationOutcome
{
  let serverClock = ManualClock()
  var configuration = SyncServer.Configuration.testing
  configuration.tokenLifetime = .seconds(90)
  return try await withServer(
    backend: backend, configuration: configuration, clock: serverClock, seed: seed
  ) {
    server in
    try await withTemporaryDirectory { root in
      var generator = SeededGenerator(seed: seed)
      var outcome = SimulationOutcome()
      let credentials = Credentials(username: "sim", password: "simulation")
      let transports = (0..<5).map {
        FaultyTransport(InProcessTransport(server: server), seed: seed &* 31 &+ UInt64($0))
      }
      let skews = (0..<5).map { _ in Double(Int(generator.next() % 600) - 300) }
      let clocks = skews.map { ManualClock(start: serverClock.now.addingTimeInterval($0)) }
      var restarts = [Int](repeating: 0, count: 5)
      func open(_ index: Int) throws -> Device {
        try openDevice(
          index, root: root, transport: transports[index], credentials: credentials,
          seed: seed &* 1_000_003 &+ UInt64(index * 1000 + restarts[index]),
          clock: clocks[index], mergePolicy: mergePolicy, pageSize: 7,
          // As the server says, stretching at the tests' cost: every device asks how the
          // password is stretched before it signs in, and sends no password.
          encryption: .testingAsTheServerSays)
      }
      var devices = try (0..<5).map(open)
      defer { for device in devices { device.store.close() } }
      _ = try await APICaller(transport: InProcessTransport(server: server))
        .createAccount(credentials).get()
      var shared: [NoteID] = []

      for step in 0..<steps {
        let index = Int(generator.next() % 5)
        let device = devices[index]
        switch generator.next() % 100 {
        case 0..<40:
          let count = Int(generator.next() % 4) + 1
          shared += try makeRandomChanges(
            on: device.store, count: count, shared: shared, using: &generator)
          outcome.trace.append("\(step) d\(index) edits \(count)")
        case 40..<80:
          do {
            let report = try await device.account.sync()
            outcome.trace.append(
              "\(step) d\(index) sync pushed \(report.pushed) applied \(report.applied)")
          } catch {
            outcome.trace.append("\(step) d\(index) sync failed: \(error)")
          }
        case 80..<86:
          device.store.close()
          restarts[index] += 1
          devices[index] = try open(index)
          outcome.trace.append("\(step) d\(index) restarts")
        case 86..<93:
          try await transports[index].deliverDelayed()
          outcome.trace.append("\(step) d\(index) late deliveries")
        default:
          // A device's clock is corrected backwards.
          clocks[index].advance(by: -Double(generator.next() % 5))
          outcome.trace.append("\(step) d\(index) clock stepped back")
        }
        let elapsed = Double(generator.next() % 4000) / 1000
        serverClock.advance(by: elapsed)
        for clock in clocks { clock.advance(by: elapsed) }
      }

      for transport in transports {
        try await transport.deliverDelayed()
        transport.faultsOn = false
      }
      try await syncUntilQuiet(devices, using: &generator)
      for (index, device) in devices.enumerated() {
        let digests = try Digests(device.store)
        outcome.deviceDigests.append("\(digests.events) \(digests.state)")
        outcome.lostAdds += try lostAttachments(device.store).map { "d\(index) \($0)" }
        outcome.lostAdds += try wrongTags(device.store).map { "d\(index) \($0)" }
        let texts = try textCheck(device.store)
        outcome.lostTexts += texts.lost.map { "d\(index) \($0)" }
        outcome.conflicts.append(texts.conflicts)
        outcome.serverDigests.append(
          "\(await device.account.state.serverEventSetDigest ?? "none") \(digests.state)")
      }
      return outcome
    }
  }
}

/// The attachments a store should show but does not, worked out from its log alone: an
/// attachment not deleted, on a visible note, shown if its note's newest attachments list names
/// it or it was added after that list (each attachment on a note merges on its own).
func lostAttachments(_ store: NoteStore) throws -> [String] {
  var lists: [NoteID: (stamp: Stamp, ids: [AttachmentID])] = [:]
  var adds: [AttachmentID: (stamp: Stamp, note: NoteID)] = [:]
  var deleted = Set<AttachmentID>()
  for event in try store.events().map(\.event) where !event.isRedacted {
    switch event.change {
    case .attachmentsSet(let note, let ids):
      if lists[note].map({ $0.stamp < event.stamp }) ?? true { lists[note] = (event.stamp, ids) }
    case .attachmentAdded(let attachment):
      if adds[attachment.id].map({ event.stamp < $0.stamp }) ?? true {
        adds[attachment.id] = (event.stamp, attachment.noteID)
      }
    case .attachmentDeleted(let id): deleted.insert(id)
    default: break
    }
  }
  var lost: [String] = []
  for (id, add) in adds where !deleted.contains(id) {
    guard let note = try store.note(add.note) else { continue }
    let shown = lists[add.note].map { $0.ids.contains(id) || add.stamp > $0.stamp } ?? true
    if shown && !note.attachments.contains(where: { $0.id == id }) {
      lost.append("\(id) on \(add.note)")
    }
  }
  return lost.sorted()
}

/// The notes whose tags differ from what the store's log alone says they must be: for each
/// tag, the newest of the note's newest list (the tag on it or not) and the tag's own additions
/// and removals, ignoring all of them older than the tag's latest deletion (each tag on a note
/// merges on its own). A tag added and missing is an add lost.
func wrongTags(_ store: NoteStore) throws -> [String] {
  var lists: [NoteID: (stamp: Stamp, tags: [TagID])] = [:]
  var changes: [NoteID: [TagKey: (stamp: Stamp, isOn: Bool)]] = [:]
  var deletions: [TagKey: Stamp] = [:]
  for event in try store.events().map(\.event) where !event.isRedacted {
    switch event.change {
    case .tagsSet(let note, let names):
      if lists[note].map({ $0.stamp < event.stamp }) ?? true {
        lists[note] = (event.stamp, names.map(TagID.init(name:)))
      }
    case .tagAdded(let note, let name):
      if changes[note]?[TagKey(name: name)].map({ $0.stamp < event.stamp }) ?? true {
        changes[note, default: [:]][TagKey(name: name)] = (event.stamp, true)
      }
    case .tagRemoved(let note, let key):
      if changes[note]?[key].map({ $0.stamp < event.stamp }) ?? true {
        changes[note, default: [:]][key] = (event.stamp, false)
      }
    case .tagErased(let key):
      deletions[key] = max(deletions[key] ?? .zero, event.stamp)
    default: break
    }
  }
  var wrong: [String] = []
  for id in Set(lists.keys).union(changes.keys).sorted() {
    guard let note = try store.note(id) else { continue }
    var expected: Set<TagKey> = []
    var names: [TagKey: TagID] = [:]
    for tag in lists[id]?.tags ?? [] { names[TagKey(tag)] = tag }
    var keys = Set(names.keys)
    if let own = changes[id] { keys.formUnion(own.keys) }
    for key in keys {
      let floor = deletions[key] ?? .zero
      var newest: (stamp: Stamp, isOn: Bool)?
      if let list = lists[id], list.stamp > floor {
        newest = (list.stamp, list.tags.contains { TagKey($0) == key })
      }
      if let change = changes[id]?[key], change.stamp > floor,
        newest.map({ $0.stamp < change.stamp }) ?? true
      {
        newest = change
      }
      if newest?.isOn == true { expected.insert(key) }
    }
    let shown = Set(note.tags.map { TagKey($0.id) })
    if shown != expected {
      wrong.append(
        "\(id) shows \(note.tags.map(\.name)), expected \(expected.count) tags"
          + " (missing \(expected.subtracting(shown).count))")
    }
  }
  return wrong
}

/// What a store's texts should be, worked out from its log alone (``TextVersions``' rule read
/// off the whole set): every text that no text change names and no newer change without a
/// base replaces must be shown or listed as a conflict of its visible note. Returns those that
/// are not, and the store's conflicts (note: conflict stamps) to compare across devices.
func textCheck(_ store: NoteStore) throws -> (lost: [String], conflicts: String) {
  var named = Set<Stamp>()
  var floors: [NoteID: Stamp] = [:]
  var texts: [NoteID: [Stamp]] = [:]
  for event in try store.events().map(\.event) {
    guard case .textSet(let note, _, let base) = event.change else { continue }
    if let base {
      named.formUnion(base.filter { $0 < event.stamp })
    } else if floors[note].map({ $0 < event.stamp }) ?? true {
      floors[note] = event.stamp
    }
    if !event.isRedacted { texts[note, default: []].append(event.stamp) }
  }
  var lost: [String] = []
  var conflicts: [String] = []
  for (id, stamps) in texts.sorted(by: { $0.key < $1.key }) {
    guard let note = try store.note(id) else { continue }
    let kept = Set([note.stamps.text] + note.conflicts.map(\.stamp))
    for stamp in stamps where !named.contains(stamp) && stamp >= (floors[id] ?? .zero) {
      if !kept.contains(stamp) { lost.append("\(stamp) on \(id)") }
    }
    if !note.conflicts.isEmpty {
      conflicts.append("\(id): \(note.conflicts.map(\.stamp.description).joined(separator: ","))")
    }
  }
  return (lost.sorted(), conflicts.joined(separator: "; "))
}

@Suite("Simulation")
struct SimulationTests {
  /// `VLOG_SIMULATION_SEEDS=N` runs N seeds instead of 200.
  static let seeds: [UInt64] = Array(
    0..<UInt64(
      ProcessInfo.processInfo.environment["VLOG_SIMULATION_SEEDS"].flatMap(Int.init) ?? 200))

  @Test(
    "Five devices with faults, skewed clocks and restarts converge",
    arguments: Backend.allCases, seeds)
  func converges(backend: Backend, seed: UInt64) async throws {
    let outcome = try await simulate(seed: seed, backend: backend)
    #expect(outcome.converged, "seed \(seed): \(outcome.deviceDigests) \(outcome.trace)")
    #expect(outcome.lostAdds.isEmpty, "seed \(seed): \(outcome.lostAdds)")
    #expect(outcome.lostTexts.isEmpty, "seed \(seed): \(outcome.lostTexts)")
    #expect(
      outcome.trace.contains { $0.contains("sync pushed") },
      "seed \(seed): no sync succeeded: \(outcome.trace.filter { $0.contains("sync") })")
  }

  @Test("The same seed replays identically", arguments: Backend.allCases)
  func replays(backend: Backend) async throws {
    for seed: UInt64 in [3, 4] {
      let first = try await simulate(seed: seed, backend: backend)
      let second = try await simulate(seed: seed, backend: backend)
      #expect(first == second)
      #expect(first.trace.contains { $0.contains("failed") }, "faults were injected")
    }
  }

  @Test(
    "The simulation catches a planted bug (a merge that compares wall time only)",
    arguments: Backend.allCases)
  func catchesPlantedBug(backend: Backend) async throws {
    // Seeds until one diverges: one is proof enough, and the simulation is the suite's
    // heaviest test (under ThreadSanitizer most of all).
    var diverged = 0
    for seed: UInt64 in 0..<20 where diverged == 0 {
      let outcome = try await simulate(seed: seed, backend: backend, mergePolicy: WallTimeOnly())
      if !outcome.converged { diverged += 1 }
    }
    #expect(diverged > 0)
  }

  @Test(
    "The simulation catches a planted whole-list merge of attachments (an add another device made meanwhile lost)",
    arguments: Backend.allCases)
  func catchesPlantedWholeListMerge(backend: Backend) async throws {
    var lost = 0
    for seed: UInt64 in 0..<20 where lost == 0 {
      let outcome = try await simulate(
        seed: seed, backend: backend, mergePolicy: WholeAttachmentLists())
      if !outcome.lostAdds.isEmpty { lost += 1 }
    }
    #expect(lost > 0)
  }

  @Test(
    "The simulation catches a planted whole-list merge of tags (a tag another device added meanwhile lost)",
    arguments: Backend.allCases)
  func catchesPlantedWholeTagLists(backend: Backend) async throws {
    var lost = 0
    for seed: UInt64 in 0..<20 where lost == 0 {
      let outcome = try await simulate(seed: seed, backend: backend, mergePolicy: WholeTagLists())
      if outcome.lostAdds.contains(where: { $0.contains("tags") }) { lost += 1 }
    }
    #expect(lost > 0)
  }

  @Test(
    "The simulation catches a planted last-writer-only text merge (a text another device wrote meanwhile lost)",
    arguments: Backend.allCases)
  func catchesPlantedLastWriterTexts(backend: Backend) async throws {
    var lost = 0
    var conflicted = 0
    for seed: UInt64 in 0..<20 where conflicted == 0 {
      if try await !simulate(seed: seed, backend: backend).conflicts[0].isEmpty { conflicted += 1 }
    }
    for seed: UInt64 in 0..<20 where lost == 0 {
      let outcome = try await simulate(
        seed: seed, backend: backend, mergePolicy: LastWriterOnlyTexts())
      if !outcome.lostTexts.isEmpty { lost += 1 }
    }
    #expect(conflicted > 0, "the simulation makes conflicts")
    #expect(lost > 0)
  }
}
