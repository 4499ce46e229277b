/// The slice of ``ServerStorage`` that carries live signals between the servers of a storage.
protocol SignalStorage: Sendable {
  /// Where the storage sends a ``LiveSignal`` for each committed write that live channels must
  /// hear of — a log that grew, a session that ended — whichever server made it.
  var liveFeed: LiveFeed { get }

  /// Hears the signals of every server of this storage and sends them to ``liveFeed``, until
  /// cancelled: on PostgreSQL, `LISTEN` on a connection of its own, listening again after the
  /// connection is lost (and then sending ``LiveSignal/resynchronize``); on LMDB, whose one
  /// server sends its own signals, nothing.
  func listenForSignals() async
}
