public import VLog
public import VLogWire

/// What a device of an end-to-end encrypted account holds of its keys, kept current with the
/// server: the account's keys, following each rotation of the content key, and the keys of the
/// notes it has sealed or opened events of.
///
/// A note's key is made with the note, on the device that creates it, and stored on the server
/// — wrapped by the account's content key — before any event of the note is pushed, so that
/// every device of the account can open the events it pulls. When a note's deletion is stored,
/// the server erases its key, and the keyring forgets it. A rotation of the content key
/// (``rotateIfDue(username:)``) then re-wraps every key that remains under a new content key: copies of
/// the server's files made before the deletion hold the deleted note's key wrapped by a content
/// key no device keeps.
public actor AccountKeyring {
  /// The account's keys, at the newest epoch this device knows.
  public private(set) var keys: AccountKeys
  private let caller: APICaller
  private let token: @Sendable () async throws -> String
  private let random: @Sendable (Int) -> [UInt8]
  /// The keys of notes this device has sealed or opened events of, but deleted ones.
  private var noteKeys: [NoteID: NoteKey] = [:]

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

  /// The notes whose keys the keyring holds.
  public var heldNotes: Set<NoteID> { Set(noteKeys.keys) }

  /// The keys of the notes the keyring holds, for an app that keeps them between launches.
  public var heldNoteKeys: [NoteID: NoteKey] { noteKeys }

  /// `events` as the server must receive them: sealed, each note's values by the note's key.
  /// The keys of the notes they create are made and stored on the server first; a note the
  /// keyring holds no key of is looked up.
  ///
  /// - Throws: ``AccountKeyError`` for an event that cannot be sealed; ``APIError`` when the
  ///   server does not take the keys.
  public func seal(_ events: [Event]) async throws -> [Event] {
    // The notes these events create get new keys; the others' are looked up.
    let creating = Set(
      events.compactMap { event -> NoteID? in
        guard case .noteCreated(let note, _) = event.change else { return nil }
        return note
      })
    var created: [NoteID: NoteKey] = [:]
    var wanted: [NoteID] = []
    for note in unheld(events) {
      if creating.contains(note) {
        created[note] = try NoteKey(random: random)
      } else {
        wanted.append(note)
      }
    }
    if !created.isEmpty { try await store(created) }
    try await lookUp(wanted)
    return try each(events) { sealer, event in
      try sealer.seal(
        event,
        noteKey: { note in
          // A note deleted elsewhere has no key any more: what this device changed of it is
          // sealed by a key nobody keeps, as the deletion erases it anyway.
          try noteKeys[note] ?? NoteKey(random: random)
        })
    }
  }

  /// `events` pulled from the server, opened. The keys of notes the keyring does not hold are
  /// looked up first; a deleted note's events, erased by the server, are what they are.
  ///
  /// - Throws: ``AccountKeyError`` for an event that does not open; ``APIError`` when the
  ///   server does not answer.
  public func open(_ events: [Event]) async throws -> [Event] {
    try await lookUp(unheld(events.lazy.filter { $0.sealedValues != nil }))
    return try each(events) { sealer, event in
      try sealer.open(
        event,
        noteKey: { note in
          guard let key = noteKeys[note] else {
            throw AccountKeyError("the server holds no key of note \(note)")
          }
          return key
        })
    }
  }

  /// The notes whose keys seal the values of `events` and that the keyring does not hold, each
  /// once, in order.
  private func unheld(_ events: some Sequence<Event>) -> [NoteID] {
    var seen = Set<NoteID>()
    return events.compactMap { event in
      guard let note = Self.keyedNote(of: event.change), noteKeys[note] == nil,
        seen.insert(note).inserted
      else { return nil }
      return note
    }
  }

  /// Each of `events` through `transform` with a sealer of the current keys, forgetting the key
  /// of each note deleted on the way.
  private func each(_ events: [Event], _ transform: (EventSealer, Event) throws -> Event)
    rethrows -> [Event]
  {
    let sealer = EventSealer(keys: keys)
    var result: [Event] = []
    result.reserveCapacity(events.count)
    for event in events {
      result.append(try transform(sealer, event))
      forgetDeleted(event.change)
    }
    return result
  }

  /// Follows the rotations of the content key made since this device's epoch, by their links.
  ///
  /// - Returns: The account's keys as the server keeps them.
  @discardableResult
  public func refresh() async throws -> AccountKeysBody {
    let body = try await caller.accountKeys(since: keys.epoch, token: token()).get()
    guard body.epoch > keys.epoch else { return body }
    let links = try body.linkBytes()
    guard UInt64(links.count) == body.epoch - keys.epoch else {
      throw AccountKeyError(
        "the server gave \(links.count) links from epoch \(keys.epoch) to \(body.epoch)")
    }
    var next = keys
    for link in links { next = try next.following(link) }
    keys = next
    return body
  }

  /// Rotates the content key if the server says a key was erased since the last rotation:
  /// every note's key the account holds is re-wrapped by a new content key, and the old one
  /// is forgotten. Another device's rotation at the same time wins; this one follows it.
  ///
  /// - Parameter username: The account's user name, which the new keys' seals are bound to.
  /// - Returns: Whether this call rotated.
  @discardableResult
  public func rotateIfDue(username: String) async throws -> Bool {
    for _ in 0..<3 {
      let body = try await refresh()
      guard body.rotationDue else { return false }
      let (next, link) = try keys.rotated(random: random)
      var rewrapped: [Identifier: [UInt8]] = [:]
      var after: Identifier?
      var stale = false
      while true {
        let page = try await caller.listObjectKeys(after: after, token: token()).get()
        guard page.epoch == keys.epoch else {
          stale = true
          break
        }
        let wrapped = try page.validated()
        for (object, bytes) in wrapped {
          let note = NoteID(object)
          rewrapped[object] = try next.wrap(try keys.unwrap(bytes, of: note), of: note)
        }
        guard page.more, let last = wrapped.keys.max() else { break }
        after = last
      }
      if stale { continue }
      let rotation = KeyRotation(
        epoch: keys.epoch,
        sealedForPassword: try next.sealed(
          to: try NewAccountKeys.bytes(
            body.passwordPublicKey, "passwordPublicKey", count: NewAccountKeys.publicKeyBytes),
          username: username),
        sealedForRecovery: try next.sealed(
          to: try NewAccountKeys.bytes(
            body.recoveryPublicKey, "recoveryPublicKey", count: NewAccountKeys.publicKeyBytes),
          username: username),
        link: link, keys: rewrapped)
      let result = await caller.rotateKeys(rotation, token: try await token())
      if result.error?.body?.code == .keysChanged { continue }
      _ = try result.get()
      keys = next
      return true
    }
    throw AccountKeyError("the account's keys kept changing during three rotations")
  }

  /// Stores new notes' keys on the server, wrapped by the current content key; after a
  /// rotation elsewhere, follows it and wraps them again.
  private func store(_ created: [NoteID: NoteKey]) async throws {
    for attempt in 0..<3 {
      var wrapped: [Identifier: [UInt8]] = [:]
      for (note, key) in created { wrapped[note.identifier] = try keys.wrap(key, of: note) }
      let result = await caller.storeObjectKeys(
        ObjectKeys(epoch: keys.epoch, keys: wrapped), token: try await token())
      if result.error?.body?.code == .keysChanged, attempt < 2 {
        try await refresh()
        continue
      }
      let stored = try result.get().stored
      noteKeys.merge(created) { _, new in new }
      if stored < created.count {
        // Some notes hold a key already (this device made it before a restart, and the push
        // of their events did not complete) or are deleted: the server's key stands, and a
        // deleted note has none.
        for note in created.keys { noteKeys[note] = nil }
        try await lookUp(Array(created.keys))
      }
      return
    }
  }

  /// Looks up the keys of `notes` on the server: those it holds.
  private func lookUp(_ notes: [NoteID]) async throws {
    guard !notes.isEmpty else { return }
    for start in stride(from: 0, to: notes.count, by: Self.lookupBatch) {
      let batch = notes[start..<min(start + Self.lookupBatch, notes.count)]
      var found = try await caller.lookUpObjectKeys(batch.map(\.identifier), token: token()).get()
      if found.epoch != keys.epoch {
        try await refresh()
        found = try await caller.lookUpObjectKeys(batch.map(\.identifier), token: token()).get()
      }
      let open = keys
      guard found.epoch == open.epoch else {
        throw AccountKeyError("the account's keys changed during a lookup; sync again")
      }
      for (object, bytes) in try found.validated(maximum: .max) {
        let note = NoteID(object)
        noteKeys[note] = try open.unwrap(bytes, of: note)
      }
    }
  }

  /// The most ids one lookup asks: the server's default events per push.
  static let lookupBatch = 1000

  /// Forgets the key of a note `change` deletes.
  private func forgetDeleted(_ change: Change) {
    if case .noteDeleted(let note) = change { noteKeys[note] = nil }
  }

  /// The note whose key seals `change`'s values; nil for a change that carries ids only or
  /// names no note.
  private static func keyedNote(of change: Change) -> NoteID? {
    switch change {
    case .attachmentsSet, .noteDeleted, .attachmentDeleted: nil
    default: change.noteID
    }
  }
}
