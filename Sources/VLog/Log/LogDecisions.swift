/// What a ``LogBatch`` decided that its storage writes.
package struct LogDecisions: Sendable {
  /// Events appended, as stored, in order (unless the batch does not keep them: see
  /// ``LogBatch/keepsAppended``).
  package var appended: [LoggedEvent] = []
  /// Events to store in a new form, by sequence number — redacted, or a tags list without a
  /// deleted tag: stored ones, and appended ones (which are stored in this form in their
  /// place).
  package var redacted: [UInt64: Event] = [:]
  /// Object index entries to add.
  package var objects: [(object: Identifier, sequence: UInt64)] = []
  /// Deletion markers to add: a note's or attachment's first deletion.
  package var deletions: [(object: Identifier, sequence: UInt64)] = []
  /// Attachments erased with their note: those whose addition a note's deletion redacted, or
  /// that arrived after it. A server erases what it keeps of them (an encrypted account's
  /// keys) as it does for the objects of ``deletions``.
  package var erasedAttachments: [Identifier] = []
  /// Tag deletion markers to set: each tag object's latest deletion.
  package var tagDeletions: [Identifier: Stamp] = [:]
  /// Blob references to add and to remove, by blob.
  package var addedReferences: [BlobHash: Set<UInt64>] = [:]
  package var removedReferences: [BlobHash: Set<UInt64>] = [:]
  /// Newest field changes to write, and fields to forget (of deleted notes).
  package var fields: [FieldKey: FieldChange] = [:]
  package var forgottenFields: Set<FieldKey> = []
  /// Replaced changes to queue, and queued ones to remove.
  package var replaced: [ReplacedChange] = []
  package var dequeued: [ReplacedChange] = []
  /// Blobs that no event references any more: for the blobs' owner to remove.
  package var releasedBlobs: Set<BlobHash> = []

  package init() {}

  /// The objects whose deletion this batch stored, and the attachments erased with their note:
  /// what a server erases with them (an encrypted account's keys of them). The one rule of
  /// what a deletion erases beyond the log; each backend only writes it.
  package var erasedObjects: [Identifier] {
    deletions.map(\.object) + erasedAttachments
  }
}
