internal import Foundation
internal import LMDB

/// The text search index: for each trigram of the folded texts, the notes whose text has it.
///
/// Search matches ignoring case and diacritics (``TextMatcher``). The index holds, for every
/// note with a text, the set of its ASCII trigrams after folding (letters lowercased; a text
/// with other characters first folded by Foundation, ignoring case and diacritics, so that
/// "Café" indexes "caf" and "afe"). A query whose needle is ASCII and at least three bytes long
/// reads the postings of the needle's trigrams, intersects them, and checks each candidate
/// with the same matcher the scan uses — in timeline order, so the results are exactly the
/// scan's. Other needles scan.
///
/// The index is not kept in the write transaction of each change: writing the trigrams of a
/// kilobyte of text costs hundreds of B-tree updates, more than the change itself. It is
/// brought up to date lazily, by the first search after changes (or by
/// ``NoteStore/updateSearchIndex()``), from the events appended since it was last current:
/// a note edited a hundred times between two searches is indexed once. Like the projections
/// it is derived from the log, dropped by a rebuild, and not part of the state digest (which
/// it cannot change).
///
/// | database | key | value |
/// |---|---|---|
/// | `searchPostings` | trigram (3) + chunk (4) | the ordinals in the chunk: sorted 16-bit offsets, or a bitmap |
/// | `searchNotes` | note id (16) | ordinal (4) + text stamp (24) + trigrams (3 each, sorted) |
/// | `searchNotes` | 0x00 | the log sequence it is current through (8) + the next ordinal (4) |
/// | `searchOrdinals` | ordinal (4) | note id (16) |
///
/// Notes get dense ordinals so that a posting list is a few bytes per note; a chunk covers
/// 8,192 ordinals.
struct SearchIndex {
  let schema: Schema

  static let chunkSize: UInt32 = 8192
  static let stateKey: [UInt8] = [0]

  // MARK: State

  struct State: Equatable {
    var through: UInt64 = 0
    var nextOrdinal: UInt32 = 0
  }

  func state(in transaction: borrowing some Transaction & ~Copyable) throws -> State {
    try transaction.withValue(forKey: Self.stateKey, in: schema.searchNotes) {
      value throws(VLogError) -> State in
      guard let value else { return State() }
      guard value.count == 12, let through = BigEndian.read(UInt64.self, from: value),
        let next = BigEndian.read(UInt32.self, from: value, at: 8)
      else { throw VLogError(.corruptStore, "the search index's state is \(value.count) bytes") }
      return State(through: through, nextOrdinal: next)
    }
  }

  /// Whether events were appended since the index was last brought up to date.
  func isBehind(in transaction: borrowing some Transaction & ~Copyable) throws -> Bool {
    try state(in: transaction).through < projectedThrough(in: transaction)
  }

  /// The last event the note records include: the index follows them, not the log, while a
  /// deferred ingest leaves them behind it (``ProjectionLag``).
  private func projectedThrough(in transaction: borrowing some Transaction & ~Copyable) throws
    -> UInt64
  {
    try ProjectionLag.projectedThrough(schema: schema, in: transaction)
      ?? schema.eventLog.lastSequence(in: transaction)
  }

  // MARK: Updating

  /// What the index holds for one note.
  struct Entry {
    var ordinal: UInt32
    var textStamp: Stamp
    var trigrams: [UInt32]
  }

