internal import CLMDB

extension Environment {
  /// Doubles the map after a write failed with a full map, unless another writer already grew
  /// it since `observed` was read.
  func growMap(from observed: Int, cause: LMDBError) throws {
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
      try check(mdb_env_set_mapsize(handle, grown), "grow the map", path: path)
      var info = MDB_envinfo()
      try check(mdb_env_info(handle, &info), "read environment info", path: path)
      currentMapSize = info.me_mapsize
      mapStart = MapBounds.mappedAddress(of: handle)
    }
  }

  /// Adopts the larger map that another process set (`MDB_MAP_RESIZED`).
  func adoptMapSizeOfOtherProcess() throws {
    try lock.withExclusive { () throws(LMDBError) in
      guard !isClosed else { throw closedError("adopt the map size") }
      try check(mdb_env_set_mapsize(handle, 0), "adopt the map size", path: path)
      var info = MDB_envinfo()
      try check(mdb_env_info(handle, &info), "read environment info", path: path)
      currentMapSize = info.me_mapsize
      mapStart = MapBounds.mappedAddress(of: handle)
    }
  }
}
