internal import Foundation
public import VLog
internal import VLogWire

/// Attachments' bytes: uploaded before the events that add them, downloaded on demand.
extension SyncAccount {
  /// Uploads the bytes of attachments added by `events` that this store holds and the server
  /// lacks: it asks the server first, so bytes it holds (sent before a retry, by another device,
  /// or kept for an undo) never travel again. A server too old to answer the question gets
  /// them all. An encrypted account's bytes are sealed (``AccountKeyring/sealBlobs(of:bytes:)``)
  /// and go under the hash of the sealed bytes, which the sealed additions name.
  func uploadBlobs(for events: [Event], keyring: AccountKeyring?) async throws -> Int {
    // Each upload: the hash the server stores the bytes under, and how to read them.
    var uploads: [(hash: BlobHash, bytes: () async throws -> [UInt8]?)] = []
    var seen = Set<BlobHash>()
    let store = self.store
    if let keyring {
      for (attachment, sealed) in try await keyring.sealBlobs(of: events, bytes: store.blob)
      where seen.insert(sealed.hash).inserted {
        uploads.append(
          (sealed.hash, { try await keyring.sealedBytes(of: attachment, bytes: store.blob) }))
      }
    } else {
      for event in events {
        guard case .attachmentAdded(let attachment) = event.change,
          seen.insert(attachment.blobHash).inserted, try store.hasBlob(attachment.blobHash)
        else { continue }
        uploads.append((attachment.blobHash, { try store.blob(attachment.blobHash) }))
      }
    }
    var missing = Set<BlobHash>()
    // As many hashes per question as events per push: what the server takes.
    for start in stride(from: 0, to: uploads.count, by: pushSize) {
      let asked = uploads[start..<min(start + pushSize, uploads.count)].map(\.hash)
      do {
        missing.formUnion(
          try await call { caller, token in await caller.missingBlobs(asked, token: token) })
      } catch {
        // (Not `catch where`: Swift 6.3.1 crashes compiling it after a typed-throws call.)
        guard error.status == 404 || error.status == 405 else { throw error }
        missing.formUnion(asked)
      }
    }
    var uploaded = 0
    // An encrypted account's server takes its uploads only signed by its devices' keys.
    let signingKey = await keyring?.keys.requestSigningKey
    for (hash, read) in uploads where missing.contains(hash) {
      guard let bytes = try await read() else { continue }
      _ = try await call { caller, token in
        await caller.signingWrites(with: signingKey).putBlob(bytes, hash: hash, token: token)
      }
      uploaded += 1
    }
    return uploaded
  }

  /// Makes sure the server holds the keys that seal `events`, events it lacks
  /// (``AccountKeyring/confirmStored(_:hasBytes:)``), and returns the attachments' additions
  /// among them this device cannot push: it never had their bytes, and the sealed bytes
  /// their additions named are unknown or not on the server (a restore lost them). A device
  /// that holds the bytes pushes those.
  func confirmKeys(of events: [Event], keyring: AccountKeyring) async throws -> Set<Stamp> {
    let store = self.store
    var unsealable = try await keyring.confirmStored(events, hasBytes: store.hasBlob)
    var named: [Stamp: BlobHash] = [:]
    for event in events where !event.isRedacted && !unsealable.contains(event.stamp) {
      guard case .attachmentAdded(let attachment) = event.change,
        try !store.hasBlob(attachment.blobHash),
        let name = await keyring.sealedBlobName(of: attachment.id)
      else { continue }
      named[event.stamp] = name.hash
    }
    guard !named.isEmpty else { return unsealable }
    let asked = Array(Set(named.values))
    var missing = Set<BlobHash>()
    do {
      missing.formUnion(
        try await call { caller, token in await caller.missingBlobs(asked, token: token) })
    } catch {
      missing.formUnion(asked)
      // A server too old to answer: the bytes are left to a device that holds them.
      guard error.status == 404 || error.status == 405 else { throw error }
    }
    for (stamp, hash) in named where missing.contains(hash) { unsealable.insert(stamp) }
    return unsealable
  }

  /// The bytes of an attachment: from the store, or downloaded from the server (checked against
  /// their hash and kept) when the store does not have them yet. An encrypted account's are
  /// downloaded as sealed — under the hash its sealed addition, fetched from the server,
  /// names — and opened with the attachment's key.
  ///
  /// - Throws: `VLogError` for an unknown attachment or bytes that do not match their hash;
  ///   ``AccountKeyError`` for sealed bytes that do not open; ``APIError`` when the download
  ///   fails.
  public func attachmentData(_ id: AttachmentID) async throws -> [UInt8] {
    guard let attachment = try store.attachment(id) else {
      return try store.attachmentData(id)  // throws attachmentNotFound
    }
    if let bytes = try store.blob(attachment.blobHash) { return bytes }
    let bytes: [UInt8]
    if let keyring = try await openKeys() {
      bytes = try await sealedAttachmentData(attachment, keyring: keyring)
    } else {
      let hash = attachment.blobHash
      bytes = try await call { caller, token in await caller.blob(hash, token: token) }
    }
    try store.storeBlob(bytes, hash: attachment.blobHash)
    return bytes
  }

  /// The clear bytes of an encrypted account's attachment, downloaded as sealed.
  func sealedAttachmentData(_ attachment: Attachment, keyring: AccountKeyring)
    async throws -> [UInt8]
  {
    guard let stamp = try store.attachmentAddition(attachment.id) else {
      return try store.attachmentData(attachment.id)  // throws attachmentNotFound
    }
    let fetched = try await call { caller, token in await caller.fetch([stamp], token: token) }
    guard let addition = fetched.first(where: { $0.stamp == stamp }),
      case .attachmentAdded(let sealed) = addition.change, sealed.id == attachment.id,
      !addition.isRedacted
    else {
      throw VLogError(
        .blobMissing,
        "the server holds no addition of attachment \(attachment.id) (event \(stamp)) to name "
          + "its bytes: it was deleted")
    }
    let hash = sealed.blobHash
    let bytes = try await call { caller, token in await caller.blob(hash, token: token) }
    return try await keyring.openBlob(bytes, of: attachment)
  }
}