  func entry(_ note: NoteID, in transaction: borrowing some Transaction & ~Copyable) throws
    -> Entry?
  {
    try note.identifier.withKey { key in
      try transaction.withValue(forKey: key, in: schema.searchNotes) {
        value throws(VLogError) -> Entry? in
        guard let value else { return nil }
        let header = 4 + Stamp.byteCount
        guard value.count >= header, (value.count - header) % 3 == 0,
          let ordinal = BigEndian.read(UInt32.self, from: value)
        else {
          throw VLogError(.corruptStore, "note \(note)'s search entry is \(value.count) bytes")
        }
        let stamp = Stamp(bytes: UnsafeRawBufferPointer(rebasing: value[4..<header]))
        var trigrams: [UInt32] = []
        trigrams.reserveCapacity((value.count - header) / 3)
        var offset = header
        while offset < value.count {
          trigrams.append(
            UInt32(value[offset]) << 16 | UInt32(value[offset + 1]) << 8
              | UInt32(value[offset + 2]))
          offset += 3
        }
        return Entry(ordinal: ordinal, textStamp: stamp, trigrams: trigrams)
      }
    }
  }

  /// Brings the index up to date with the log: reindexes the notes whose text changed, or
  /// that were created or deleted, since it was last current.
  ///
  /// - Returns: The number of notes reindexed.
  @discardableResult
  func update(in transaction: borrowing WriteTransaction) throws -> Int {
    var state = try state(in: transaction)
    let last = try projectedThrough(in: transaction)
    guard state.through < last else { return 0 }
    var notes = Set<NoteID>()
    if state.through == 0 {
      // An empty index (new, or dropped by a rebuild): every note with a record.
      try transaction.forEach(in: schema.notes) { key, _ in
        notes.insert(NoteID(try Identifier.ending(key, in: "notes")))
      }
    } else {
      _ = try schema.eventLog.replay(after: state.through, in: transaction) { logged in
        switch logged.event.change {
        case .textSet(let id, _, _), .noteCreated(let id, _), .noteDeleted(let id):
          notes.insert(id)
        default: break
        }
      }
    }
    var postings = PostingChanges()
    var extractor = SearchTrigrams.Extractor()
    var reindexed = 0
    for note in notes.sorted() {
      let old = try entry(note, in: transaction)
      let record = try schema.noteRecord(note, in: transaction)
      let stamp = record?.textStamp ?? .zero
      if let old, old.textStamp == stamp { continue }
      reindexed += 1
      var trigrams: [UInt32] = []
      if let record, record.textSequence != 0 {
        trigrams = extractor.trigrams(
          of: try schema.eventLog.text(
            at: record.textSequence, stamp: record.textStamp, in: transaction))
      }
      let key = note.identifier.bytes
      guard record != nil else {
        // Deleted: the note leaves the index.
        guard let old else { continue }
        for trigram in old.trigrams { postings.remove(old.ordinal, from: trigram) }
        _ = try transaction.delete(forKey: key, in: schema.searchNotes)
        _ = try transaction.delete(
          forKey: BigEndian.bytes(old.ordinal), in: schema.searchOrdinals)
        continue
      }
      let ordinal: UInt32
      if let old {
        ordinal = old.ordinal
      } else {
        guard state.nextOrdinal < .max else {
          throw VLogError(.invalidValue, "the search index has used every ordinal; rebuild it")
        }
        ordinal = state.nextOrdinal
        state.nextOrdinal += 1
        try transaction.put(key, forKey: BigEndian.bytes(ordinal), in: schema.searchOrdinals)
      }
      let before = old?.trigrams ?? []
      for trigram in sortedDifference(trigrams, minus: before) {
        postings.add(ordinal, to: trigram)
      }
      for trigram in sortedDifference(before, minus: trigrams) {
        postings.remove(ordinal, from: trigram)
      }
      var value = BigEndian.bytes(ordinal)
      value.reserveCapacity(4 + Stamp.byteCount + trigrams.count * 3)
      stamp.append(to: &value)
      for trigram in trigrams {
        value.append(UInt8(truncatingIfNeeded: trigram >> 16))
        value.append(UInt8(truncatingIfNeeded: trigram >> 8))
        value.append(UInt8(truncatingIfNeeded: trigram))
      }
      try transaction.put(value, forKey: key, in: schema.searchNotes)
    }
    try postings.apply(to: schema.searchPostings, in: transaction)
    state.through = last
    var value = BigEndian.bytes(state.through)
    BigEndian.append(state.nextOrdinal, to: &value)
    try transaction.put(value, forKey: Self.stateKey, in: schema.searchNotes)
    return reindexed
  }

