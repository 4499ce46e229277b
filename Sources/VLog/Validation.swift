internal import Foundation

/// The checks every event passes, local or remote, so that every replica accepts the same
/// events.
enum Validation {
  /// Checks `change`'s values; `isSealed` says that the event carries sealed values, so that
  /// an attachment's addition names its bytes as sealed (up to ``Limits/sealedAttachmentBytes``).
  static func check(_ change: Change, isSealed: Bool = false) throws(VLogError) {
    switch change {
    case .noteCreated(_, let date), .sortDateSet(_, let date):
      try checkDate(date)
    case .textSet(let id, let text, let base):
      let size = text.utf8.count
      guard size <= Limits.textBytes else {
        throw VLogError(
          .valueTooLarge,
          "note \(id): the text is \(size) bytes; the limit is \(Limits.textBytes) bytes")
      }
      if let base, base.count > Limits.replacedTexts {
        throw VLogError(
          .valueTooLarge,
          "note \(id): the text change replaces \(base.count) texts; the limit is "
            + "\(Limits.replacedTexts)")
      }
    case .tagsSet(let id, let tags):
      guard tags.count <= Limits.tagsPerNote else {
        throw VLogError(
          .valueTooLarge,
          "note \(id): \(tags.count) tags; the limit is \(Limits.tagsPerNote)")
      }
      for tag in tags { try checkTagName(tag) }
    case .attachmentsSet(let id, let attachments):
      guard attachments.count <= Limits.attachmentsPerNote else {
        throw VLogError(
          .valueTooLarge,
          "note \(id): \(attachments.count) attachments; the limit is \(Limits.attachmentsPerNote)")
      }
    case .attachmentAdded(let attachment):
      let mime = attachment.mimeType
      guard !mime.isEmpty, mime.utf8.count <= Limits.mimeTypeBytes, mime.contains("/"),
        !mime.unicodeScalars.contains(where: {
          $0.properties.generalCategory == .control || $0 == " "
        })
      else {
        throw VLogError(
          .invalidValue,
          "attachment \(attachment.id): media type \(String(reflecting: mime)) is not of the form "
            + "type/subtype")
      }
      guard attachment.byteCount > 0 else {
        throw VLogError(.invalidValue, "attachment \(attachment.id): it has no bytes")
      }
      let limit = isSealed ? Limits.sealedAttachmentBytes : Limits.attachmentBytes
      guard attachment.byteCount <= limit else {
        throw VLogError(
          .valueTooLarge,
          "attachment \(attachment.id): \(attachment.byteCount) bytes; the limit is "
            + "\(limit) bytes")
      }
      guard attachment.width >= 0, attachment.height >= 0 else {
        throw VLogError(.invalidValue, "attachment \(attachment.id): negative width or height")
      }
    case .tagRenamed(let name):
      try checkTagName(name)
    case .tagDeleted(let name), .tagAdded(_, let name):
      try checkTagName(name)
    case .archivedSet, .noteDeleted, .attachmentDeleted, .tagRemoved, .tagErased, .unknown:
      break
    }
  }

  /// Bounds the fields a newer version added, so that every event fits in
  /// ``Limits/eventBytes``.
  /// Checks the size of the fields a version does not know, apart from the sealed values
  /// (`sealed`: their size, and the size of their encoded field), which have a limit of their
  /// own.
  static func checkUnknownFields(
    _ fields: [UInt8], sealed: (values: Int, field: Int)?, of stamp: Stamp
  ) throws(VLogError) {
    if let sealed, sealed.values > Limits.sealedValueBytes {
      throw VLogError(
        .valueTooLarge,
        "event \(stamp): \(sealed.values) bytes of sealed values; the limit is "
          + "\(Limits.sealedValueBytes) bytes")
    }
    guard fields.count - (sealed?.field ?? 0) <= Limits.unknownFieldBytes else {
      throw VLogError(
        .valueTooLarge,
        "event \(stamp): \(fields.count) bytes of fields this version does not know; the limit "
          + "is \(Limits.unknownFieldBytes) bytes")
    }
  }

  static func checkTagName(_ name: String) throws(VLogError) {
    let cleaned = TagName.clean(name)
    guard !cleaned.isEmpty else {
      throw VLogError(.invalidValue, "a tag name is empty")
    }
    guard cleaned.utf8.count <= Limits.tagNameBytes else {
      throw VLogError(
        .valueTooLarge,
        "tag name \(String(reflecting: String(cleaned.prefix(40))))… is "
          + "\(cleaned.utf8.count) bytes; the limit is \(Limits.tagNameBytes)")
    }
    guard
      !name.unicodeScalars.contains(where: {
        $0.properties.generalCategory == .control && !$0.properties.isWhitespace
      })
    else {
      throw VLogError(.invalidValue, "tag name \(String(reflecting: name)) has control characters")
    }
  }

  static func checkDate(_ date: Date) throws(VLogError) {
    guard date.timeIntervalSince1970.isFinite, date >= Limits.earliestDate,
      date <= Limits.latestDate
    else {
      throw VLogError(.invalidValue, "the date \(date) is outside years 1 to 9999")
    }
  }

  /// Cleans tag names and keeps the first of names with the same id.
  static func uniqueTags(_ tags: [String]) -> [String] {
    var seen = Set<TagID>()
    return tags.map(TagName.clean).filter { !$0.isEmpty && seen.insert(TagID(name: $0)).inserted }
  }
}
