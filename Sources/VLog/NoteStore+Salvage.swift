internal import Crypto
internal import Foundation
internal import LMDB

/// What ``NoteStore/salvage(from:to:options:)`` recovered from a damaged store, and what it
/// could not.
public struct SalvageReport: Sendable, Hashable, CustomStringConvertible {
  /// The damaged store's replica id, kept by the new store so that this device's events not
  /// yet synced stay its own; nil if no copy of it was found (the new store then has a new
  /// one).
  public var replicaID: ReplicaID?
  /// The account the damaged store belonged to, kept by the new store; nil if it belonged to
  /// none, or if no copy of the record was found.
  public var account: AccountBinding?
  /// Events recovered and written to the new store.
  public var events = 0
  /// Of them, this device's own: in the new store's outbox, pushed again at the next sync (a
  /// server skips those it has).
  public var pending = 0
  /// The highest sequence number found in the damaged log.
  public var highestSequence: UInt64 = 0
  /// How many events the damaged log counted, if its database record was found: events past
  /// ``highestSequence`` are lost too.
  public var loggedEvents: UInt64?
  /// Sequence numbers up to ``highestSequence`` with no intact record: events lost.
  public var missing: [ClosedRange<UInt64>] = []
  /// Attachments' bytes recovered.
  public var blobs = 0
  /// Attachments whose bytes were not found: a sync downloads them, if the server has them.
  public var missingBlobs = 0

  /// How many events are known lost: the missing sequence numbers, and those past the
  /// highest found that the log counted.
  public var lostEvents: UInt64 {
    let gaps = missing.reduce(UInt64(0)) { $0 + ($1.upperBound - $1.lowerBound + 1) }
    let past = (loggedEvents ?? 0) > highestSequence ? loggedEvents! - highestSequence : 0
    return gaps + past
  }

  /// Creates an empty report.
  public init() {}

  /// `5067 events recovered (12 of this device's own, to push again); lost: 3 events (…)`.
  public var description: String {
    var text = "\(events) events recovered (\(pending) of this device's own, to push again)"
    if lostEvents == 0 {
      text += "; none lost"
    } else {
      let ranges = missing.prefix(10).map {
        $0.lowerBound == $0.upperBound ? "\($0.lowerBound)" : "\($0.lowerBound)–\($0.upperBound)"
      }
      text += "; lost: \(lostEvents) events"
      if !ranges.isEmpty {
        text += " (sequence numbers \(ranges.joined(separator: ", "))"
        text += missing.count > 10 ? ", …)" : ")"
      }
      if let loggedEvents, loggedEvents > highestSequence {
        text += ", the log counted \(loggedEvents) and the last found is \(highestSequence)"
      }
    }
    text += "; \(blobs) attachments' bytes recovered, \(missingBlobs) missing"
    return text
  }
}

/// What a damaged store's file still holds, found by LMDB's `LeafScan` without trusting its
/// B-trees: each log record whose checksum holds, and the store's replica id and account.
/// ``NoteStore/salvage(from:to:options:)`` writes a new store from it.
public struct SalvagedLog: Sendable {
  /// The events found, in log order.
  public private(set) var events: [Event] = []
  /// The sequence numbers found: each event's, from the event index if an entry for it was
  /// found (a damaged log key does not move the event), else from its log key.
  public private(set) var sequences: [UInt64] = []
  /// The store's replica id, if found.
  public private(set) var replica: ReplicaID?
  /// The account record, if found.
  public private(set) var account: AccountBinding?
  /// The log's entry count, from the database record the newest meta page leads to.
  public private(set) var loggedEvents: UInt64?
  /// Records whose checksum held but which are not valid events.
  public private(set) var invalid = 0