  // MARK: Querying

  /// The notes whose posting lists hold every one of `trigrams`: a superset of the notes
  /// whose text contains a needle with those trigrams.
  func candidates(
    _ trigrams: [UInt32], in transaction: borrowing some Transaction & ~Copyable
  ) throws -> [NoteID] {
    var result: [UInt32: [UInt16]]?
    for trigram in trigrams {
      var postings: [UInt32: [UInt16]] = [:]
      let prefix = PostingKey(trigram: trigram, chunk: 0).bytes.prefix(3)
      try transaction.forEach(in: schema.searchPostings, range: .prefix(Array(prefix))) {
        key, value in
        guard key.count == 7, let chunk = BigEndian.read(UInt32.self, from: key, at: 3) else {
          throw VLogError(.corruptStore, "a search posting key is \(key.count) bytes")
        }
        if let result, result[chunk] == nil { return }
        postings[chunk] = try PostingChunk.decode(value)
      }
      if let previous = result {
        var intersection: [UInt32: [UInt16]] = [:]
        for (chunk, offsets) in postings {
          guard let other = previous[chunk] else { continue }
          let common = sortedIntersection(offsets, other)
          if !common.isEmpty { intersection[chunk] = common }
        }
        result = intersection
      } else {
        result = postings
      }
      if result?.isEmpty == true { return [] }
    }
    var notes: [NoteID] = []
    for (chunk, offsets) in result ?? [:] {
      for offset in offsets {
        let ordinal = chunk &* Self.chunkSize &+ UInt32(offset)
        let note = try transaction.withValue(
          forKey: BigEndian.bytes(ordinal), in: schema.searchOrdinals
        ) { value throws(VLogError) -> NoteID? in
          guard let value else { return nil }
          guard value.count == 16 else {
            throw VLogError(.corruptStore, "search ordinal \(ordinal) names \(value.count) bytes")
          }
          return NoteID(Identifier(bytes: value))
        }
        if let note { notes.append(note) }
      }
    }
    return notes
  }
}

/// A posting list's key: the trigram's three bytes and the chunk number.
struct PostingKey: Hashable, Comparable {
  let trigram: UInt32
  let chunk: UInt32

  var bytes: [UInt8] {
    var bytes: [UInt8] = [
      UInt8(truncatingIfNeeded: trigram >> 16), UInt8(truncatingIfNeeded: trigram >> 8),
      UInt8(truncatingIfNeeded: trigram),
    ]
    BigEndian.append(chunk, to: &bytes)
    return bytes
  }

  static func < (a: PostingKey, b: PostingKey) -> Bool {
    (a.trigram, a.chunk) < (b.trigram, b.chunk)
  }
}

/// Ordinals to add to and remove from posting lists, applied with each chunk read and
/// written once, in key order.
struct PostingChanges {
  /// (trigram << 32 | chunk, offset << 1 | added).
  private var changes: [(key: UInt64, change: UInt32)] = []

  mutating func add(_ ordinal: UInt32, to trigram: UInt32) {
    append(ordinal, trigram, added: true)
  }

  mutating func remove(_ ordinal: UInt32, from trigram: UInt32) {
    append(ordinal, trigram, added: false)
  }

  private mutating func append(_ ordinal: UInt32, _ trigram: UInt32, added: Bool) {
    let key = UInt64(trigram) << 32 | UInt64(ordinal / SearchIndex.chunkSize)
    changes.append((key, (ordinal % SearchIndex.chunkSize) << 1 | (added ? 1 : 0)))
  }

