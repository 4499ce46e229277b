import Foundation
import Testing
import VLog

@testable import VLogSync

@Suite("Sealing an encrypted account's events")
struct EventSealingTests {
  /// Keys from fixed bytes, and a sealer.
  static func sealer(_ seed: UInt8 = 1) throws -> EventSealer {
    try EventSealer(keys: AccountKeys(random: { count in (0..<count).map { seed &+ UInt8($0) } }))
  }

  static let note = NoteID(Identifier(high: 0x11, low: 0x22))
  static func noteKey() throws -> ObjectKey {
    try ObjectKey(random: { count in [UInt8](repeating: 0x5A, count: count) })
  }

  static func stamp(_ index: UInt64) -> Stamp {
    Stamp(
      time: HybridTime(milliseconds: 1_767_225_600_000 + index, counter: 0),
      replica: ReplicaID(Identifier(high: 9, low: 9)))
  }

  /// One event of every kind a device of an encrypted account sends, with canary values.
  static func events() -> [Event] {
    let attachment = AttachmentID(Identifier(high: 0x33, low: 0x44))
    let changes: [Change] = [
      .noteCreated(note, creationDate: Date(milliseconds: 1_767_225_600_123)),
      .textSet(note, text: "CANARY text: meet at the old mill", replacing: [stamp(0)]),
      .archivedSet(note, archived: true),
      .sortDateSet(note, sortDate: Date(milliseconds: 1_767_225_999_000)),
      .tagsSet(note, tags: ["CanaryTagOne", "Work", "canarytagone"]),
      .tagAdded(note, name: "CanaryTagTwo"),
      .tagRemoved(note, tag: TagKey(name: "Work")),
      .attachmentsSet(note, attachments: [attachment]),
      .tagRenamed(name: "CanaryTagThree"),
      .tagErased(TagKey(name: "CanaryTagThree")),
      .attachmentDeleted(attachment),
      .noteDeleted(note),
    ]
    return changes.enumerated().map {
      Event(stamp: stamp(UInt64($0.offset + 1)), change: $0.element)
    }
  }

