/// Big-endian integers: the byte order of keys that must sort as their numbers do, and of every
/// fixed-width integer VLog stores.
///
/// Reads check the length of the bytes they are given and return nil when the bytes end too
/// soon, so that a short key or value read from a damaged file is reported, never read past.
///
/// The type is public, and its functions inlinable, so that a module using them gets them
/// specialized for its integer types: the compiler does not specialize a package type's generic
/// functions in another module, and each call would look up the integer type's metadata at run
/// time.
public enum BigEndian {
  /// The bytes of `value`, most significant first.
  @inlinable
  public static func bytes<T: FixedWidthInteger>(_ value: T) -> [UInt8] {
    withUnsafeBytes(of: value.bigEndian) { Array($0) }
  }

  /// Appends the bytes of `value`, most significant first.
  @inlinable
  public static func append<T: FixedWidthInteger>(_ value: T, to buffer: inout [UInt8]) {
    withUnsafeBytes(of: value.bigEndian) { buffer.append(contentsOf: $0) }
  }

  /// Reads a `T` at `offset`, or nil if the bytes end before it does.
  @inlinable
  public static func read<T: FixedWidthInteger>(
    _ type: T.Type, from bytes: UnsafeRawBufferPointer, at offset: Int = 0
  ) -> T? {
    guard offset >= 0, bytes.count - offset >= MemoryLayout<T>.size else { return nil }
    return T(bigEndian: bytes.loadUnaligned(fromByteOffset: offset, as: T.self))
  }

  /// Reads a `T` at `offset` of an array, or nil if it ends before it does.
  @inlinable
  public static func read<T: FixedWidthInteger>(
    _ type: T.Type, from bytes: [UInt8], at offset: Int = 0
  ) -> T? {
    bytes.withUnsafeBytes { read(type, from: $0, at: offset) }
  }

  /// Reads a `T` at `offset` of a slice (counted from the slice's start), or nil if it ends
  /// before it does.
  @inlinable
  public static func read<T: FixedWidthInteger>(
    _ type: T.Type, from bytes: ArraySlice<UInt8>, at offset: Int = 0
  ) -> T? {
    bytes.withUnsafeBytes { read(type, from: $0, at: offset) }
  }
}
