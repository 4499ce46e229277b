internal import Foundation
internal import Synchronization
public import VLog
public import VLogWire

/// What a device of an end-to-end encrypted account holds of its keys, kept current with the
/// server: the account's keys, following each rotation of the content key, and the keys of the
/// notes and attachments it has sealed or opened events of.
///
/// A note's or an attachment's key is made with it, on the device that creates it, and stored
/// on the server — wrapped by the account's content key — before any event of it is pushed, so
/// that every device of the account can open the events it pulls. When a deletion is stored,
/// the server erases the deleted note's key and its attachments' (or the deleted attachment's),
/// and the keyring forgets them. A rotation of the content key (``rotateIfDue(username:)``)
/// then re-wraps every key that remains under a new content key: copies of the server's files
/// made before the deletion hold the deleted objects' keys wrapped by a content key no device
/// keeps.
public actor AccountKeyring {
  /// The account's keys, at the newest epoch this device knows.
  public internal(set) var keys: AccountKeys
  let caller: APICaller
  let token: @Sendable () async throws -> String
  let random: @Sendable (Int) -> [UInt8]
  /// The keys of notes and attachments this device has sealed or opened events of, but
  /// deleted ones.
  var objectKeys: [Identifier: ObjectKey] = [:]
  /// The names of the attachment bytes this device sealed, for their additions' seal.
  var sealedBlobs: [AttachmentID: SealedBlob] = [:]
  /// The attachments of each note whose additions this device sealed or opened: their keys
  /// go with the note's.
  private var attachmentsOfNote: [NoteID: Set<Identifier>] = [:]

  /// A keyring of `keys`, which calls the server with `caller` and the token `token` gives.
  ///
  /// - Parameters:
  ///   - keys: The account's keys, opened with the password or restored.
  ///   - caller: How the keyring calls the server.
  ///   - token: The account's token, for each call.
  ///   - random: Cryptographically secure random bytes: new notes' keys, new content keys.
  public init(
    keys: AccountKeys, caller: APICaller, token: @escaping @Sendable () async throws -> String,
    random: @escaping @Sendable (Int) -> [UInt8]
  ) {
    self.keys = keys
    self.caller = caller
    self.token = token
    self.random = random
  }

  /// The notes and attachments whose keys the keyring holds.
  public var heldObjects: Set<Identifier> { Set(objectKeys.keys) }

  /// The keys of the notes and attachments the keyring holds, in memory only.
  ///
  /// A device does not write them down: a keyring made at the next launch looks up on the
  /// server the keys it needs, so that no copy of a deleted note's key outlives the note on
  /// the device. An app that kept these would keep such copies.
  public var heldKeys: [Identifier: ObjectKey] { objectKeys }

  /// The bytes of the attachments `events` add, sealed (``ObjectKey/sealBlob(_:of:)``) by
  /// keys made and stored on the server first, or looked up: what an attachment's addition
  /// names in place of its clear bytes, remembered for ``seal(_:)``. Call this before sealing
  /// the events, and upload the sealed bytes the server lacks (``sealedBytes(of:bytes:)``).
  ///
  /// - Parameters:
  ///   - events: Events to push, of which the attachments' additions count.
  ///   - bytes: The clear bytes of an attachment, by their hash: the store's.
  /// - Returns: Each attachment added and not redacted, with the name of its sealed bytes.
  /// - Throws: ``AccountKeyError`` when the bytes of an attachment are not in the store;
  ///   ``APIError`` when the server does not take or give the keys.
  public func sealBlobs(of events: [Event], bytes: @Sendable (BlobHash) throws -> [UInt8]?)
    async throws
    -> [(attachment: Attachment, sealed: SealedBlob)]
  {
    let added = events.compactMap { event -> Attachment? in
      guard !event.isRedacted, case .attachmentAdded(let attachment) = event.change else {
        return nil
      }
      return attachment
    }
    guard !added.isEmpty else { return [] }
    try await makeKeys(of: added.map(\.id.identifier))
    return try added.compactMap { attachment in
      // Pulled and never fetched here: its addition named its sealed bytes, which the server
      // holds or another device uploads.
      if sealedBlobs[attachment.id] != nil, try bytes(attachment.blobHash) == nil { return nil }
      return (attachment, SealedBlob(naming: try sealedBytes(of: attachment, bytes: bytes)))
    }
  }

  /// The bytes of `attachment` sealed by its key, as the server stores them; the keyring
  /// remembers their name for ``seal(_:)``.
  ///
  /// - Throws: ``AccountKeyError`` when the keyring holds no key of the attachment (seal
  ///   its addition's bytes with ``sealBlobs(of:bytes:)`` first) or the bytes are not in the
  ///   store.
  public func sealedBytes(of attachment: Attachment, bytes: @Sendable (BlobHash) throws -> [UInt8]?)
    throws -> [UInt8]
  {
    guard let key = objectKeys[attachment.id.identifier] else {
      throw AccountKeyError("the keyring holds no key of attachment \(attachment.id)")
    }
    guard let clear = try bytes(attachment.blobHash) else {
      throw AccountKeyError(
        "the bytes of attachment \(attachment.id) are not in the store: its addition cannot be "
          + "sealed")
    }
    let sealed = try key.sealBlob(clear, of: attachment)
    sealedBlobs[attachment.id] = SealedBlob(naming: sealed)
    attachmentsOfNote[attachment.noteID, default: []].insert(attachment.id.identifier)
    return sealed
  }

  /// The clear bytes of `attachment` from `sealed`, the bytes its sealed addition names as the
  /// server stores them; its key is looked up if the keyring does not hold it.
  ///
  /// - Throws: ``AccountKeyError`` when they do not open, or the server holds no key of the
  ///   attachment (it was deleted); ``APIError`` when the server does not answer.
  public func openBlob(_ sealed: [UInt8], of attachment: Attachment) async throws -> [UInt8] {
    let object = attachment.id.identifier
    if objectKeys[object] == nil { try await lookUp([object]) }
    guard let key = objectKeys[object] else {
      throw AccountKeyError("the server holds no key of attachment \(attachment.id)")
    }
    return try key.openBlob(sealed, of: attachment)
  }

  /// `events` as the server must receive them: sealed, each note's values by the note's key
  /// and each attachment's by the attachment's. The keys of the notes they create are made
  /// and stored on the server — while the events are sealed, and before they are returned;
  /// a note the keyring holds no key of is looked up. The bytes of the attachments they add
  /// must be sealed first (``sealBlobs(of:bytes:)``).
  ///
  /// - Throws: ``AccountKeyError`` for an event that cannot be sealed; ``APIError`` when the
  ///   server does not take the keys.
  public func seal(_ events: [Event]) async throws -> [Event] {
    let sealed = try await sealAhead(events)
    noteSealed(sealed)
    return sealed
  }

  /// `events` sealed as ``seal(_:)`` seals them, but not yet noted as sent: the keys of the
  /// notes and attachments they delete stay held until ``noteSealed(_:)`` says the events
  /// go, so that events before them sealed again meanwhile (after a restamp, say) still
  /// seal with their keys.
  ///
  /// - Parameters:
  ///   - events: The events to seal.
  ///   - background: Whether nothing waits for the seal yet (the outbox sealed one push
  ///     ahead, while a push is on its way): it then leaves a core free, for the app and for
  ///     the push's answer.
  func sealAhead(_ events: [Event], background: Bool = false) async throws -> [Event] {
    let created = try newKeys(
      of: events.compactMap { event -> Identifier? in
        guard case .noteCreated(let note, _) = event.change else { return nil }
        return note.identifier
      })
    // The new keys seal the events while the server stores them: a push waits for both.
    objectKeys.merge(created) { _, new in new }
    async let stored = created.isEmpty ? true : store(created)
    var sealed: [Event]
    let storedAll: Bool
    do {
      try await lookUp(unheld(events))
      try await storeLost(unheld(events.lazy.filter { !$0.isRedacted }))
      sealed = try await sealHeld(events, background: background)
      storedAll = try await stored
    } catch {
      // The store ends first, so that the keys it records are dropped too; what it throws,
      // if anything, is the lesser error.
      _ = try? await stored
      for object in created.keys { objectKeys[object] = nil }
      throw error
    }
    // A note whose key the server held already (this device made it before a restart, and
    // the push of its events did not complete): sealed again with the key the server keeps.
    if !storedAll { sealed = try await sealHeld(events, background: background) }
    return sealed
  }

  /// `events` sealed by the keys the keyring holds, without noting them (``noteSealed(_:)``),
  /// on every core but one if `background`.
  private func sealHeld(_ events: [Event], background: Bool) async throws -> [Event] {
    let (keys, names, random) = (objectKeys, sealedBlobs, random)
    let sealer = EventSealer(keys: self.keys)
    return try await Self.inParallel(events, sparingACore: background) { _, event in
      try sealer.seal(
        event,
        objectKey: { object in
          // A note deleted elsewhere has no key any more: what this device changed of it is
          // sealed by a key nobody keeps, as the deletion erases it anyway.
          try keys[object] ?? ObjectKey(random: random)
        },
        sealedBlob: { attachment in
          guard let name = names[attachment.id] else {
            throw AccountKeyError(
              "the bytes of attachment \(attachment.id) were not sealed before its addition")
          }
          return name
        })
    }
  }

  /// `events` pulled from the server, checked and opened. Every event must carry the
  /// authenticator of a device of the account (``AccountKeys/checkAuthenticator(of:)``). The
  /// keys of notes and attachments the keyring does not hold are looked up first; a deleted
  /// object's events, erased by the server, are what they are, and so is an event whose
  /// object's key the server no longer holds (its deletion erased the key between the page
  /// and the lookup): it is taken as erased, redacted, never as a reason to stop syncing.
  ///
  /// - Parameters:
  ///   - events: The events as the server sent them.
  ///   - remembering: Whether the keyring notes what the events change (attachments added,
  ///     keys of deleted objects forgotten), as it must for events the store applies; a check
  ///     that only reads them passes false. The keys it looks up are kept either way.
  /// - Throws: ``AccountKeyError`` for an event no device of the account vouched for, or that
  ///   does not open; ``APIError`` when the server does not answer.
  public func open(_ events: [Event], remembering: Bool = true) async throws -> [Event] {
    try await lookUp(unheld(events.lazy.filter { !$0.isRedacted }))
    let keys = objectKeys
    let sealer = EventSealer(keys: self.keys)
    let opened = try await Self.inParallel(events, sparingACore: false) { _, event in
      try sealer.open(event, heldKey: { keys[$0] })
    }
    if remembering {
      noteSealed(opened)
      noteSealedBlobs(of: zip(events, opened))
    }
    return opened
  }

  /// Remembers the names of the sealed bytes the sealed attachments' additions of `pairs`
  /// (each sealed, and opened) name: the addition is sealed again with them by a device that
  /// never fetched the bytes (pushing back what a restored server lost).
  private func noteSealedBlobs(of pairs: some Sequence<(Event, Event)>) {
    for (sealed, opened) in pairs where !sealed.isRedacted {
      guard case .attachmentAdded(let placeholder) = sealed.change,
        case .attachmentAdded(let attachment) = opened.change, !opened.isRedacted,
        objectKeys[attachment.id.identifier] != nil
      else { continue }
      sealedBlobs[attachment.id] = SealedBlob(
        hash: placeholder.blobHash, byteCount: placeholder.byteCount)
    }
  }

  /// ``open(_:remembering:)``, setting aside the events the device refuses instead of
  /// throwing: each with why. Keys that changed meanwhile are no verdict on an event, and are
  /// thrown as ``open(_:remembering:)`` throws them.
  ///
  /// - Returns: The events opened, in order, and those refused.
  public func openSettingAside(_ events: [Event]) async throws -> (
    opened: [Event], refused: [(Event, String)]
  ) {
    let unheldObjects = Set(unheld(events.lazy.filter { !$0.isRedacted }))
    try await lookUp(Array(unheldObjects))
    var (opened, refused) = try await openHeld(events)
    // A key held from before that no longer opens: after a restore, another device may have
    // stored the object's key again. Looked up once more, those events are opened again.
    let stale = Set(
      refused.keys.compactMap { EventSealer.keyedObject(of: events[$0].change) }
    ).subtracting(unheldObjects)
    if !stale.isEmpty {
      let held = objectKeys
      for object in stale { objectKeys[object] = nil }
      try await lookUp(Array(stale))
      for object in stale where objectKeys[object] == nil { objectKeys[object] = held[object] }
      let again = refused.keys.sorted()
      let (reopened, stillRefused) = try await openHeld(again.map { events[$0] })
      for (position, index) in again.enumerated() {
        opened[index] = reopened[position]
        refused[index] = stillRefused[position]
      }
    }
    let kept = opened.indices.filter { refused[$0] == nil }
    noteSealed(kept.map { opened[$0] })
    noteSealedBlobs(of: kept.map { (events[$0], opened[$0]) })
    return (kept.map { opened[$0] }, refused.keys.sorted().map { (events[$0], refused[$0] ?? "") })
  }

  /// `events` opened by the keys the keyring holds, in order, and why each that did not open
  /// was refused, by its index (an event refused is returned as it was).
  private func openHeld(_ events: [Event]) async throws -> ([Event], [Int: String]) {
    let keys = objectKeys
    let sealer = EventSealer(keys: self.keys)
    let refusals = Mutex<[Int: String]>([:])
    let opened = try await Self.inParallel(events, sparingACore: false) { index, event in
      do {
        return try sealer.open(event, heldKey: { keys[$0] })
      } catch let error as AccountKeyError where !error.keysReplaced && !error.changedMeanwhile {
        refusals.withLock { $0[index] = error.description }
        return event
      }
    }
    return (opened, refusals.withLock { $0 })
  }

  /// Makes keys of `objects` the keyring does not hold yet, new ones (a note's creation, an
  /// attachment's addition), and stores them on the server; an object that holds a key there
  /// already (made before a restart) keeps it.
  private func makeKeys(of objects: [Identifier]) async throws {
    let created = try newKeys(of: objects)
    if !created.isEmpty { try await store(created) }
  }

  /// Stores new keys of `objects`, which this device has events of and neither it nor the
  /// server holds a key of: the server lost them (it was restored from a backup taken before
  /// they were stored, and lost their objects' events with them, which this device pushes
  /// again sealed by the new keys), or erased them with their objects' deletion, which it
  /// refuses a new key for — such an object's events are sealed by a key nobody keeps
  /// (``sealHeld(_:background:)``).
  private func storeLost(_ objects: [Identifier]) async throws {
    let lost = try newKeys(of: objects)
    if !lost.isEmpty { try await store(lost) }
  }

  /// New keys of those of `objects` the keyring holds no key of, not stored yet.
  private func newKeys(of objects: [Identifier]) throws -> [Identifier: ObjectKey] {
    var created: [Identifier: ObjectKey] = [:]
    for object in objects where objectKeys[object] == nil {
      created[object] = try ObjectKey(random: random)
    }
    return created
  }

  /// The notes and attachments whose keys seal the values of `events` and that the keyring
  /// does not hold, each once, in order.
  private func unheld(_ events: some Sequence<Event>) -> [Identifier] {
    var seen = Set<Identifier>()
    return events.compactMap { event in
      guard let object = EventSealer.keyedObject(of: event.change), objectKeys[object] == nil,
        seen.insert(object).inserted
      else { return nil }
      return object
    }
  }

  /// Notes the attachments of each note in `events`, sealed or opened, and forgets the keys of
  /// the notes and attachments they delete, in order.
  func noteSealed(_ events: [Event]) {
    for event in events {
      if case .attachmentAdded(let attachment) = event.change, !event.isRedacted {
        attachmentsOfNote[attachment.noteID, default: []].insert(attachment.id.identifier)
      }
      forgetDeleted(event.change)
    }
  }

  /// Follows the rotations of the content key made since this device's epoch, by their links.
  ///
  /// A server that names an older epoch than this device has seen is refused: it would have
  /// the device wrap new notes' keys by a content key that should be forgotten.
  ///
  /// - Returns: The account's keys as the server keeps them.
  /// - Throws: ``AccountKeyError`` for an epoch older than this device's, or links that do
  ///   not lead from its epoch to the one named; ``APIError`` when the server does not answer.
  @discardableResult
  public func refresh() async throws -> AccountKeysBody {
    try follow(try await caller.accountKeys(since: keys.epoch, token: token()).get())
  }

  /// Follows the rotations `body` (the server's answer to `GET /v1/accounts/current/keys`
  /// asked since this keyring's epoch) names, as ``refresh()`` does.
  ///
  /// - Returns: `body`.
  /// - Throws: ``AccountKeyError`` for an epoch older than this device's, or links that do
  ///   not lead from its epoch to the one named (`AccountKeyError/keysReplaced` when there
  ///   are too few: a re-keying).
  @discardableResult
  public func follow(_ body: AccountKeysBody) throws -> AccountKeysBody {
    guard body.epoch >= keys.epoch else {
      throw AccountKeyError(
        "the server says the account's keys are of epoch \(body.epoch), older than epoch "
          + "\(keys.epoch) this device holds: it is refused (a server restored from a backup "
          + "taken before the keys rotated is brought forward with the password)",
        serverBehind: true)
    }
    guard body.epoch > keys.epoch else { return body }
    let links = try body.linkBytes()
    guard UInt64(links.count) == body.epoch - keys.epoch else {
      // A re-keying left no link: the keys open with the password alone.
      throw AccountKeyError(
        "the account was re-keyed after epoch \(keys.epoch), which this device holds (the "
          + "server gave \(links.count) links to epoch \(body.epoch)): its keys open with the "
          + "password alone; sign in with it", keysReplaced: true)
    }
    var next = keys
    do {
      for link in links { next = try next.following(link) }
    } catch {
      // Not the links of this device's keys: another device brought a restored record
      // forward past them, or the server lies. The keys open with the password, which is
      // asked for the later keys of this lineage only (`SyncAccount.check`).
      throw AccountKeyError(
        "the server's links from epoch \(keys.epoch) to epoch \(body.epoch) do not open with "
          + "this device's keys (\(error)): its keys open with the password alone; sign in with "
          + "it", keysReplaced: true)
    }
    keys = next
    return body
  }

  /// Stores new notes' and attachments' keys on the server, wrapped by the current content
  /// key; after a rotation elsewhere, follows it and wraps them again.
  ///
  /// - Returns: Whether the server took them all; if not, the keyring holds the keys the
  ///   server keeps instead.
  @discardableResult
  func store(_ created: [Identifier: ObjectKey]) async throws -> Bool {
    for attempt in 0..<3 {
      var wrapped: [Identifier: [UInt8]] = [:]
      for (object, key) in created { wrapped[object] = try keys.wrap(key, of: object) }
      let result = await caller.signingWrites(with: keys.requestSigningKey).storeObjectKeys(
        ObjectKeys(epoch: keys.epoch, keys: wrapped), token: try await token())
      if result.error?.body?.code == .keysChanged, attempt < 2 {
        try await refresh()
        continue
      }
      let stored = try result.get().stored
      objectKeys.merge(created) { _, new in new }
      if stored < created.count {
        // Some objects hold a key already (this device made it before a restart, and the
        // push of their events did not complete) or are deleted: the server's key stands,
        // and a deleted object has none.
        for object in created.keys { objectKeys[object] = nil }
        try await lookUp(Array(created.keys))
        return false
      }
      return true
    }
    return false
  }

  /// Looks up the keys of `objects` on the server: those it holds.
  func lookUp(_ objects: [Identifier]) async throws {
    guard !objects.isEmpty else { return }
    for start in stride(from: 0, to: objects.count, by: Self.lookupBatch) {
      let batch = Array(objects[start..<min(start + Self.lookupBatch, objects.count)])
      var found = try await caller.lookUpObjectKeys(batch, token: token()).get()
      if found.epoch != keys.epoch {
        try await refresh()
        found = try await caller.lookUpObjectKeys(batch, token: token()).get()
      }
      let open = keys
      guard found.epoch == open.epoch else {
        throw AccountKeyError(
          "the account's keys changed during a lookup; sync again", changedMeanwhile: true)
      }
      for (object, bytes) in try found.validated(maximum: .max) {
        objectKeys[object] = try open.unwrap(bytes, of: object)
      }
    }
  }

  /// The most ids one lookup asks: the server's default events per push.
  static let lookupBatch = 1000

  /// Forgets the key of a note or attachment `change` deletes, and a note's attachments'.
  private func forgetDeleted(_ change: Change) {
    switch change {
    case .noteDeleted(let note):
      objectKeys[note.identifier] = nil
      for attachment in attachmentsOfNote.removeValue(forKey: note) ?? [] {
        objectKeys[attachment] = nil
        sealedBlobs[AttachmentID(attachment)] = nil
      }
    case .attachmentDeleted(let attachment):
      objectKeys[attachment.identifier] = nil
      sealedBlobs[attachment] = nil
    default:
      break
    }
  }
}
