public import Foundation

/// The limits on values, the same on every replica so that every replica accepts the same
/// events.
public enum Limits {
  /// The largest text of a note, in bytes of UTF-8: 1 MiB.
  public static let textBytes = 1 << 20
  /// The most tags on one note.
  public static let tagsPerNote = 100
  /// The longest tag name, in bytes of UTF-8.
  public static let tagNameBytes = TagName.maximumBytes
  /// The most attachments on one note.
  public static let attachmentsPerNote = 1000
  /// The largest attachment: 64 MiB, what a sync server accepts by default, so that every
  /// attachment a store accepts can be synced.
  public static let attachmentBytes = 64 << 20
  /// The largest attachment's bytes as an end-to-end encrypted account's device seals them:
  /// ``attachmentBytes``, one byte of padding (an attachment is padded to at most that), and
  /// the sealing's nonce (12 bytes) and tag (16). A sync server accepts blobs up to this size
  /// by default, and a sealed attachment's addition may name one.
  public static let sealedAttachmentBytes = attachmentBytes + 29
  /// The most texts one text change may name as replaced: the text a note shows and the
  /// conflicts a user resolves at once (``Note/conflicts``).
  public static let replacedTexts = 64
  /// The longest media type, in bytes.
  public static let mimeTypeBytes = 255
  /// The earliest date: 0001-01-01T00:00:00Z.
  public static let earliestDate = Date(milliseconds: -62_135_596_800_000)
  /// The latest date: 9999-12-31T23:59:59.999Z.
  public static let latestDate = Date(milliseconds: 253_402_300_799_999)
  /// The most bytes of fields a newer version of VLog added that one event may carry (fields
  /// this version keeps without knowing them, ``Event/unknownFields``): 1 MiB.
  public static let unknownFieldBytes = 1 << 20
  /// The most bytes of sealed values one event of an end-to-end encrypted account may carry
  /// (``Event/sealedValues``): the largest text, with its replaced texts' stamps and its note's
  /// id, and the sealing's nonce and tag, fit; so does the largest tags list.
  public static let sealedValueBytes = textBytes + (64 << 10)
  /// The largest encoded event: 4 MiB, more than the largest text, replaced texts, tags,
  /// attachments and unknown fields one event can carry together. A log record longer than
  /// this is damage, and is reported as such before it is hashed or decoded.
  public static let eventBytes = 4 << 20
}
