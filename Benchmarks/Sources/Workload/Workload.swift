// The realistic notes-app workload the peer comparison runs on every implementation: notes with
// texts of a few hundred bytes to a few KB, edits mostly to text, archive flips, sort-date
// changes, five tags, some attachments and a few deletes, all generated from a seed.

public import Foundation
public import VLog
internal import VLogTesting

/// One user change, naming notes by their index in the workload (each implementation maps
/// indexes to its own ids).
public enum Operation: Sendable {
  case create(note: Int, text: String)
  case setText(note: Int, text: String)
  case setArchived(note: Int, Bool)
  case setSortDate(note: Int, Date)
  case setTags(note: Int, [String])
  case addAttachment(note: Int, bytes: [UInt8], width: Int, height: Int)
  case delete(note: Int)
}

/// A deterministic workload of about `size` events.
public struct Workload: Sendable {
  /// The tag names notes get.
  public static let tagNames = ["Work", "Home", "Ideas", "Travel", "Paris"]
  /// The word that about one text in fifty contains, for the search figure.
  public static let rareWord = "zephyr"
  /// Operations per transaction in the batched figures.
  public static let batchSize = 1_000

  /// The number of notes: a tenth of the size, at most 10,000.
  public let notes: Int
  /// The operations, notes created first.
  public let operations: [Operation]
  /// The seed it was generated from.
  public let seed: UInt64
  /// The notes that are not deleted at the end, by index.
  public let liveNotes: [Int]

  /// Applies every operation to `store` as user changes, ``batchSize`` to a transaction.
  public func apply(to store: some Backend) throws {
    var offset = 0
    while offset < operations.count {
      let end = min(offset + Self.batchSize, operations.count)
      try store.apply(operations[offset..<end])
      offset = end
    }
  }

  /// Generates a workload of about `size` operations on `notes` notes (by default a tenth of
  /// the size, at most 10,000).
  public init(size: Int, seed: UInt64 = 42, notes: Int? = nil) {
    var random = SeededGenerator(seed: seed)
    let notes = notes ?? max(10, min(10_000, size / 10))
    let texts = Self.texts(using: &random)
    var operations: [Operation] = []
    operations.reserveCapacity(size)
    for note in 0..<notes {
      operations.append(.create(note: note, text: texts[Int(random.next() % UInt64(texts.count))]))
    }
    var deleted = Set<Int>()
    var attachments: [Int: Int] = [:]
    while operations.count < size {
      // Edits favour recent notes: the square of a uniform number leans towards low indexes.
      let u = Double(random.next() % 1_000_000) / 1_000_000
      var note = Int(u * u * Double(notes))
      while deleted.contains(note) { note = (note + 1) % notes }
      let roll = random.next() % 1000
      switch roll {
      case 0..<780:
        operations.append(
          .setText(note: note, text: texts[Int(random.next() % UInt64(texts.count))]))
      case 780..<850:
        operations.append(.setArchived(note: note, random.next() % 2 == 0))
      case 850..<900:
        let milliseconds = 1_700_000_000_000 + Int64(random.next() % 100_000_000_000)
        operations.append(.setSortDate(note: note, date(milliseconds: milliseconds)))
      case 900..<950:
        let count = Int(random.next() % 4)
        let tags = (0..<count).map { _ in Self.tagNames[Int(random.next() % 5)] }
        operations.append(.setTags(note: note, tags))
      case 950..<980 where attachments[note, default: 0] < 20:
        attachments[note, default: 0] += 1
        let bytes = (0..<(512 + Int(random.next() % 1536))).map { _ in
          UInt8(truncatingIfNeeded: random.next())
        }
        operations.append(.addAttachment(note: note, bytes: bytes, width: 640, height: 480))
      case 980..<982 where deleted.count < notes / 20:
        deleted.insert(note)
        operations.append(.delete(note: note))
      default:
        operations.append(
          .setText(note: note, text: texts[Int(random.next() % UInt64(texts.count))]))
      }
    }
    self.notes = notes
    self.operations = operations
    self.seed = seed
    liveNotes = (0..<notes).filter { !deleted.contains($0) }
  }

  /// 512 texts: most a few hundred bytes, some a few KB, one in fifty with the rare word.
  static func texts(using random: inout SeededGenerator) -> [String] {
    let words = [
      "buy", "bread", "milk", "meeting", "notes", "call", "plan", "trip", "ideas", "list",
      "garden", "book", "review", "draft", "budget", "project", "weekend", "train", "hotel",
      "recipe", "sketch", "music", "letter", "photo", "paint", "river", "mountain", "coffee",
    ]
    return (0..<512).map { index in
      let roll = random.next() % 100
      let length =
        roll < 70
        ? 200 + Int(random.next() % 600)
        : roll < 95
          ? 800 + Int(random.next() % 2200)
          : 3000 + Int(random.next() % 3000)
      var text = "Note \(index): "
      if index % 50 == 7 { text += Self.rareWord + " " }
      while text.utf8.count < length {
        text += words[Int(random.next() % UInt64(words.count))]
        text += random.next() % 12 == 0 ? ".\n" : " "
      }
      return text
    }
  }

