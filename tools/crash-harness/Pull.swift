import ArgumentParser
import Foundation
import VLog
import VLogTesting

// MARK: - A pull's deferred projections

/// The pages of remote events the puller ingests: a pure function of the seed and the page, so
/// that the harness knows which events each acknowledged page held.
enum PullPages {
  static let replica = ReplicaID(Identifier(high: 0xC0FFEE, low: 1))
  static let notes = (0..<40).map { NoteID(Identifier(high: 0xC0FFEE, low: UInt64($0))) }
  static let eventsPerPage = 50

  /// Page `page`: the first creates the notes; the others edit texts, archive, tag, and one
  /// page in seven deletes notes.
  static func page(_ page: Int, seed: UInt64) -> [Event] {
    var random = SeededGenerator(seed: seed &* 1_000_003 &+ UInt64(page))
    let base = UInt64(1_800_000_000_000) + UInt64(page) * 1000
    func stamp(_ index: Int) -> Stamp {
      Stamp(time: HybridTime(milliseconds: base + UInt64(index), counter: 0), replica: replica)
    }
    if page == 0 {
      return notes.enumerated().map { index, note in
        Event(stamp: stamp(index), change: .noteCreated(note, creationDate: Date()))
      }
    }
    return (0..<eventsPerPage).map { index in
      let note = notes[Int(random.next() % UInt64(notes.count))]
      let change: Change
      switch random.next() % 20 {
      case 0: change = .archivedSet(note, archived: random.next() % 2 == 0)
      case 1: change = .tagsSet(note, tags: ["Pulled", "Page \(page % 3)"])
      // A page that deletes projects (the log erases at its commit): one page in seven.
      case 2 where page % 7 == 3: change = .noteDeleted(note)
      default: change = .textSet(note, text: "page \(page) event \(index)", replacing: [])
      }
      return Event(stamp: stamp(index), change: change)
    }
  }
}

/// `vlog-crash puller`: the pull scenario's child. Ingests pages of remote events as a sync
/// client does — each page durable, its projections deferred to the last page of a pull of 5
/// to 30 pages — and prints `ack K` once page K is committed, until killed.
struct Puller: ParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "puller", abstract: "Ingest pulls until killed (the pull scenario's child).",
    shouldDisplay: false)

  @Option var store: String
  @Option var seed: UInt64

  func run() throws {
    var options = NoteStore.Options()
    options.retention = .period(.zero)
    let store = try NoteStore.open(at: store, options: options)
    var random = SeededGenerator(seed: seed)
    var page = 0
    while true {
      let pages = 5 + Int(random.next() % 26)
      for index in 0..<pages {
        try store.ingest(
          PullPages.page(page, seed: seed), deferringProjections: index < pages - 1)
        FileHandle.standardOutput.write(Data("ack \(page)\n".utf8))
        page += 1
      }
    }
  }
}

/// Kills the puller between a page's commit and the pull's last page — the projections then
/// lag the log — and checks the reopened store: every acknowledged page's events are there,
/// the projections are brought up to date (state equal to a fresh replay of the log) and
/// `verify` finds nothing. A round whose kill landed just after a pull's last page is tried
/// again, so that every round crashes inside the window.
func crashPull(
  root: String, tools: Tools, plant: Plant?, using generator: inout SeededGenerator,
  summary: inout Summary
) async throws {
  for attempt in 1...20 {
    let path = root + "/store-\(attempt)"
    let seed = generator.next()
    let child = try Child(tools.harness, ["puller", "--store", path, "--seed", "\(seed)"])
    try await sleepRandomly(50...400, using: &generator)
    guard child.kill() else { throw Failure("the puller ended by itself") }
    let acknowledged = numbers(after: "ack ", in: child.lines)
    guard FileManager.default.fileExists(atPath: path + "/data.mdb") else { continue }
    let lag = try {
      var readOnly = NoteStore.Options()
      readOnly.isReadOnly = true
      let store = try NoteStore.open(at: path, options: readOnly)
      defer { store.close() }
      return try store.unprojectedEventCount()
    }()
    guard lag > 0 else { continue }
    var options = NoteStore.Options()
    options.bringsProjectionsUpToDateOnOpen = plant != .noReplayOnOpen
    let store = try NoteStore.open(at: path, options: options)
    defer { store.close() }
    let faults = try store.verify()
    guard faults.isEmpty else { throw Failure("verify: \(faults)") }
    for page in acknowledged {
      for event in PullPages.page(page, seed: seed)
      where try store.event(withID: event.stamp) == nil {
        throw Failure("page \(page) was acknowledged; its event \(event.stamp) is lost")
      }
    }
    let digest = try store.stateDigest()
    let unprojected = try store.unprojectedEventCount()
    try store.rebuildProjections()
    guard try store.stateDigest() == digest else {
      throw Failure(
        "killed with \(lag) events unprojected: the reopened store's state differs from a "
          + "fresh replay of its log (\(unprojected) events still unprojected)")
    }
    summary.killed += 1
    summary.acknowledged += acknowledged.count
    // The page after the last acknowledged one, if it committed before the kill.
    let next = (acknowledged.max() ?? -1) + 1
    if try store.event(withID: PullPages.page(next, seed: seed)[0].stamp) != nil {
      summary.survivedUnacknowledged += 1
    }
    return
  }
  throw Failure("no kill in 20 landed between a page's commit and its pull's last page")
}