  mutating func apply(to database: Database, in transaction: borrowing WriteTransaction) throws {
    changes.sort { ($0.key, $0.change) < ($1.key, $1.change) }
    var start = 0
    var adding: [UInt16] = []
    var removing: [UInt16] = []
    while start < changes.count {
      let key = changes[start].key
      var end = start
      adding.removeAll(keepingCapacity: true)
      removing.removeAll(keepingCapacity: true)
      while end < changes.count, changes[end].key == key {
        let offset = UInt16(truncatingIfNeeded: changes[end].change >> 1)
        if changes[end].change & 1 == 1 { adding.append(offset) } else { removing.append(offset) }
        end += 1
      }
      let bytes = PostingKey(
        trigram: UInt32(truncatingIfNeeded: key >> 32), chunk: UInt32(truncatingIfNeeded: key)
      ).bytes
      let stored = try transaction.withValue(forKey: bytes, in: database) {
        value throws(VLogError) -> [UInt16] in
        guard let value else { return [] }
        return try PostingChunk.decode(value)
      }
      let merged = PostingChunk.merge(stored, adding: adding, removing: removing)
      if merged.isEmpty {
        if !stored.isEmpty { _ = try transaction.delete(forKey: bytes, in: database) }
      } else {
        try transaction.put(PostingChunk.encode(merged), forKey: bytes, in: database)
      }
      start = end
    }
    changes.removeAll()
  }
}

/// The ordinals of one chunk of a posting list: up to 512 as sorted big-endian 16-bit offsets
/// after a 0 byte, more as a bitmap of 8,192 bits after a 1 byte.
enum PostingChunk {
  static let bitmapBytes = Int(SearchIndex.chunkSize / 8)
  static let arrayLimit = 512

  static func encode(_ offsets: [UInt16]) -> [UInt8] {
    if offsets.count <= arrayLimit {
      var bytes: [UInt8] = [0]
      bytes.reserveCapacity(1 + offsets.count * 2)
      for offset in offsets { BigEndian.append(offset, to: &bytes) }
      return bytes
    }
    var bytes = [UInt8](repeating: 0, count: 1 + bitmapBytes)
    bytes[0] = 1
    for offset in offsets { bytes[1 + Int(offset / 8)] |= 1 << (offset % 8) }
    return bytes
  }

  static func decode(_ value: UnsafeRawBufferPointer) throws(VLogError) -> [UInt16] {
    guard let kind = value.first else {
      throw VLogError(.corruptStore, "a search posting is empty")
    }
    switch kind {
    case 0 where value.count % 2 == 1:
      var offsets: [UInt16] = []
      offsets.reserveCapacity(value.count / 2)
      var index = 1
      while index < value.count {
        offsets.append(UInt16(value[index]) << 8 | UInt16(value[index + 1]))
        index += 2
      }
      return offsets
    case 1 where value.count == 1 + bitmapBytes:
      var offsets: [UInt16] = []
      for byteIndex in 0..<bitmapBytes {
        var bits = value[1 + byteIndex]
        while bits != 0 {
          let bit = UInt16(bits.trailingZeroBitCount)
          offsets.append(UInt16(byteIndex) * 8 + bit)
          bits &= bits - 1
        }
      }
      return offsets
    default:
      throw VLogError(.corruptStore, "a search posting of \(value.count) bytes is malformed")
    }
  }

  /// `offsets` with `adding` added and `removing` removed, all three sorted; the result is
  /// sorted and unique.
  static func merge(_ offsets: [UInt16], adding: [UInt16], removing: [UInt16]) -> [UInt16] {
    var result: [UInt16] = []
    result.reserveCapacity(offsets.count + adding.count)
    var i = 0
    var j = 0
    var r = 0
    while i < offsets.count || j < adding.count {
      let next: UInt16
      if j >= adding.count || (i < offsets.count && offsets[i] <= adding[j]) {
        next = offsets[i]
        i += 1
      } else {
        next = adding[j]
        j += 1
      }
      while r < removing.count, removing[r] < next { r += 1 }
      if r < removing.count, removing[r] == next { continue }
      if result.last != next { result.append(next) }
    }
    return result
  }
}

