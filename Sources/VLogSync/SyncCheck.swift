public import VLog

/// What a device and its server do not share, found without changing either: the answer to
/// "both say they are in sync, but which note differs?" (``SyncAccount/checkSync()``).
///
/// Equal event-set digests mean both hold the same events, and then ``differences`` is empty.
/// Otherwise the check compares the digest in buckets, as a sync's repair does, and names each
/// event one side holds and the other lacks, the note it is about, and what the next sync does
/// about it.
public struct SyncCheck: Sendable, Hashable {
  /// The store's event-set digest, with the ids of the events it quarantined.
  public var deviceDigest: EventSetDigest
  /// The server's event-set digest.
  public var serverDigest: EventSetDigest
  /// Each event one side holds and the other lacks, in id order.
  public var differences: [SyncDifference]
  /// False when ``differences`` names some of what differs, not all: more differ on a side
  /// than ``SyncAccount/checkedDifferencesLimit``, or the server stopped listing the buckets
  /// that differ before the last.
  public var isComplete: Bool
  /// The events the device refused and set aside (``QuarantinedEvent``): the server holds
  /// them, and ``deviceDigest`` counts them as held, so that they are no difference.
  public var quarantined: [QuarantinedEvent]

  /// Creates a check's outcome.
  public init(
    deviceDigest: EventSetDigest, serverDigest: EventSetDigest,
    differences: [SyncDifference], isComplete: Bool, quarantined: [QuarantinedEvent] = []
  ) {
    self.deviceDigest = deviceDigest
    self.serverDigest = serverDigest
    self.differences = differences
    self.isComplete = isComplete
    self.quarantined = quarantined
  }

  /// Whether the store and the server hold exactly the same events.
  public var inSync: Bool { deviceDigest == serverDigest }

  /// The notes whose events differ, each once, in the order of their first difference.
  public var notes: [NoteID] {
    var seen = Set<NoteID>()
    return differences.compactMap { $0.note }.filter { seen.insert($0).inserted }
  }

  /// Whether the next sync brings both sides to the same events: every difference is one it
  /// repairs, and the check saw them all.
  public var nextSyncRepairs: Bool {
    isComplete && differences.allSatisfy(\.repair.isNextSync)
  }
}

/// One event that a device holds and its server lacks, or the other way round.
public struct SyncDifference: Sendable, Hashable {
  /// Which side lacks the event.
  public enum Side: String, Sendable, Hashable, Codable {
    /// The device holds it; the server does not.
    case missingOnServer
    /// The server holds it; the device does not.
    case missingOnDevice
  }

  /// What a sync does about a difference.
  public enum Repair: Sendable, Hashable {
    /// A change made on this device that the server has not acknowledged: the next sync
    /// pushes it from the outbox.
    case pushFromOutbox
    /// An event the device holds outside its outbox (imported, or written by another device
    /// and taken from a file): the next sync finds it by its digest and pushes it.
    case push
    /// A change made on this device, stamped further ahead of the server's clock than it takes
    /// (the device's clock was ahead): the next sync stamps it again by the server's clock and
    /// pushes it.
    case restampAndPush
    /// Stamped further ahead of the server's clock than it takes: a sync pushes it once the
    /// server's clock has come close enough.
    case pushLater
    /// The next sync fetches it.
    case fetch
    /// No sync repairs it, for the reason given: for example an event no device of an
    /// encrypted account vouched for, which this device refuses.
    case never(reason: String)

    /// Whether the next sync repairs the difference.
    public var isNextSync: Bool {
      switch self {
      case .pushFromOutbox, .restampAndPush, .push, .fetch: true
      case .pushLater, .never: false
      }
    }
  }

  /// The event's id.
  public var id: Stamp
  /// Which side lacks it.
  public var side: Side
  /// The kind of change, when the event could be read (a server's event the device could not
  /// fetch or open has none).
  public var kind: EventKind?
  /// The note the change is about, or the note an attachment belongs to; nil for a tag's
  /// rename or deletion, and when the event could not be read.
  public var note: NoteID?
  /// What a sync does about it.
  public var repair: Repair

  /// Creates a difference.
  public init(id: Stamp, side: Side, kind: EventKind?, note: NoteID?, repair: Repair) {
    self.id = id
    self.side = side
    self.kind = kind
    self.note = note
    self.repair = repair
  }
}
