@testable import VLog

// Deliberately wrong merge rules, each injected into stores to show that the simulation's
// checks catch it. The engine carries none of them: only `StandardMerge`.

/// Wall-clock milliseconds only, ties going to whichever change arrives last: replicas that
/// receive events in different orders diverge, which the convergence checks must detect.
struct WallTimeOnly: MergePolicy {
  func wins(_ new: Stamp, over old: Stamp) -> Bool {
    new.time.milliseconds >= old.time.milliseconds
  }
}

/// A note shows the attachments of its newest list alone, as if each add set the whole list:
/// an attachment another device added meanwhile is lost, on every replica alike (so replicas
/// still converge), which the check that no add is lost must detect.
struct WholeAttachmentLists: MergePolicy {
  func shownAttachments(
    of note: NoteRecord, added: [(stamp: Stamp, id: AttachmentID)], merge: NoteMerge
  ) -> [AttachmentID] {
    note.attachments
  }
}

/// Every text change replaces every older text, as if none recorded what it replaced: a text
/// another device wrote meanwhile is lost, which the check that no text is lost must detect.
struct LastWriterOnlyTexts: MergePolicy {
  func replacedTexts(named base: ReplacedTexts?) -> ReplacedTexts? { nil }
}

/// A tag's addition sets the note's whole list (what the replica shows, and the tag), as tags
/// changes did before tags merged one by one: a tag another device added meanwhile is lost,
/// which the check that no add is lost must detect.
struct WholeTagLists: MergePolicy {
  func addTag(
    _ name: String, tag: TagID, key: TagKey, at change: FieldChange, to note: inout NoteRecord,
    replaced: inout [ReplacedChange], merge: NoteMerge
  ) -> Bool {
    guard merge.replace(&note.tagsStamp, &note.tagsSequence, with: change, &replaced) else {
      return false
    }
    if !note.tagIDs.contains(tag) { note.tagList = note.tags + [name] }
    note.tagChanges = []
    return true
  }
}