/// The elements of a sorted array that another sorted array lacks.
func sortedDifference(_ a: [UInt32], minus b: [UInt32]) -> [UInt32] {
  var result: [UInt32] = []
  var j = 0
  for value in a {
    while j < b.count, b[j] < value { j += 1 }
    if j < b.count, b[j] == value { continue }
    result.append(value)
  }
  return result
}

/// The elements two sorted arrays share.
func sortedIntersection(_ a: [UInt16], _ b: [UInt16]) -> [UInt16] {
  var result: [UInt16] = []
  var i = 0
  var j = 0
  while i < a.count, j < b.count {
    if a[i] < b[j] {
      i += 1
    } else if a[i] > b[j] {
      j += 1
    } else {
      result.append(a[i])
      i += 1
      j += 1
    }
  }
  return result
}

/// The trigrams search indexes and looks up.
enum SearchTrigrams {
  /// A text's folded ASCII trigrams, sorted and unique, each as three bytes in a `UInt32`.
  static func of(text: String) -> [UInt32] {
    var extractor = Extractor()
    return extractor.trigrams(of: text)
  }

  /// The trigrams of a needle the index can answer: nil unless it is ASCII and at least
  /// three bytes long.
  static func of(needle: String) -> [UInt32]? {
    guard needle.utf8.count >= 3, needle.utf8.allSatisfy({ $0 < 0x80 }) else { return nil }
    let bytes: [UInt32] = needle.utf8.map { UInt32(fold($0)) }
    var codes: [UInt32] = []
    for index in 2..<bytes.count {
      let code: UInt32 = bytes[index - 2] << 16 | bytes[index - 1] << 8 | bytes[index]
      codes.append(code)
    }
    codes.sort()
    var unique: [UInt32] = []
    for code in codes where unique.last != code { unique.append(code) }
    return unique
  }

  @inline(__always)
  static func fold(_ byte: UInt8) -> UInt8 {
    byte &- 0x41 < 26 ? byte | 0x20 : byte
  }

  /// Extracts the trigrams of many texts with one bitmap of the 2²¹ ASCII trigrams to drop
  /// repeats, cleared after each text.
  struct Extractor {
    private var seen = [UInt64](repeating: 0, count: 1 << 15)

    mutating func trigrams(of text: String) -> [UInt32] {
      var codes: [UInt32] = []
      if text.utf8.allSatisfy({ $0 < 0x80 }) {
        collect(text.utf8, into: &codes)
      } else {
        collect(
          text.folding(options: [.caseInsensitive, .diacriticInsensitive], locale: nil).utf8,
          into: &codes)
      }
      for code in codes {
        let bit = Self.bit(code)
        seen[bit >> 6] = 0
      }
      codes.sort()
      return codes
    }

    /// The trigram's bit: seven bits of each byte.
    @inline(__always)
    private static func bit(_ code: UInt32) -> Int {
      Int((code >> 16) << 14 | ((code >> 8) & 0x7F) << 7 | (code & 0x7F))
    }

    private mutating func collect(_ bytes: some Collection<UInt8>, into codes: inout [UInt32]) {
      var a: UInt8 = 0x80
      var b: UInt8 = 0x80
      for byte in bytes {
        let c = SearchTrigrams.fold(byte)
        if a < 0x80, b < 0x80, c < 0x80 {
          let code = UInt32(a) << 16 | UInt32(b) << 8 | UInt32(c)
          let bit = Self.bit(code)
          let mask: UInt64 = 1 << UInt64(bit & 63)
          if seen[bit >> 6] & mask == 0 {
            seen[bit >> 6] |= mask
            codes.append(code)
          }
        }
        a = b
        b = c
      }
    }
  }
}
