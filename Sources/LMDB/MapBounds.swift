internal import CLMDB

#if canImport(Glibc)
  internal import Glibc
#elseif canImport(Darwin)
  internal import Darwin
#endif

/// Where an environment's data file is mapped, so that every key and value LMDB hands back can
/// be checked to lie within the file before anyone reads it.
///
/// LMDB trusts the sizes stored in its pages: a damaged node size makes it return a value that
/// runs past the end of the file (SIGBUS when read) or of the map (SIGSEGV). Checked against
/// these bounds, such a value is an ``LMDBError/Code/corrupted`` error instead.
struct MapBounds {
  /// The map's first byte; 0 where the platform does not say (then only sizes are checked).
  let start: UInt
  /// The map's length.
  let length: UInt
  /// Where the pages in use end: the last page the environment's newest snapshot uses, plus
  /// one.
  let dataEnd: UInt

  /// The bounds now, from the map's address (``mappedAddress(of:)``) and the environment's
  /// newest snapshot. A write transaction may read pages it spilled to the file past that
  /// snapshot's last page: for one, the pages in use end with the map.
  init(handle: OpaquePointer, start: UInt, pageSize: Int, isWrite: Bool) {
    var info = MDB_envinfo()
    if mdb_env_info(handle, &info) == MDB_SUCCESS {
      self.start = start
      length = UInt(info.me_mapsize)
      dataEnd =
        isWrite ? start &+ length : start &+ UInt(info.me_last_pgno + 1) &* UInt(pageSize)
    } else {
      self.start = 0
      length = 0
      dataEnd = 0
    }
  }

  /// Whether `value` lies within the pages in use, if it points into the map (a value a write
  /// transaction wrote lies in memory of its own, and may be as large as the map).
  @inline(__always)
  func contains(_ value: MDB_val) -> Bool {
    let address = UInt(bitPattern: value.mv_data)
    if start != 0, address &- start < length {
      return address <= dataEnd && value.mv_size <= dataEnd &- address
    }
    return value.mv_size <= length
  }

  /// The address the data file of the environment `handle` is mapped at: on Linux, read from
  /// `/proc/self/maps` by the file's device and inode; 0 where that is not available.
  static func mappedAddress(of handle: OpaquePointer) -> UInt {
    #if os(Linux)
      var descriptor: Int32 = -1
      var status = stat()
      guard mdb_env_get_fd(handle, &descriptor) == MDB_SUCCESS, fstat(descriptor, &status) == 0,
        let file = fopen("/proc/self/maps", "r")
      else { return 0 }
      defer { fclose(file) }
      var line: UnsafeMutablePointer<CChar>?
      var capacity = 0
      defer { free(line) }
      while getline(&line, &capacity, file) > 0, let line {
        // start-end perms offset major:minor inode path
        let fields = String(cString: line).split(separator: " ", omittingEmptySubsequences: true)
        guard fields.count >= 5, fields[2] == "00000000" || UInt(fields[2], radix: 16) == 0,
          UInt(fields[4]) == UInt(status.st_ino)
        else { continue }
        // glibc's major() and minor() are macros, not imported: their arithmetic.
        let dev = UInt64(status.st_dev)
        let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & ~0xfff)
        let minor = (dev & 0xff) | ((dev >> 12) & ~0xff)
        let device = fields[3].split(separator: ":").compactMap { UInt64($0, radix: 16) }
        guard device == [major, minor],
          let start = fields[0].split(separator: "-").first.flatMap({ UInt($0, radix: 16) })
        else { continue }
        return start
      }
      return 0
    #else
      return 0
    #endif
  }
}
