import ArgumentParser
import Foundation
import LMDB
import VLog
import VLogTesting

/// Damages a store's file one byte at a time and runs `vlog`'s reading commands on each copy,
/// as a disk that flips bits would: every damage must be reported (`vlog verify` exits 1) or
/// change nothing that can be read (the events exported and the notes listed are the same),
/// and no command may die by a signal. Each copy is also salvaged (`vlog salvage`), which must
/// recover every event with a record the flip left intact.
struct Flips: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "flips",
    abstract:
      "Flip single bytes of a store's file (random, and aimed at page headers, node pointers, "
      + "node headers and branch keys); run verify, export, log, stats, notes and salvage on "
      + "each.")

  @Option(help: "Damaged copies to try.") var trials = 400
  @Option(help: "Notes in the store (each two or three events).") var notes = 2000
  @Option(help: "The seed of the flips.") var seed: UInt64 = 1
  @Flag(help: "Print each trial's outcome.") var narrate = false

  /// Where a flip is aimed.
  enum Aim: String, CaseIterable {
    case anywhere, pageHeader, nodePointer, nodeHeader, branchKey
  }

  /// What one damaged copy did.
  enum Outcome: String {
    /// A command died by a signal.
    case crashed
    /// `vlog verify` exited 1, and no command crashed.
    case detected
    /// Verify passed, and what the store holds reads the same as before.
    case harmless
    /// Verify passed, but something reads differently: damage missed.
    case missed
  }

  static let commands = [["verify"], ["export"], ["log"], ["stats"], ["notes", "--json"]]
  static let pageSize = 4096

  func run() async throws {
    let tools = try Tools()
    let root = FileManager.default.temporaryDirectory
      .appendingPathComponent("vlog-flips-\(UUID().uuidString)").path
    try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: root) }
    let healthy = root + "/healthy"
    let events = try Self.makeStore(at: healthy, notes: notes)
    let file = try [UInt8](Data(contentsOf: URL(fileURLWithPath: healthy + "/data.mdb")))
    let reference = try Self.contents(of: healthy, tools: tools)
    guard try Self.status(tools, ["verify", "--store", healthy]) == 0 else {
      throw Failure("the undamaged store does not verify")
    }
    let copies = Self.recordCopies(file)
    var salvaged = (intact: 0, recovered: 0)
    var generator = SeededGenerator(seed: seed)
    var counts: [Aim: [Outcome: Int]] = [:]
    var failures: [String] = []
    let damaged = root + "/damaged"
    try FileManager.default.createDirectory(atPath: damaged, withIntermediateDirectories: true)
    let start = ContinuousClock.now
    for trial in 0..<trials {
      let aim = Aim.allCases[trial % Aim.allCases.count]
      guard let offset = Self.offset(aiming: aim, in: file, using: &generator) else { continue }
      var bytes = file
      bytes[offset] ^= UInt8.random(in: 1...255, using: &generator)
      try? FileManager.default.removeItem(atPath: damaged + "/lock.mdb")
      try Data(bytes).write(to: URL(fileURLWithPath: damaged + "/data.mdb"))
      var outcome = Outcome.harmless
      var crashedBy: [String] = []
      for command in Self.commands {
        let status = try Self.status(tools, command + ["--store", damaged])
        if status >= 128 { crashedBy.append("\(command[0]) (signal \(status - 128))") }
        if command == ["verify"], status == 1 { outcome = .detected }
      }
      // Salvage: every event with a copy of its record the flip missed comes back.
      try? FileManager.default.removeItem(atPath: root + "/salvaged")
      let (salvageStatus, salvageOutput, salvageErrors) = try ChildProcess.run(
        tools.vlog.path, ["salvage", damaged, root + "/salvaged", "--json"])
      let intact = copies.values.filter { ranges in
        ranges.contains { !$0.contains { $0.contains(offset) } }
      }.count
      var recovered = -1
      if salvageStatus >= 128 {
        crashedBy.append("salvage (signal \(salvageStatus - 128))")
      } else if salvageStatus == 0,
        // Output that is not the JSON it prints counts as nothing recovered: a failure below.
        let json = try? JSONSerialization.jsonObject(with: Data(salvageOutput.utf8))
          as? [String: Any]
      {
        recovered = json["events"] as? Int ?? -1
      }
      salvaged.intact += intact
      salvaged.recovered += max(0, min(recovered, intact))
      if crashedBy.isEmpty, recovered < intact {
        failures.append(
          "trial \(trial): \(aim.rawValue) at \(offset): salvage recovered \(recovered) of "
            + "\(intact) intact events (status \(salvageStatus)) \(salvageErrors)")
      }
      if !crashedBy.isEmpty {
        outcome = .crashed
      } else if outcome == .harmless, try Self.contents(of: damaged, tools: tools) != reference {
        outcome = .missed
      }
      counts[aim, default: [:]][outcome, default: 0] += 1
      let line = "trial \(trial): \(aim.rawValue) at \(offset): \(outcome.rawValue)"
      if outcome == .crashed || outcome == .missed {
        failures.append(
          line + (crashedBy.isEmpty ? "" : " by " + crashedBy.joined(separator: ", ")))
      }
      if narrate { print(line) }
    }
    let elapsed = ContinuousClock.now - start
    print("a store of \(events) events, \(file.count / Self.pageSize) pages; \(trials) flips:")
    for aim in Aim.allCases {
      let outcomes = counts[aim, default: [:]]
      print(
        "  \(aim.rawValue): "
          + [Outcome.detected, .harmless, .crashed, .missed].map {
            "\(outcomes[$0, default: 0]) \($0.rawValue)"
          }.joined(separator: ", "))
    }
    let total = { (outcome: Outcome) in counts.values.map { $0[outcome, default: 0] }.reduce(0, +) }
    print(
      "total: \(total(.detected)) detected, \(total(.harmless)) harmless, \(total(.crashed)) "
        + "crashed, \(total(.missed)) missed, in \(elapsed.components.seconds) s")
    print(
      "salvage: \(salvaged.recovered) of \(salvaged.intact) events with an intact record "
        + "recovered, over \(trials) flips")
    for failure in failures { print("FAIL " + failure) }
    if !failures.isEmpty { throw ExitCode.failure }
  }

  /// A store of `notes` notes with texts, tags and some archived, closed; its event count.
  static func makeStore(at path: String, notes: Int) throws -> Int {
    let store = try NoteStore.open(at: path, options: .init(durability: .noSync))
    defer { store.close() }
    for batch in stride(from: 0, to: notes, by: 100) {
      try store.write { changes in
        for index in batch..<min(notes, batch + 100) {
          let note = changes.createNote(
            text: "note \(index): " + String(repeating: "x", count: index % 200))
          if index % 3 == 0 { changes.setTags(["tag\(index % 17)"], of: note) }
          if index % 5 == 0 { changes.setArchived(true, of: note) }
        }
      }
    }
    return try store.eventCount()
  }

  /// Each log record's copies in the file (the current one, and older ones on freed pages)
  /// whose checksum holds, by sequence number: the bytes of each copy's node and value.
  static func recordCopies(_ file: [UInt8]) -> [UInt64: [[Range<Int>]]] {
    var copies: [UInt64: [[Range<Int>]]] = [:]
    file.withUnsafeBytes { bytes in
      LeafScan.forEachNode(in: bytes) { node in
        let key = UnsafeRawBufferPointer(rebasing: bytes[node.key])
        guard key.count == 8, !node.isDatabaseRecord,
          let sequence = BigEndian.read(UInt64.self, from: key),
          (try? LogRecord.event(
            in: UnsafeRawBufferPointer(rebasing: bytes[node.value]), sequence: sequence)) != nil
        else { return }
        copies[sequence, default: []].append([node.bytes, node.value])
      }
    }
    return copies
  }

  /// What a store holds, as `vlog` reads it: its export and its notes, with their statuses.
  static func contents(of path: String, tools: Tools) throws -> String {
    var contents = ""
    for command in [["export"], ["notes", "--json", "--limit", "100000"]] {
      let (status, output, _) = try ChildProcess.run(tools.vlog.path, command + ["--store", path])
      contents += "\(status)\n" + output
    }
    return contents
  }

  /// The exit status of `vlog` with `arguments`, 128 + the signal that ended it.
  static func status(_ tools: Tools, _ arguments: [String]) throws -> Int32 {
    try ChildProcess.run(tools.vlog.path, arguments).status
  }

  /// An offset to damage: anywhere, or within a part of a page LMDB reads as structure.
  static func offset(
    aiming aim: Aim, in file: [UInt8], using generator: inout SeededGenerator
  ) -> Int? {
    let pageCount = file.count / pageSize
    func u16(_ offset: Int) -> Int { Int(file[offset]) | Int(file[offset + 1]) << 8 }
    func pages(ofKind kind: UInt8) -> [Int] {
      (2..<pageCount).filter {
        file[$0 * pageSize + 10] & 0x07 == kind && file[$0 * pageSize + 11] == 0
      }
    }
    switch aim {
    case .anywhere:
      return Int.random(in: 0..<file.count, using: &generator)
    case .pageHeader:
      return Int.random(in: 0..<pageCount, using: &generator) * pageSize
        + Int.random(in: 0..<16, using: &generator)
    case .nodePointer, .nodeHeader, .branchKey:
      let candidates = pages(
        ofKind: aim == .branchKey ? 1 : (Bool.random(using: &generator) ? 1 : 2))
      guard let page = candidates.randomElement(using: &generator) else { return nil }
      let base = page * pageSize
      let count = (u16(base + 12) - 16) / 2
      guard count > 0 else { return nil }
      let index = Int.random(in: 0..<count, using: &generator)
      let pointer = base + 16 + 2 * index
      if aim == .nodePointer { return pointer + Int.random(in: 0..<2, using: &generator) }
      let node = base + u16(pointer)
      guard node + 8 <= base + pageSize else { return nil }
      if aim == .nodeHeader { return node + Int.random(in: 0..<8, using: &generator) }
      let keySize = u16(node + 6)
      guard keySize > 0, node + 8 + keySize <= base + pageSize else { return nil }
      return node + 8 + Int.random(in: 0..<keySize, using: &generator)
    }
  }
}
