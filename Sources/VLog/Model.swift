public import Foundation

/// A note, as the projections hold it after merging every event about it.
///
/// Five fields are mutable — ``text``, ``isArchived``, ``sortDate``, ``tags`` and
/// ``attachments`` — and each merges on its own: the change with the newest stamp wins, so
/// editing the text on one device and archiving on another keeps both. ``id`` and
/// ``creationDate`` never change. ``truncatedText``, ``detectedData`` and
/// ``thumbnailAttachmentID`` are computed from the fields, never stored or synced.
public struct Note: Sendable, Hashable, Identifiable {
  /// The note's id, made by the replica that created it.
  public let id: NoteID
  /// When the note was created.
  public let creationDate: Date
  /// The note's text.
  public let text: String
  /// Whether the note is in the archive rather than the timeline.
  public let isArchived: Bool
  /// The date the timeline sorts by, newest first.
  public let sortDate: Date
  /// The note's tags: those of its newest tags list, in that list's order, then those added
  /// after it, oldest first.
  public let tags: [Tag]
  /// The note's attachments that exist, in order: those of the newest attachments list, then
  /// those added after it, oldest first (each attachment on a note merges on its own).
  public let attachments: [Attachment]
  /// The stamp of the change that set each field (``Stamp/zero`` for a field never set).
  public let stamps: FieldStamps
  /// Texts written without seeing ``text`` (on another device, before the two synced), oldest
  /// first: the note shows its newest text, and keeps these until a change resolves them
  /// (``Edits/setText(_:of:resolving:)``). The same on every replica that holds the same
  /// changes; empty for a note edited on one device at a time.
  public let conflicts: [TextConflict]
  /// Whether the note has changes made on this device that the server has not stored yet
  /// (they wait in the outbox); false once it stored them all — or for a note changed only
  /// elsewhere. This device's alone: a live query that shows it changes when a sync's push is
  /// acknowledged. A tag's rename or deletion is the tag's change, not its notes': it waits in
  /// the outbox (``NoteStore/outboxCount()`` counts it) without marking them.
  public internal(set) var isPending = false

  /// The first lines of the text, for a list: at most ``truncatedLength`` characters, cut at
  /// a word where possible, with runs of whitespace collapsed.
  public var truncatedText: String { Note.truncate(text) }

  /// Links, e-mail addresses, phone numbers and dates found in the text.
  public var detectedData: [DetectedData] { DataDetector.detect(in: text) }

  /// The first attachment that is an image, shown as the note's thumbnail.
  public var thumbnailAttachmentID: AttachmentID? {
    attachments.first(where: \.isImage)?.id
  }

  /// The length ``truncatedText`` cuts at.
  public static let truncatedLength = 200

  static func truncate(_ text: String) -> String {
    if let ascii = truncateASCII(text) { return ascii }
    return truncateCharacters(text)
  }

  /// ``truncate(_:)`` on bytes, for text whose first part is ASCII (one byte per character);
  /// nil as soon as a byte is not ASCII.
  static func truncateASCII(_ text: String) -> String? {
    var text = text
    return text.withUTF8 { truncateASCII(UnsafeRawBufferPointer($0)) }
  }

  /// ``truncateASCII(_:)`` on a text's UTF-8 bytes: reads only as far as the cut.
  static func truncateASCII(_ bytes: UnsafeRawBufferPointer) -> String? {
    var result: [UInt8] = []
    result.reserveCapacity(truncatedLength)
    var pendingSpace = false
    var lastSpace: Int?
    for byte in bytes {
      guard byte < 0x80 else { return nil }
      if byte == 0x20 || (0x09...0x0D).contains(byte) {
        pendingSpace = !result.isEmpty
        continue
      }
      if pendingSpace {
        guard result.count + 1 < truncatedLength else { break }
        lastSpace = result.count
        result.append(0x20)
        pendingSpace = false
      }
      guard result.count < truncatedLength else { break }
      result.append(byte)
    }
    if result.count >= truncatedLength, let lastSpace, lastSpace > truncatedLength / 2 {
      result.removeSubrange(lastSpace...)
    }
    return String(decoding: result, as: UTF8.self)
  }

  static func truncateCharacters(_ text: String) -> String {
    var result = ""
    var pendingSpace = false
    var count = 0
    for character in text {
      if character.isWhitespace {
        pendingSpace = !result.isEmpty
        continue
      }
      if pendingSpace {
        guard count + 1 < truncatedLength else { break }
        result.append(" ")
        count += 1
        pendingSpace = false
      }
      guard count < truncatedLength else { break }
      result.append(character)
      count += 1
    }
    if count >= truncatedLength, let lastSpace = result.lastIndex(of: " "),
      result.distance(from: result.startIndex, to: lastSpace) > truncatedLength / 2
    {
      result = String(result[..<lastSpace])
    }
    return result
  }
}

