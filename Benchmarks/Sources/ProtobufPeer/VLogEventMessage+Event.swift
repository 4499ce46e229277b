// Converts between VLog's events and the swift-protobuf message of the same encoding, so that
// the codec benchmark compares like with like: bytes in, a checked `Event` out, and back.

public import Foundation
public import VLog

/// Why a message is not an event.
public struct MessageError: Error, CustomStringConvertible {
  /// What is wrong.
  public let description: String
  init(_ description: String) { self.description = description }
}

extension VLogEventMessage {
  /// The message of an event of a known kind.
  public init(_ event: Event) {
    self.init()
    time = event.stamp.time.rawValue
    replica = Self.bytes(event.stamp.replica.identifier)
    kind = event.change.kind.rawValue
    switch event.change {
    case .noteCreated(let id, let date):
      entity = Self.bytes(id.identifier)
      self.date = Self.milliseconds(date)
    case .textSet(let id, let text, let base):
      entity = Self.bytes(id.identifier)
      self.text = text
      if let base {
        var all = Data(capacity: base.count * 24)
        for stamp in base {
          withUnsafeBytes(of: stamp.time.rawValue.bigEndian) { all.append(contentsOf: $0) }
          all.append(Self.bytes(stamp.replica.identifier))
        }
        replaced = all
      }
    case .archivedSet(let id, let archived):
      entity = Self.bytes(id.identifier)
      flag = archived ? 1 : 0
    case .sortDateSet(let id, let date):
      entity = Self.bytes(id.identifier)
      self.date = Self.milliseconds(date)
    case .tagsSet(let id, let tags):
      entity = Self.bytes(id.identifier)
      names = tags
    case .attachmentsSet(let id, let attachments):
      entity = Self.bytes(id.identifier)
      var all = Data()
      for attachment in attachments { all.append(Self.bytes(attachment.identifier)) }
      ids = all
    case .noteDeleted(let id):
      entity = Self.bytes(id.identifier)
    case .attachmentAdded(let attachment):
      entity = Self.bytes(attachment.id.identifier)
      text = attachment.mimeType
      owner = Self.bytes(attachment.noteID.identifier)
      width = UInt64(attachment.width)
      height = UInt64(attachment.height)
      hash = Data(attachment.blobHash.bytes)
      byteCount = UInt64(attachment.byteCount)
    case .attachmentDeleted(let id):
      entity = Self.bytes(id.identifier)
    case .tagRenamed(let name), .tagDeleted(let name):
      text = name
    case .tagAdded(let id, let name):
      entity = Self.bytes(id.identifier)
      text = name
    case .tagRemoved, .tagErased, .unknown:
      // The workload's notes change their tags by list (field 17, a tag's key, is not in the
      // message).
      break
    }
  }

  /// The event, checked as VLog's decoder checks it.
  public func event() throws -> Event {
    let stamp = Stamp(
      time: HybridTime(rawValue: time), replica: ReplicaID(try Self.identifier(replica)))
    let change: Change
    switch EventKind(rawValue: kind) {
    case .noteCreated:
      change = .noteCreated(NoteID(try Self.identifier(entity)), creationDate: Self.date(date))
    case .textSet:
      var base: ReplacedTexts?
      if hasReplaced {
        guard replaced.count % 24 == 0, replaced.count / 24 <= Limits.replacedTexts else {
          throw MessageError("replaced texts")
        }
        let bytes = [UInt8](replaced)
        var stamps: [Stamp] = []
        for offset in stride(from: 0, to: bytes.count, by: 24) {
          stamps.append(Self.stamp(bytes, at: offset))
        }
        base = ReplacedTexts(stamps)
      }
      change = .textSet(NoteID(try Self.identifier(entity)), text: text, replacing: base)
    case .archivedSet:
      guard flag <= 1 else { throw MessageError("archived is \(flag)") }
      change = .archivedSet(NoteID(try Self.identifier(entity)), archived: flag == 1)
    case .sortDateSet:
      change = .sortDateSet(NoteID(try Self.identifier(entity)), sortDate: Self.date(date))
    case .tagsSet:
      change = .tagsSet(NoteID(try Self.identifier(entity)), tags: names)
    case .attachmentsSet:
      guard ids.count % 16 == 0 else { throw MessageError("attachment ids") }
      var attachments: [AttachmentID] = []
      for offset in stride(from: 0, to: ids.count, by: 16) {
        attachments.append(AttachmentID(try Self.identifier(ids[offset..<offset + 16])))
      }
      change = .attachmentsSet(NoteID(try Self.identifier(entity)), attachments: attachments)
    case .noteDeleted:
      change = .noteDeleted(NoteID(try Self.identifier(entity)))
    case .attachmentAdded:
      guard let blobHash = BlobHash(bytes: Array(hash)) else { throw MessageError("hash") }
      change = .attachmentAdded(
        Attachment(
          id: AttachmentID(try Self.identifier(entity)),
          noteID: NoteID(try Self.identifier(owner)), mimeType: text, width: Int(width),
          height: Int(height), blobHash: blobHash, byteCount: Int(byteCount)))
    case .attachmentDeleted:
      change = .attachmentDeleted(AttachmentID(try Self.identifier(entity)))
    case .tagRenamed:
      change = .tagRenamed(name: text)
    case .tagDeleted:
      change = .tagDeleted(name: text)
    default:
      change = .unknown(kind: EventKind(rawValue: kind))
    }
    return Event(stamp: stamp, change: change)
  }

  /// The stamp in the 24 bytes at `offset`: time, then replica, big-endian.
  static func stamp(_ bytes: [UInt8], at offset: Int) -> Stamp {
    func word(_ at: Int) -> UInt64 {
      bytes[at..<at + 8].reduce(0) { $0 << 8 | UInt64($1) }
    }
    return Stamp(
      time: HybridTime(rawValue: word(offset)),
      replica: ReplicaID(Identifier(high: word(offset + 8), low: word(offset + 16))))
  }

  static func bytes(_ identifier: Identifier) -> Data {
    var data = Data(capacity: 16)
    withUnsafeBytes(of: identifier.high.bigEndian) { data.append(contentsOf: $0) }
    withUnsafeBytes(of: identifier.low.bigEndian) { data.append(contentsOf: $0) }
    return data
  }

  static func identifier(_ data: Data) throws -> Identifier {
    guard data.count == 16 else { throw MessageError("an id of \(data.count) bytes") }
    return data.withUnsafeBytes { bytes in
      Identifier(
        high: UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: 0, as: UInt64.self)),
        low: UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt64.self)))
    }
  }

  static func milliseconds(_ date: Date) -> Int64 {
    Int64((date.timeIntervalSince1970 * 1000).rounded())
  }

  static func date(_ milliseconds: Int64) -> Date {
    Date(timeIntervalSince1970: Double(milliseconds) / 1000)
  }
}