  /// Reads a data file's bytes.
  ///
  /// A file holds older versions of rewritten records on pages LMDB has freed. Of versions of
  /// one event (one stamp), the redacted one wins: a redaction is never undone. Of events at
  /// one sequence number with the same change and different stamps, this replica's outbox
  /// events given new stamps, the earliest stamp wins: a new stamp is only ever earlier.
  public init(file: UnsafeRawBufferPointer) {
    var found: [(key: UInt64, event: Event)] = []
    var indexed: [Stamp: UInt64] = [:]
    var replicas: [ReplicaID: Int] = [:]
    var accounts: [AccountBinding: Int] = [:]
    let mainRoot = LeafScan.mainTreeRoot(in: file)
    LeafScan.forEachNode(in: file) { node in
      let key = UnsafeRawBufferPointer(rebasing: file[node.key])
      let value = UnsafeRawBufferPointer(rebasing: file[node.value])
      if node.isDatabaseRecord {
        if node.page == mainRoot, key.elementsEqual("log".utf8), value.count == 48 {
          loggedEvents = value.loadUnaligned(fromByteOffset: 32, as: UInt64.self).littleEndian
        }
        return
      }
      switch key.count {
      case 8:
        // Anything with an 8-byte key may be a log record: one whose checksum fails is damage
        // or another database's entry, and is passed over.
        guard let sequence = BigEndian.read(UInt64.self, from: key),
          value.count <= LogRecord.maximumSize,
          let bytes = try? LogRecord.event(in: value, sequence: sequence)
        else { return }
        // A record whose checksum holds was written as it reads; one that does not decode or
        // validate is counted, not kept.
        guard let event = try? EventCodec.decode(bytes), (try? event.validate()) != nil else {
          invalid += 1
          return
        }
        found.append((sequence, event))
      case Stamp.byteCount where value.count == 8:
        // An event index entry: the stamp's sequence number.
        if let sequence = BigEndian.read(UInt64.self, from: value), sequence > 0 {
          indexed[Stamp(bytes: key)] = sequence
        }
      case 7 where key.elementsEqual(Keys.Meta.replica) && value.count == 16:
        replicas[ReplicaID(Identifier(bytes: value)), default: 0] += 1
      case 7 where key.elementsEqual(Keys.Meta.account):
        // A malformed copy is damage; another copy of the record may be whole.
        if let account = try? AccountBinding(decoding: Array(value)) {
          accounts[account, default: 0] += 1
        }
      default:
        break
      }
    }
    // One version per stamp, at its sequence number: the log key and the event index agree,
    // or one of them is damaged. Neither has a checksum. A log holds every number from 1 to
    // its last, so a damaged number is either past the log's end or another event's: of the
    // two, the one that is neither.
    var keyCounts: [UInt64: Int] = [:]
    for (key, _) in found { keyCounts[key, default: 0] += 1 }
    let last =
      loggedEvents
      ?? found.lazy.filter { indexed[$0.event.stamp] == $0.key }.map(\.key).max() ?? .max
    func sequence(key: UInt64, indexed: UInt64?) -> UInt64 {
      guard let indexed, indexed != key else { return key }
      let plausible = [indexed, key].filter { (1...max(last, 1)).contains($0) }
      // A key is its own record's; a number in the index, no record's.
      let free = plausible.filter { keyCounts[$0, default: 0] == ($0 == key ? 1 : 0) }
      return free.first ?? plausible.first ?? key
    }
    var byStamp: [Stamp: (sequence: UInt64, event: Event)] = [:]
    for (key, event) in found {
      let sequence = sequence(key: key, indexed: indexed[event.stamp])
      if let kept = byStamp[event.stamp], kept.event.redaction != nil || event.redaction == nil {
        continue
      }
      byStamp[event.stamp] = (sequence, event)
    }
    // One event per sequence number and change: the earliest stamp.
    var chosen: [UInt64: [Event]] = [:]
    for (sequence, event) in byStamp.values.sorted(by: { $0.event.stamp < $1.event.stamp }) {
      let same = chosen[sequence]?.contains {
        $0.change == event.change && $0.stamp.replica == event.stamp.replica
      }
      if same != true { chosen[sequence, default: []].append(event) }
    }
    for sequence in chosen.keys.sorted() {
      for event in chosen[sequence] ?? [] {
        events.append(event)
        sequences.append(sequence)
      }
    }
    replica = replicas.max { $0.value < $1.value }?.key
    account = accounts.max { $0.value < $1.value }?.key
  }
}

