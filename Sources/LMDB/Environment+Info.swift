internal import CLMDB

extension Environment {
  /// The map size, page size, last page and transaction, and reader slots in use.
  public func info() throws -> EnvironmentInfo {
    try TransactionDepth.refuseInside("read environment info", path: path)
    return try lock.withShared { () throws(LMDBError) -> EnvironmentInfo in
      guard !isClosed else { throw closedError("read environment info") }
      var info = MDB_envinfo()
      try check(mdb_env_info(handle, &info), "read environment info", path: path)
      var stat = MDB_stat()
      try check(mdb_env_stat(handle, &stat), "read environment statistics", path: path)
      return EnvironmentInfo(
        mapSize: info.me_mapsize, pageSize: Int(stat.ms_psize),
        lastPageNumber: info.me_last_pgno, lastTransactionID: info.me_last_txnid,
        maximumReaders: Int(info.me_maxreaders), readersInUse: Int(info.me_numreaders))
    }
  }

  /// Page and entry counts of the main (unnamed) database, which lists the named databases.
  public func statistics() throws -> DatabaseStatistics {
    try TransactionDepth.refuseInside("read environment statistics", path: path)
    return try lock.withShared { () throws(LMDBError) -> DatabaseStatistics in
      guard !isClosed else { throw closedError("read environment statistics") }
      var stat = MDB_stat()
      try check(mdb_env_stat(handle, &stat), "read environment statistics", path: path)
      return DatabaseStatistics(stat)
    }
  }
}
