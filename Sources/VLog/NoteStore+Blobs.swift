internal import Crypto
internal import LMDB

extension NoteStore {
  /// Stores the bytes of an attachment received out of band, after checking them against their
  /// hash. Storing bytes already present does nothing.
  ///
  /// - Throws: ``VLogError/Code/blobMismatch`` if the bytes' SHA-256 is not `hash`.
  public func storeBlob(_ bytes: [UInt8], hash: BlobHash) throws {
    let actual = BlobHash(bytes: Array(SHA256.hash(data: bytes)))!
    guard actual == hash else {
      throw VLogError(
        .blobMismatch, "the bytes' SHA-256 is \(actual), not \(hash); nothing was stored")
    }
    try VLogError.wrapping {
      try environment.write { transaction in
        guard try !transaction.containsValue(forKey: hash.bytes, in: schema.blobs) else { return }
        try transaction.put(bytes, forKey: hash.bytes, in: schema.blobs)
      }
    }
  }

  /// The bytes stored under a hash, if present.
  public func blob(_ hash: BlobHash) throws -> [UInt8]? {
    try read { try $0.value(forKey: hash.bytes, in: schema.blobs) }
  }

  /// Whether the store holds the bytes stored under a hash.
  public func hasBlob(_ hash: BlobHash) throws -> Bool {
    try read { try $0.containsValue(forKey: hash.bytes, in: schema.blobs) }
  }

  /// The bytes of an attachment.
  ///
  /// - Throws: ``VLogError/Code/attachmentNotFound`` for an unknown attachment,
  ///   ``VLogError/Code/blobMissing`` when its bytes have not been downloaded yet.
  public func attachmentData(_ id: AttachmentID) throws -> [UInt8] {
    guard let attachment = try attachment(id) else {
      throw VLogError(.attachmentNotFound, "there is no attachment \(id)")
    }
    guard let bytes = try blob(attachment.blobHash) else {
      throw VLogError(
        .blobMissing,
        "the bytes of attachment \(id) (sha256 \(attachment.blobHash)) are not in this store yet")
    }
    return bytes
  }

  /// Hashes of attachments whose bytes this store does not have, to download.
  public func missingBlobs() throws -> [BlobHash] {
    try read { transaction in
      var hashes = Set<BlobHash>()
      try transaction.forEach(in: schema.attachments) { key, value in
        let record = try AttachmentRecord(
          id: AttachmentID(try Identifier.ending(key, in: "attachments")), decoding: value)
        guard !record.isErased,
          try !schema.hasTombstone(record.attachment.noteID.identifier, in: transaction)
        else { return }
        hashes.insert(record.attachment.blobHash)
      }
      return try hashes.filter {
        try !transaction.containsValue(forKey: $0.bytes, in: schema.blobs)
      }
      .sorted { $0.description < $1.description }
    }
  }
}
