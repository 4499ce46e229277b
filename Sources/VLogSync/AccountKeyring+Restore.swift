internal import VLog

/// What the keyring does when the server was restored from a backup, which lost the keys of
/// the notes and attachments stored after it: it confirms the keys it holds or seals with
/// against the server's, and stores again those the server lost.
extension AccountKeyring {
  /// Confirms every key of a note or an attachment the keyring holds against the server, after
  /// it was restored from a backup: a key the server lost is stored again — the same key, which
  /// other devices may hold too — and one the server holds (another device stored it again)
  /// is the one used from now on.
  func confirmHeldKeys() async throws {
    let objects = Array(objectKeys.keys)
    for start in stride(from: 0, to: objects.count, by: Self.lookupBatch) {
      try await confirm(Array(objects[start..<min(start + Self.lookupBatch, objects.count)]))
    }
  }

  /// The name of the sealed bytes of `attachment`, as its sealed addition named them, if the
  /// keyring knows it.
  func sealedBlobName(of attachment: AttachmentID) -> SealedBlob? { sealedBlobs[attachment] }

  /// Makes sure the server holds the key of every note and attachment whose key seals values
  /// of `events`, as a push of events the server lost needs (it was restored from a backup):
  /// what it holds is the key used from now on, and a key it lost with the events is stored
  /// again — the one this keyring holds, or a new one (every event of that object is pushed
  /// again with it). The keyring's memory that a key is stored is not enough: it predates the
  /// restore.
  ///
  /// - Parameters:
  ///   - events: Events the server lacks, to push.
  ///   - hasBytes: Whether the store holds the bytes of an attachment.
  /// - Returns: The attachments' additions among `events` this device cannot seal: it never
  ///   had their bytes, and does not know their sealed bytes' name under the key the server
  ///   holds. A device that has the bytes pushes them.
  func confirmStored(_ events: [Event], hasBytes: (BlobHash) throws -> Bool) async throws
    -> Set<Stamp>
  {
    var seen = Set<Identifier>()
    let objects = events.compactMap { event -> Identifier? in
      guard !event.isRedacted, let object = EventSealer.keyedObject(of: event.change),
        seen.insert(object).inserted
      else { return nil }
      return object
    }
    try await confirm(objects)
    var unsealable = Set<Stamp>()
    for event in events where !event.isRedacted {
      guard case .attachmentAdded(let attachment) = event.change else { continue }
      if sealedBlobs[attachment.id] == nil, try !hasBytes(attachment.blobHash) {
        unsealable.insert(event.stamp)
      }
    }
    return unsealable
  }

  /// Makes sure the server holds the keys of `objects`: the one it holds is the key used from
  /// now on, and where it holds none, the one this keyring holds (or a new one) is stored.
  func confirm(_ objects: [Identifier]) async throws {
    guard !objects.isEmpty else { return }
    let held = objectKeys
    for object in objects { objectKeys[object] = nil }
    do {
      try await lookUp(objects)
      var lost: [Identifier: ObjectKey] = [:]
      for object in objects where objectKeys[object] == nil {
        lost[object] = try held[object] ?? ObjectKey(random: random)
      }
      if !lost.isEmpty { try await store(lost) }
    } catch {
      // Held still: the next attempt stores the same keys, not new ones.
      for object in objects where objectKeys[object] == nil { objectKeys[object] = held[object] }
      throw error
    }
    for object in objects where objectKeys[object]?.key.bytes != held[object]?.key.bytes {
      // A name of bytes sealed by another key than the one the server holds names nothing.
      sealedBlobs[AttachmentID(object)] = nil
    }
  }
}
