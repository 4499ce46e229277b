internal import Foundation
internal import LMDB
internal import Synchronization

/// What one committed transaction changed, as observers see it.
///
/// User changes and ingested sync events produce the same kind of change set; ``source`` says
/// which, for observers that care (for example, to scroll to a note the user just made). A
/// user write that first brings the projections up to date with a pull's deferred pages tells
/// of those events in a change set of their own, with source ``Source/sync``, before its own.
public struct ChangeSet: Sendable, Hashable {
  /// Where a change came from.
  public enum Source: Sendable, Hashable {
    /// A user change made through this store.
    case user
    /// Events ingested from another replica (sync or import).
    case sync
  }

  /// Where the changes came from.
  public let source: Source
  /// Notes that became visible: created here, or whose creation arrived.
  public let insertedNotes: Set<NoteID>
  /// Visible notes whose fields or attachments changed, or whose sync state did
  /// (``Note/isPending``: the server stored their changes).
  public let updatedNotes: Set<NoteID>
  /// Notes that were deleted.
  public let deletedNotes: Set<NoteID>
  /// Whether any tag's name or note count changed.
  public let tagsChanged: Bool
  /// How many events the transaction appended to the log; for one that brought projections
  /// a deferred ingest left behind up to date, also the events it projected.
  public let eventCount: Int

  /// Whether nothing visible changed.
  public var isEmpty: Bool {
    insertedNotes.isEmpty && updatedNotes.isEmpty && deletedNotes.isEmpty && !tagsChanged
  }

  /// Collects changes across the flushes of one transaction.
  struct Builder: Sendable {
    var inserted: Set<NoteID> = []
    var updated: Set<NoteID> = []
    var deleted: Set<NoteID> = []
    var tagsChanged = false

    /// Adds what `changes`, of an earlier commit or transaction, changed.
    mutating func formUnion(_ changes: ChangeSet) {
      inserted.formUnion(changes.insertedNotes)
      updated.formUnion(changes.updatedNotes)
      deleted.formUnion(changes.deletedNotes)
      tagsChanged = tagsChanged || changes.tagsChanged
    }

    /// Adds what `other` collected.
    mutating func formUnion(_ other: Builder) {
      inserted.formUnion(other.inserted)
      updated.formUnion(other.updated)
      deleted.formUnion(other.deleted)
      tagsChanged = tagsChanged || other.tagsChanged
    }

    func build(source: Source, eventCount: Int) -> ChangeSet {
      ChangeSet(
        source: source,
        insertedNotes: inserted.subtracting(deleted),
        updatedNotes: updated.subtracting(inserted).subtracting(deleted),
        deletedNotes: deleted.subtracting(inserted),
        tagsChanged: tagsChanged,
        eventCount: eventCount)
    }
  }
}

/// The store's observers: each gets its own stream of change sets, fed after each commit.
final class Observers: Sendable {
  private let continuations = Locked<[UInt64: AsyncStream<ChangeSet>.Continuation]?>([:])
  private let nextID = Atomic<UInt64>(0)

  /// A new stream of change sets; `bufferingPolicy` says what it keeps while its consumer is
  /// busy (every change set, or only the newest for a consumer that only needs to know that
  /// something changed). Publishing never waits for a consumer.
  func stream(
    bufferingPolicy: AsyncStream<ChangeSet>.Continuation.BufferingPolicy = .unbounded
  ) -> AsyncStream<ChangeSet> {
    let (stream, continuation) = AsyncStream<ChangeSet>.makeStream(
      bufferingPolicy: bufferingPolicy)
    let id = nextID.add(1, ordering: .relaxed).newValue
    // After the store closed, a new stream is finished at once.
    let open = continuations.withLock { continuations in
      continuations?[id] = continuation
      return continuations != nil
    }
    guard open else {
      continuation.finish()
      return stream
    }
    continuation.onTermination = { [weak self] _ in
      self?.continuations.withLock { _ = $0?.removeValue(forKey: id) }
    }
    return stream
  }

  /// Sends a change set to every observer. Called after the commit, outside any lock.
  func publish(_ changes: ChangeSet) {
    let targets = continuations.withLock { $0.map { Array($0.values) } ?? [] }
    for continuation in targets { continuation.yield(changes) }
  }

  /// Whether ``finish()`` ended the streams.
  var isFinished: Bool { continuations.withLock { $0 == nil } }

  /// Ends every stream, and every stream asked for later.
  func finish() {
    let targets = continuations.withLock { continuations in
      defer { continuations = nil }
      return continuations.map { Array($0.values) } ?? []
    }
    for continuation in targets { continuation.finish() }
  }
}