extension NoteStore {
  /// Writes a new store at `path` from what a damaged store's file still holds, without
  /// trusting its B-trees: every log record whose checksum holds, the attachments' bytes whose
  /// hash holds, its replica id and its account. Use it when ``structureFaults(at:)`` reports
  /// damage and there is no backup.
  ///
  /// The new store keeps the damaged one's replica id and account, so that this device's own
  /// events are its own in the new store too: they are all put in its outbox, and the next
  /// sync pushes them again (a server skips those it has). Its projections are built from the
  /// recovered events. Events with no intact record are lost here, and are listed in the
  /// report; a new sync state (cursor 0) gets every event the server has back, and a repair
  /// pushes what the server lacks.
  ///
  /// The damaged store is only read.
  ///
  /// - Parameters:
  ///   - damaged: The damaged store's directory.
  ///   - path: The new store's directory: it must not exist, or be empty.
  ///   - options: The new store's options.
  /// - Returns: What was recovered and what was lost.
  /// - Throws: ``VLogError/Code/invalidValue`` if `path` holds anything, or if `damaged` has
  ///   no data file; ``VLogError/Code/storage`` if a file cannot be read or written.
  public static func salvage(
    from damaged: String, to path: String, options: Options = Options()
  ) throws -> SalvageReport {
    let files = FileManager.default
    guard files.fileExists(atPath: damaged + "/data.mdb") else {
      throw VLogError(.invalidValue, "'\(damaged)' holds no store (no data.mdb)")
    }
    // A directory that cannot be listed does not exist yet (or is not one: creating it fails
    // below, with the reason).
    if let entries = try? files.contentsOfDirectory(atPath: path), !entries.isEmpty {
      throw VLogError(
        .invalidValue, "'\(path)' is not empty: salvage writes a new store, into a new directory")
    }
    let found = try VLogError.wrapping {
      try LeafScan.withFile(directory: damaged) { SalvagedLog(file: $0) }
    }
    var report = SalvageReport()
    report.replicaID = found.replica
    report.account = found.account
    report.loggedEvents = found.loggedEvents
    report.highestSequence = found.sequences.last ?? 0
    var expected: UInt64 = 1
    for sequence in found.sequences where sequence >= expected {
      if sequence > expected { report.missing.append(expected...(sequence - 1)) }
      expected = sequence + 1
    }

    // The new store, with the old replica id: a new store takes its id from the first
    // identifier its dependencies make.
    var opening = options
    if let replica = found.replica {
      let dependencies = options.dependencies
      opening.dependencies = Dependencies(
        now: dependencies.now, makeIdentifier: { replica.identifier })
    }
    try files.createDirectory(atPath: path, withIntermediateDirectories: true)
    let store = try NoteStore.open(at: path, options: opening)
    defer { store.close() }
    if let account = found.account { try store.bind(to: account) }

    let ordered = found.events
    for start in stride(from: 0, to: ordered.count, by: 5000) {
      let chunk = ordered[start..<min(start + 5000, ordered.count)]
      let (appended, pending) = try VLogError.wrapping {
        try store.environment.write { transaction throws -> (Int, Int) in
          var session = try WriteSession(store: store, in: transaction)
          var pending = 0
          for event in chunk {
            guard try !store.eventLog.contains(event.stamp, in: transaction) else { continue }
            let local = event.stamp.replica == store.replicaID
            try session.append(event, local: local, in: transaction)
            if local { pending += 1 }
          }
          _ = try session.finish(source: .sync, in: transaction)
          return (session.log.appended, pending)
        }
      }
      report.events += appended
      report.pending += pending
    }

    // The bytes of the attachments the new store shows, where their hash holds.
    var wanted = Set(try store.missingBlobs().map(\.bytes))
    report.blobs = try VLogError.wrapping {
      try LeafScan.withFile(directory: damaged) { file throws -> Int in
        var recovered = 0
        try LeafScan.forEachNode(in: file) { node in
          guard node.key.count == 32, !node.isDatabaseRecord else { return }
          let key = Array(file[node.key])
          guard wanted.contains(key), let hash = BlobHash(bytes: key) else { return }
          let value = UnsafeRawBufferPointer(rebasing: file[node.value])
          guard Array(SHA256.hash(data: value)) == key else { return }
          try store.storeBlob(Array(value), hash: hash)
          wanted.remove(key)
          recovered += 1
        }
        return recovered
      }
    }
    report.missingBlobs = wanted.count
    return report
  }
}