/// A text of a note written without seeing the text the note shows — on another device, before
/// the two synced — and kept until a change resolves it.
public struct TextConflict: Sendable, Hashable {
  /// The stamp of the change that wrote it: what a change names to resolve it.
  public let stamp: Stamp
  /// The text.
  public let text: String

  /// Creates a conflicting text.
  public init(stamp: Stamp, text: String) {
    self.stamp = stamp
    self.text = text
  }
}

/// The stamps of the changes that set a note's five mutable fields.
public struct FieldStamps: Sendable, Hashable {
  /// The stamp of the change that set ``Note/text``.
  public let text: Stamp
  /// The stamp of the change that set ``Note/isArchived``.
  public let archived: Stamp
  /// The stamp of the change that set ``Note/sortDate``.
  public let sortDate: Stamp
  /// The stamp of the newest tags list (``Change/tagsSet(_:tags:)``); a tag added or removed
  /// after it changes ``Note/tags`` on its own.
  public let tags: Stamp
  /// The stamp of the newest change that set the whole of ``Note/attachments`` (an
  /// attachment added after it has its own).
  public let attachments: Stamp
}

/// A note as a list shows it: the timeline, the archive, a tag's notes, search results.
public struct NoteSummary: Sendable, Hashable, Identifiable {
  /// The note's id.
  public let id: NoteID
  /// The first lines of the text (see ``Note/truncatedText``).
  public let truncatedText: String
  /// Whether the note is archived.
  public let isArchived: Bool
  /// The date the list is sorted by.
  public let sortDate: Date
  /// The note's tags' display names, in order.
  public let tagNames: [String]
  /// The first image attachment, if any.
  public let thumbnailAttachmentID: AttachmentID?
  /// How many texts the note keeps as conflicts beside the one it shows (``Note/conflicts``):
  /// a list can mark a note to resolve without reading it whole.
  public var conflictCount = 0
  /// Whether the note has changes made on this device that the server has not stored yet
  /// (``Note/isPending``): a list can mark it.
  public internal(set) var isPending = false
}

/// A tag. Its ``id`` is its normalised name, so the same name typed on two devices is one tag;
/// its display ``name`` is last-writer-wins. A tag exists while a note uses it.
public struct Tag: Sendable, Hashable, Identifiable {
  /// The normalised, lowercased name.
  public let id: TagID
  /// The display name (only its case and spacing can differ from ``id``).
  public let name: String
}

/// A tag with the number of notes that use it.
public struct TagCount: Sendable, Hashable {
  /// The tag.
  public let tag: Tag
  /// How many notes use it.
  public let noteCount: Int
}

/// An attachment's metadata. Attachments never change: a new picture is a new attachment. Its
/// bytes are stored once per distinct content, under ``blobHash``.
public struct Attachment: Sendable, Hashable, Identifiable {
  /// The attachment's id.
  public let id: AttachmentID
  /// The note it belongs to.
  public let noteID: NoteID
  /// The media type, for example `image/jpeg`.
  public let mimeType: String
  /// Width in pixels, or 0 when not an image.
  public let width: Int
  /// Height in pixels, or 0 when not an image.
  public let height: Int
  /// The SHA-256 of the bytes.
  public let blobHash: BlobHash
  /// The number of bytes.
  public let byteCount: Int

  /// Creates attachment metadata.
  public init(
    id: AttachmentID, noteID: NoteID, mimeType: String, width: Int, height: Int,
    blobHash: BlobHash, byteCount: Int
  ) {
    self.id = id
    self.noteID = noteID
    self.mimeType = mimeType
    self.width = width
    self.height = height
    self.blobHash = blobHash
    self.byteCount = byteCount
  }

  /// The ids of an attachment whose metadata was erased: what a redacted `attachmentAdded`
  /// keeps.
  init(redacted id: AttachmentID, of noteID: NoteID) {
    self.init(
      id: id, noteID: noteID, mimeType: "", width: 0, height: 0, blobHash: .erased, byteCount: 0)
  }

  /// Whether the media type is an image.
  public var isImage: Bool { mimeType.lowercased().hasPrefix("image/") }
}

/// What a tombstone names: a note or an attachment deleted for good.
public struct DeletedObject: Sendable, Hashable {
  /// The kind of object a tombstone names.
  public enum Kind: UInt8, Sendable, Hashable {
    /// A note.
    case note = 1
    /// An attachment.
    case attachment = 2
  }

  /// The deleted object's id.
  public let id: Identifier
  /// What it was.
  public let kind: Kind
  /// The earliest stamp of the deletes of it.
  public let stamp: Stamp
}
