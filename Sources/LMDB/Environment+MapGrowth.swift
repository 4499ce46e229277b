internal import CLMDB

extension Environment {
  /// Doubles the map after a write failed with a full map, unless another writer already grew
  /// it since `observed` was read.
  func growMap(from observed: Int, cause: LMDBError) throws {
    try closingAfterFailedRemap {
      try lock.withExclusive { () throws(LMDBError) in
        guard !isClosed else { throw closedError("grow the map") }
        guard currentMapSize <= observed else { return }
        guard currentMapSize < configuration.maximumMapSize else {
          throw LMDBError(
            code: .mapFull, operation: cause.operation, path: path,
            message:
              "the map is full at its maximum size; raise maximumMapSize (now "
              + "\(formattedBytes(configuration.maximumMapSize)))")
        }
        let grown = min(currentMapSize * 2, configuration.maximumMapSize)
        try remap(to: grown, "grow the map")
      }
    }
  }

  /// Adopts the larger map that another process set (`MDB_MAP_RESIZED`).
  func adoptMapSizeOfOtherProcess() throws {
    try closingAfterFailedRemap {
      try lock.withExclusive { () throws(LMDBError) in
        guard !isClosed else { throw closedError("adopt the map size") }
        try remap(to: 0, "adopt the map size")
      }
    }
  }

  /// Maps the file anew at `size` bytes (0: the size the newest meta page records), with `lock`
  /// held exclusively.
  ///
  /// liblmdb unmaps the file before it maps it again; when the new map cannot be made (the
  /// process's address space has no room for it), the handle is left with no map, and any
  /// later transaction on it would read unmapped memory. So a failed remap closes the
  /// environment: this call throws the cause, every later call throws
  /// ``LMDBError/Code/environmentClosed``, and the path can be opened again (at the map size
  /// the file records, which the failed remap did not change).
  private func remap(to size: Int, _ operation: String) throws(LMDBError) {
    let rc = mdb_env_set_mapsize(handle, size)
    guard rc == MDB_SUCCESS else {
      closeHandle()
      let wanted = size == 0 ? "the size another process set" : formattedBytes(size)
      throw makeError(
        rc, operation, path: path,
        hint: "the file could not be mapped at \(wanted) (the process's address space has no "
          + "room for it), so the environment was closed; open it again")
    }
    var info = MDB_envinfo()
    try check(mdb_env_info(handle, &info), "read environment info", path: path)
    currentMapSize = info.me_mapsize
    mapStart = MapBounds.mappedAddress(of: handle)
  }

  /// Runs `body` (a remap under the exclusive lock); if it closed the environment, takes it out
  /// of the registry and runs the close handlers once the lock is released, as ``close()``
  /// does.
  private func closingAfterFailedRemap(_ body: () throws -> Void) throws {
    do {
      try body()
    } catch {
      if !isOpen {
        Registry.environments.withLock { environments in
          if environments[path]?.environment === self { environments[path] = nil }
        }
        runCloseHandlers()
      }
      throw error
    }
  }
}
