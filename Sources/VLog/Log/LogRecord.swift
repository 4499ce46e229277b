internal import LMDB

/// A log entry's bytes: a 4-byte checksum (the low 32 bits of the XXH3 hash of the event,
/// big-endian) followed by the encoded event (``EventCodec``).
///
/// Stores of format 1 used the low 32 bits of XXH64; opening one rewrites its checksums.
package enum LogRecord {
  package static let headerSize = 4
  /// The longest entry: the checksum and the largest event (``Limits/eventBytes``).
  package static let maximumSize = headerSize + Limits.eventBytes

  package static func checksum(_ event: UnsafeRawBufferPointer) -> UInt32 {
    UInt32(truncatingIfNeeded: Hash.xxh3(event))
  }

  /// Writes the record of `event` into a buffer of `headerSize + event.count` bytes.
  package static func write(_ event: [UInt8], into buffer: UnsafeMutableRawBufferPointer) {
    event.withUnsafeBytes { event in
      buffer.storeBytes(of: checksum(event).bigEndian, as: UInt32.self)
      UnsafeMutableRawBufferPointer(rebasing: buffer[headerSize...]).copyMemory(from: event)
    }
  }

  /// The event bytes of a log entry, after checking its length and its checksum.
  ///
  /// - Throws: ``VLogError/Code/corruptStore`` naming the entry.
  package static func event(
    in entry: UnsafeRawBufferPointer, sequence: UInt64
  ) throws(VLogError) -> UnsafeRawBufferPointer {
    guard entry.count >= headerSize else {
      throw VLogError(.corruptStore, "event \(sequence): the entry is shorter than its checksum")
    }
    guard entry.count <= maximumSize else {
      throw VLogError(
        .corruptStore,
        "event \(sequence): the entry is \(entry.count) bytes, longer than the largest event "
          + "(\(maximumSize) bytes)")
    }
    let stored = BigEndian.read(UInt32.self, from: entry) ?? 0
    let event = UnsafeRawBufferPointer(rebasing: entry[headerSize...])
    guard checksum(event) == stored else {
      throw VLogError(.corruptStore, "event \(sequence): the checksum does not match its bytes")
    }
    return event
  }
}