  @Test(
    "A text's seal is the scheme, not only this implementation: ChaCha20-Poly1305 under the note's key over a zero byte, the event's fields after its kind and Padmé's ISO padding, bound to 'vlog event', a zero byte, the stamp's 24 bytes and the kind's 8, under the nonce HMAC-SHA256(HKDF-Expand(note key, 'vlog value nonce'), the context's length as 8 bytes, the context, the plaintext) cut to 12 bytes, sealed as nonce, ciphertext and tag (the expected bytes computed apart from swift-crypto, with Python's cryptography)"
  )
  func knownAnswer() throws {
    let event = Event(stamp: Self.stamp(1), change: .textSet(Self.note, text: "Hello, vector"))
    let key = try Self.noteKey()
    let sealed = try Self.sealer().seal(event, objectKey: { _ in key })
    #expect(
      Hex.string(try #require(sealed.sealedValues))
        == "23adbfa9320d946fa8b6149c169df9aa413dba16270ad5d4ee12146cd69ac818fb655a6d86a2c8d32db782"
        + "e0040d0fa5b55c381748a36aaabdbea647bbd53449000f0a3db27d26fce9647add686d6745a9c7a8963c09"
        + "518f1a67f88e")
    // Sealed again, the same bytes: a retried push is the same push.
    #expect(try Self.sealer().seal(event, objectKey: { _ in key }) == sealed)
    // Sealed with a random nonce, as versions before did: still opens.
    let drawn = Event(stamp: sealed.stamp, change: sealed.change).withSealedValues(
      try #require(
        Hex.bytes(
          "a0a1a2a3a4a5a6a7a8a9aaab2802d93afd637c53b9a7e6f7bf5399d11090bc626f3ed0a66d4f6abf71add8"
            + "f5d3542e043e9a9fbacf2d97450bb72ec0f9d8da7d934378ef5e1a5527d3fe96200d076d64b7e8e4ffbda7"
            + "69bff4324451")))
    #expect(
      try Self.sealer().open(
        drawn.withAuthenticator(try Self.sealer().keys.authenticator(of: drawn)),
        objectKey: { _ in key }) == event)
    #expect(sealed.change == .textSet(Self.note, text: ""))
    #expect(try Self.sealer().open(sealed, objectKey: { _ in key }) == event)
    // Sealed before values were padded: still opens.
    let unpadded = Event(stamp: sealed.stamp, change: sealed.change).withSealedValues(
      try #require(
        Hex.bytes(
          "a0a1a2a3a4a5a6a7a8a9aaab0a30c93afd637c53b9b6f7f7bf5399d110b2b4452a13d9a66e0c66e962abcfe"
            + "ece91e55815d59bc823917533ea51b2bc96")))
    let legacy = unpadded.withAuthenticator(try Self.sealer().keys.authenticator(of: unpadded))
    #expect(try Self.sealer().open(legacy, objectKey: { _ in key }) == event)
  }

  @Test(
    "Every kind sealed carries none of its values in clear, passes the log's checks, survives the encoding, and opens to the event it was"
  )
  func roundTrip() throws {
    let sealer = try Self.sealer()
    for event in Self.events() {
      let sealed = try sealer.seal(
        event, objectKey: { _ in try Self.noteKey() })
      #expect(sealed.stamp == event.stamp && sealed.change.kind == event.change.kind)
      #expect(sealed.change.noteID == event.change.noteID)
      try sealed.validate()
      // What a server stores and serves: the encoding, decoded.
      let stored = try Event(encoded: sealed.encoded())
      #expect(stored == sealed)
      let bytes = stored.encoded()
      for canary in ["CANARY", "mill", "Canary", "canary", "Work", "work"] {
        #expect(bytes.firstRange(of: Array(canary.utf8)) == nil, "\(event.change.kind): \(canary)")
      }
      let expected: Event
      if case .tagsSet(let note, _) = event.change {
        // The same tag twice in a list is one tag to the log.
        expected = Event(
          stamp: event.stamp,
          change: .tagsSet(note, tags: ["CanaryTagOne", "Work", "canarytagone"]))
      } else {
        expected = event
      }
      #expect(try sealer.open(stored, objectKey: { _ in try Self.noteKey() }) == expected)
    }
  }

  @Test(
    "Events with values are sealed, attachment lists too; deletions stay as they are but for the authenticator every event carries; a tag names the same keyed tag wherever it appears"
  )
  func sealedForms() throws {
    let sealer = try Self.sealer()
    let sealed = try Self.events().map {
      try sealer.seal($0, objectKey: { _ in try Self.noteKey() })
    }
    for (event, form) in zip(Self.events(), sealed) {
      #expect(form.authenticator == sealer.keys.authenticator(of: form), "\(event.change.kind)")
      switch event.change {
      case .attachmentDeleted, .noteDeleted:
        #expect(form == event.withAuthenticator(sealer.keys.authenticator(of: event)))
        #expect(form.sealedValues == nil)
      default:
        #expect(form.sealedValues != nil, "\(event.change.kind)")
      }
    }
    let keyedOne = sealer.keys.tagName("CanaryTagOne")
    let keyedWork = sealer.keys.tagName("work")
    #expect(sealed[4].change == .tagsSet(Self.note, tags: [keyedOne, keyedWork]))
    #expect(sealed[6].change == .tagRemoved(Self.note, tag: TagKey(name: keyedWork)))
    #expect(sealed[9].change == .tagErased(TagKey(name: sealer.keys.tagName("canarytagthree"))))
    #expect(sealed[8].change == .tagRenamed(name: sealer.keys.tagName("CanaryTagThree")))
    // Another account's keys name the same tag otherwise.
    let other = try Self.sealer(77)
    #expect(other.keys.tagName("CanaryTagOne") != keyedOne)
  }

  @Test(
    "What a server checks of an encrypted account's events: every sealed event passes; a value or a tag name in clear, a missing seal, an extra field, does not; the largest text fits"
  )
  func serverCheck() throws {
    let sealer = try Self.sealer()
    for event in Self.events() {
      let sealed = try sealer.seal(
        event, objectKey: { _ in try Self.noteKey() })
      try sealed.checkSealed()
      try sealed.redacted(.deleted).checkSealed()
      // Without its authenticator, no event is taken, redacted or not.
      #expect(throws: VLogError.self) {
        try Event(stamp: sealed.stamp, change: sealed.change).checkSealed()
      }
      #expect(throws: VLogError.self) {
        try Event(stamp: sealed.stamp, change: sealed.change).redacted(.deleted).checkSealed()
      }
      switch event.change {
      case .noteDeleted, .attachmentDeleted:
        #expect(throws: VLogError.self) { try event.checkSealed() }
        try event.withAuthenticator(sealer.keys.authenticator(of: event)).checkSealed()
      default:
        #expect(throws: VLogError.self, "\(event.change.kind) in clear") { try event.checkSealed() }
        // The placeholders without their seal.
        #expect(throws: VLogError.self) {
          try Event(stamp: sealed.stamp, change: sealed.change).checkSealed()
        }
        // A field this version does not know beside the seal: it could carry a value in clear.
        let extra = Event(
          stamp: sealed.stamp, change: sealed.change,
          unknownFields: sealed.unknownFields + [0xA8, 0x01, 0x01])
        #expect(throws: VLogError.self) { try extra.checkSealed() }
      }
    }
    #expect(throws: VLogError.self) {
      try Event(stamp: Self.stamp(1), change: .tagDeleted(name: "x")).checkSealed()
    }
    // The largest text a store accepts, sealed, is an event every replica accepts.
    let largest = Event(
      stamp: Self.stamp(1),
      change: .textSet(
        Self.note, text: String(repeating: "x", count: Limits.textBytes),
        replacing: ReplacedTexts((0..<Limits.replacedTexts).map { Self.stamp(UInt64($0)) })))
    try largest.validate()
    let sealed = try sealer.seal(
      largest, objectKey: { _ in try Self.noteKey() })
    try sealed.validate()
    try sealed.checkSealed()
    // Sealed values past the limit are refused, whatever else the event carries.
    let oversized = Event(stamp: sealed.stamp, change: sealed.change)
      .withSealedValues([UInt8](repeating: 0, count: Limits.sealedValueBytes + 1))
    #expect(throws: VLogError.self) { try oversized.validate() }
  }

  @Test("A tags list a log stripped of a deleted tag opens without that tag's name")
  func strippedTagsList() throws {
    let sealer = try Self.sealer()
    let event = Event(stamp: Self.stamp(1), change: .tagsSet(Self.note, tags: ["Paris", "Rome"]))
    let sealed = try sealer.seal(event, objectKey: { _ in try Self.noteKey() })
    // What a log does when Rome is deleted after the list was set (LogBatch's rule 2).
    let stripped = Event(
      stamp: sealed.stamp, change: .tagsSet(Self.note, tags: [sealer.keys.tagName("Paris")]),
      unknownFields: sealed.unknownFields)
    #expect(
      try sealer.open(stripped, objectKey: { _ in try Self.noteKey() }).change
        == .tagsSet(Self.note, tags: ["Paris"]))
  }

  @Test(
    "Sealed values do not open with another note's key, another account's keys, on another event, or changed; a redacted event opens as it is; a tag's removal is sealed by its key alone"
  )
  func refusals() throws {
    let sealer = try Self.sealer()
    let text = Event(stamp: Self.stamp(5), change: .textSet(Self.note, text: "secret"))
    let sealed = try sealer.seal(text, objectKey: { _ in try Self.noteKey() })
    let otherKey = try ObjectKey(random: { [UInt8](repeating: 1, count: $0) })
    #expect(throws: AccountKeyError.self) { try sealer.open(sealed, objectKey: { _ in otherKey }) }
    // A rename is sealed with the account's tag-values key: another account cannot open it.
    let rename = try sealer.seal(
      Event(stamp: Self.stamp(6), change: .tagRenamed(name: "Paris")),
      objectKey: { _ in try Self.noteKey() })
    #expect(throws: AccountKeyError.self) {
      try Self.sealer(77).open(rename, objectKey: { _ in try Self.noteKey() })
    }
    // The values of one event moved to another of the same note.
    let moved = Event(
      stamp: Self.stamp(7), change: sealed.change, unknownFields: sealed.unknownFields)
    #expect(throws: AccountKeyError.self) {
      try sealer.open(moved, objectKey: { _ in try Self.noteKey() })
    }
    // A byte of the sealed values changed.
    var values = try #require(sealed.sealedValues)
    values[values.count / 2] ^= 1
    let changed = Event(stamp: sealed.stamp, change: sealed.change).withSealedValues(values)
    #expect(throws: AccountKeyError.self) {
      try sealer.open(changed, objectKey: { _ in try Self.noteKey() })
    }
    // Sent in clear to an encrypted account: no sealed values where the kind needs them.
    #expect(throws: AccountKeyError.self) {
      try sealer.open(text, objectKey: { _ in try Self.noteKey() })
    }
    // Redacted, by a deletion: nothing to open, the ids are what it is.
    let redacted = sealed.redacted(.deleted)
    #expect(redacted.sealedValues == nil && redacted.authenticator == sealed.authenticator)
    #expect(
      try sealer.open(redacted, objectKey: { _ in try Self.noteKey() })
        == Event.redacted(stamp: sealed.stamp, change: sealed.change, reason: .deleted))
    // Without the authenticator, or with another event's, it is refused.
    #expect(throws: AccountKeyError.self) {
      try sealer.open(
        try #require(Event.redacted(stamp: sealed.stamp, change: sealed.change, reason: .deleted)),
        objectKey: { _ in try Self.noteKey() })
    }
    #expect(throws: AccountKeyError.self) {
      try sealer.open(
        redacted.withAuthenticator(
          sealer.keys.authenticator(of: Event(stamp: Self.stamp(6), change: text.change))),
        objectKey: { _ in try Self.noteKey() })
    }
    // A tag's removal is sealed by its key alone, whether or not the device still knows the
    // name (a deleted tag's name is erased from the store): it names the keyed tag.
    let removal = try sealer.seal(
      Event(stamp: Self.stamp(8), change: .tagRemoved(Self.note, tag: TagKey(name: "Rome"))),
      objectKey: { _ in try Self.noteKey() })
    #expect(
      removal.change == .tagRemoved(Self.note, tag: TagKey(name: sealer.keys.tagName("rome"))))
  }

  @Test(
    "An attachment's addition is sealed with the attachment's own key: the media type, size in pixels and clear hash go sealed, the sealed bytes' hash and size in clear; its bytes seal the same way every time, open only as that attachment's, and the largest attachment sealed is an event and a blob every replica and server accepts"
  )
  func attachments() throws {
    let sealer = try Self.sealer()
    let bytes = Array(String(repeating: "CanaryAttachmentBytes ", count: 100).utf8)
    let attachment = Attachment(
      id: AttachmentID(Identifier(high: 0x33, low: 0x55)), noteID: Self.note,
      mimeType: "image/canary-png", width: 640, height: 480,
      blobHash: SealedBlob(naming: bytes).hash, byteCount: bytes.count)
    let attachmentKey = try ObjectKey(random: { [UInt8](repeating: 0x77, count: $0) })
    let keyOf = { (object: Identifier) throws -> ObjectKey in
      object == attachment.id.identifier ? attachmentKey : try Self.noteKey()
    }

    // The bytes: the same seal every time (a retried upload has one hash), padded and 28 bytes
    // more.
    let sealedBytes = try attachmentKey.sealBlob(bytes, of: attachment)
    #expect(try attachmentKey.sealBlob(bytes, of: attachment) == sealedBytes)
    #expect(sealedBytes.count == Padding.padme(bytes.count + 1) + SealedBlob.overhead)
    #expect(sealedBytes.firstRange(of: Array("Canary".utf8)) == nil)
    #expect(try attachmentKey.openBlob(sealedBytes, of: attachment) == bytes)
    // Not with another key, as another attachment, changed, or as other bytes.
    #expect(throws: AccountKeyError.self) {
      try Self.noteKey().openBlob(sealedBytes, of: attachment)
    }
    let other = Attachment(
      id: AttachmentID(Identifier(high: 0x33, low: 0x56)), noteID: Self.note,
      mimeType: attachment.mimeType, width: 0, height: 0, blobHash: attachment.blobHash,
      byteCount: bytes.count)
    #expect(throws: AccountKeyError.self) { try attachmentKey.openBlob(sealedBytes, of: other) }
    var changed = sealedBytes
    changed[changed.count / 2] ^= 1
    #expect(throws: AccountKeyError.self) { try attachmentKey.openBlob(changed, of: attachment) }
    let misnamed = Attachment(
      id: attachment.id, noteID: Self.note, mimeType: attachment.mimeType, width: 0, height: 0,
      blobHash: SealedBlob(naming: [1, 2, 3]).hash, byteCount: bytes.count)
    #expect(throws: AccountKeyError.self) { try attachmentKey.openBlob(sealedBytes, of: misnamed) }

    // The addition.
    let event = Event(stamp: Self.stamp(3), change: .attachmentAdded(attachment))
    let name = SealedBlob(naming: sealedBytes)
    #expect(throws: AccountKeyError.self) { try sealer.seal(event, objectKey: keyOf) }
    let sealed = try sealer.seal(event, objectKey: keyOf, sealedBlob: { _ in name })
    #expect(
      sealed.change
        == .attachmentAdded(
          Attachment(
            id: attachment.id, noteID: Self.note, mimeType: Attachment.sealedMediaType, width: 0,
            height: 0, blobHash: name.hash, byteCount: name.byteCount)))
    let stored = try Event(encoded: sealed.encoded())
    try stored.validate()
    try stored.checkSealed()
    for canary in ["Canary", "canary", "image"] {
      #expect(stored.encoded().firstRange(of: Array(canary.utf8)) == nil, "\(canary)")
    }
    #expect(
      stored.encoded().firstRange(of: attachment.blobHash.bytes) == nil,
      "the clear bytes' hash is sealed")
    #expect(try sealer.open(stored, objectKey: keyOf) == event)
    // Sealed by the attachment's key, not the note's.
    #expect(throws: AccountKeyError.self) {
      try sealer.open(stored, objectKey: { _ in try Self.noteKey() })
    }
    // A server refuses the addition in clear, and metadata in clear beside the seal.
    #expect(throws: VLogError.self) { try event.checkSealed() }
    let clearSize = Event(
      stamp: sealed.stamp,
      change: .attachmentAdded(
        Attachment(
          id: attachment.id, noteID: Self.note, mimeType: Attachment.sealedMediaType, width: 640,
          height: 480, blobHash: name.hash, byteCount: name.byteCount)),
      unknownFields: sealed.unknownFields)
    #expect(throws: VLogError.self) { try clearSize.checkSealed() }

    // The largest attachment, sealed, names more bytes than a clear addition may.
    let largest = Attachment(
      id: attachment.id, noteID: Self.note, mimeType: "video/mp4", width: 0, height: 0,
      blobHash: attachment.blobHash, byteCount: Limits.attachmentBytes)
    let largestName = SealedBlob(
      hash: name.hash, byteCount: Limits.attachmentBytes + 1 + SealedBlob.overhead)
    #expect(largestName.byteCount == Limits.sealedAttachmentBytes)
    try sealer.seal(
      Event(stamp: Self.stamp(4), change: .attachmentAdded(largest)), objectKey: keyOf,
      sealedBlob: { _ in largestName }
    ).validate()
    #expect(throws: VLogError.self) {
      try Event(
        stamp: Self.stamp(4),
        change: .attachmentAdded(
          Attachment(
            id: attachment.id, noteID: Self.note, mimeType: "video/mp4", width: 0, height: 0,
            blobHash: name.hash, byteCount: largestName.byteCount))
      ).validate()
    }
  }
}
