/// What one round of a ``LogBatch`` step over facts read in rounds came to: the step's result,
/// or the facts to read before the next round.
package enum FactsRound<Result> {
  /// The step ran to its end over the facts it had; the batch holds what it decided.
  case done(Result)
  /// The step needs these facts first; the batch is as it was before the round (or, for a step
  /// run in place, as far as a step that looks everything up before it changes anything got).
  case needs(MissingLogFacts)
}

extension LogBatch {
  /// Runs `step` once over `facts`, which may not hold every answer yet (a database's, read in
  /// round trips): `.done` with its result, or `.needs` with what `facts` lacked, for the
  /// owner to read, all at once, before the next round. A lookup `facts` cannot answer throws
  /// ``MissingLogFacts`` inside the step, which ends there: this is where that becomes a
  /// value, so an owner's loop is a loop over rounds, not over errors.
  ///
  /// - Parameter inPlace: Whether the step runs on the batch itself — for a step that looks
  ///   everything up before it changes anything (``append(_:facts:)``). Otherwise it runs on a
  ///   copy, kept only when it completes.
  /// - Throws: What the step throws but missing facts.
  package mutating func round<F: LogFacts, T>(
    inPlace: Bool, facts: inout F, _ step: (inout LogBatch, inout F) throws -> T
  ) throws -> FactsRound<T> {
    do {
      if inPlace { return .done(try step(&self, &facts)) }
      var attempt = self
      let result = try step(&attempt, &facts)
      self = attempt
      return .done(result)
    } catch let missing as MissingLogFacts {
      return .needs(missing)
    }
  }
}
