import Foundation
import Testing

@testable import VLog

/// A pushed event under an id the log holds: a retry is skipped, another event refused.
@Suite("A retry told from another event under the same id")
struct StoredMatchTests {
  static let note = NoteID(Identifier(high: 1, low: 1))
  static let stamp = Stamp(
    time: HybridTime(milliseconds: 1_790_000_000_000, counter: 1),
    replica: ReplicaID(Identifier(high: 2, low: 2)))

  static func event(_ change: Change, _ unknownFields: [UInt8] = []) -> Event {
    Event(stamp: stamp, change: change, unknownFields: unknownFields)
  }

  @Test(
    "the same event is a retry; another value, note or kind under its id is not; a held tags list may lack the tags deleted after it, a held tag deletion is by key, a redacted one keeps only ids, and sealed values compare as bytes unless the client sealed at random"
  )
  func rules() {
    let text = Self.event(.textSet(Self.note, text: "from a"))
    #expect(text.isStored(as: text))
    #expect(!Self.event(.textSet(Self.note, text: "from b")).isStored(as: text))
    #expect(
      !Self.event(.textSet(NoteID(Identifier(high: 9, low: 9)), text: "from a")).isStored(as: text))
    #expect(!Self.event(.archivedSet(Self.note, archived: true)).isStored(as: text))
    let other = Event(
      stamp: Stamp(time: Self.stamp.time, replica: ReplicaID(Identifier(high: 3, low: 3))),
      change: text.change)
    #expect(!other.isStored(as: text))
    // Redacted on the server: only what redaction keeps compares.
    #expect(Self.event(.textSet(Self.note, text: "from b")).isStored(as: text.redacted(.deleted)))
    #expect(
      !Self.event(.archivedSet(Self.note, archived: false)).isStored(as: text.redacted(.deleted)))
    // A tags list the log stripped of a deleted tag.
    let tags = Self.event(.tagsSet(Self.note, tags: ["a", "b", "c"]))
    #expect(tags.isStored(as: Self.event(.tagsSet(Self.note, tags: ["a", "c"]))))
    #expect(Self.event(.tagsSet(Self.note, tags: ["a", "c"])).isStored(as: tags))
    #expect(!tags.isStored(as: Self.event(.tagsSet(Self.note, tags: ["c", "a"]))))
    #expect(!tags.isStored(as: Self.event(.tagsSet(Self.note, tags: ["a", "b", "c"]), [1])))
    #expect(!tags.isStored(as: Self.event(.tagsSet(Self.note, tags: ["a", "d"]))))
    // A tag deletion by name, stored by key.
    #expect(
      Self.event(.tagDeleted(name: "Work")).isStored(
        as: Self.event(.tagErased(TagKey(name: "Work")))))
    #expect(
      !Self.event(.tagDeleted(name: "Work")).isStored(
        as: Self.event(.tagErased(TagKey(name: "Home")))))
    // Sealed values: bytes, or (from a client that sealed at random) ids only.
    let sealed = Self.event(.textSet(Self.note, text: "")).withSealedValues([1, 2, 3])
    let resealed = Self.event(.textSet(Self.note, text: "")).withSealedValues([4, 5, 6])
    #expect(sealed.isStored(as: sealed))
    #expect(!resealed.isStored(as: sealed))
    #expect(resealed.isStored(as: sealed, comparingSealedValues: false))
  }
}