  /// `count` events from another replica: edits to the notes `ids` names, stamped an hour after
  /// `now` so that they win, in the shape a sync page has.
  public static func remoteEvents(
    count: Int, ids: [NoteID], now: Date, seed: UInt64 = 7
  ) -> [Event] {
    var random = SeededGenerator(seed: seed)
    let replica = ReplicaID(Identifier(high: 0xFEED, low: seed))
    let start = UInt64(milliseconds(now)) + 3_600_000
    let texts = Self.texts(using: &random)
    // Each edit names the one before it on its note; the first names none it knows (as from a
    // device of an older version), so the remote edits replace the local texts.
    var previous: [NoteID: Stamp] = [:]
    return (0..<count).map { index in
      let stamp = Stamp(
        time: HybridTime(milliseconds: start + UInt64(index / 100), counter: UInt16(index % 100)),
        replica: replica)
      let note = ids[Int(random.next() % UInt64(ids.count))]
      let change: Change
      switch random.next() % 10 {
      case 0: change = .setArchived(note, random.next() % 2 == 0)
      case 1: change = .sortDateSet(note, sortDate: date(milliseconds: 1_750_000_000_000))
      case 2: change = .tagsSet(note, tags: [tagNames[Int(random.next() % 5)]])
      default:
        let replaced = previous.updateValue(stamp, forKey: note).map { [$0] as ReplacedTexts }
        change = .textSet(
          note, text: texts[Int(random.next() % UInt64(texts.count))], replacing: replaced)
      }
      return Event(stamp: stamp, change: change)
    }
  }
}

extension Change {
  fileprivate static func setArchived(_ note: NoteID, _ archived: Bool) -> Change {
    .archivedSet(note, archived: archived)
  }
}

/// Turns operations into events for the implementations that stamp their own changes (raw LMDB
/// and SQLite): the same events, with the same encoding, that VLog makes.
public struct EventMaker {
  /// The replica the events are stamped with.
  public let replica: ReplicaID
  private var latest = HybridTime.zero
  private var nextAttachment: UInt64 = 0
  /// Each note's text, by stamp: what VLog's next text change names as replaced.
  private var texts: [Int: Stamp] = [:]

  /// Creates a value.
  public init(replica: ReplicaID) { self.replica = replica }

  /// The id of the `index`th note.
  public static func noteID(_ index: Int) -> NoteID {
    NoteID(Identifier(high: 0x5EED_0000_0000_0001, low: UInt64(index)))
  }

  /// A text change naming the note's text before it, as VLog's does.
  private mutating func text(_ note: Int, _ text: String) -> Event {
    let stamp = stamp()
    let replaced: ReplacedTexts = texts.updateValue(stamp, forKey: note).map { [$0] } ?? []
    return Event(stamp: stamp, change: .textSet(Self.noteID(note), text: text, replacing: replaced))
  }

  private mutating func stamp() -> Stamp {
    let wall = UInt64(milliseconds(Date()))
    latest =
      wall > latest.milliseconds
      ? HybridTime(milliseconds: wall, counter: 0)
      : HybridTime(rawValue: latest.rawValue + 1)
    return Stamp(time: latest, replica: replica)
  }

  /// The events of one operation, and the attachment bytes it stores.
  public mutating func events(for operation: Operation) -> (
    events: [Event], blob: (BlobHash, [UInt8])?
  ) {
    switch operation {
    case .create(let note, let text):
      let id = Self.noteID(note)
      return (
        [
          Event(
            stamp: stamp(),
            change: .noteCreated(id, creationDate: date(milliseconds: Int64(latest.milliseconds)))),
          self.text(note, text),
        ], nil
      )
    case .setText(let note, let text):
      return ([self.text(note, text)], nil)
    case .setArchived(let note, let archived):
      return (
        [Event(stamp: stamp(), change: .archivedSet(Self.noteID(note), archived: archived))], nil
      )
    case .setSortDate(let note, let date):
      return ([Event(stamp: stamp(), change: .sortDateSet(Self.noteID(note), sortDate: date))], nil)
    case .setTags(let note, let tags):
      return ([Event(stamp: stamp(), change: .tagsSet(Self.noteID(note), tags: tags))], nil)
    case .addAttachment(let note, let bytes, let width, let height):
      // As VLog adds one: the add alone puts it on its note (each attachment merges on its
      // own), no whole list.
      nextAttachment += 1
      let id = AttachmentID(Identifier(high: 0xA77A, low: nextAttachment))
      let hash = blobHash(bytes)
      let attachment = Attachment(
        id: id, noteID: Self.noteID(note), mimeType: "image/jpeg", width: width, height: height,
        blobHash: hash, byteCount: bytes.count)
      return ([Event(stamp: stamp(), change: .attachmentAdded(attachment))], (hash, bytes))
    case .delete(let note):
      return ([Event(stamp: stamp(), change: .noteDeleted(Self.noteID(note)))], nil)
    }
  }
}

/// The workload's blob hash: not a real SHA-256 (the figures measure storage, and VLog's own
/// path hashes its attachments itself), but 32 bytes that differ per content.
func blobHash(_ bytes: [UInt8]) -> BlobHash {
  var a: UInt64 = 0xCBF2_9CE4_8422_2325
  var b: UInt64 = 0x1000_0000_01B3
  for byte in bytes {
    a = (a ^ UInt64(byte)) &* 0x1000_0000_01B3
    b = (b &+ UInt64(byte)) &* 0x9E37_79B9_7F4A_7C15
  }
  var out: [UInt8] = []
  for value in [a, b, a ^ b, a &+ b] { withUnsafeBytes(of: value.bigEndian) { out += $0 } }
  return BlobHash(bytes: out)!
}

/// Milliseconds since 1970, rounded down (VLog's dates have millisecond precision).
func milliseconds(_ date: Date) -> Int64 {
  Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
}

/// The date of a number of milliseconds since 1970.
func date(milliseconds: Int64) -> Date {
  Date(timeIntervalSince1970: Double(milliseconds) / 1000)
}
