import ArgumentParser

/// `vlog demo`: the quick start.
struct Demo: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Show two replicas editing offline, syncing through a server, and converging."
  )

  func run() async throws {
    print(
      """
      vlog demo will start a sync server on loopback, open two replicas of one account, make
      concurrent offline edits to the same notes on both (text on one, archive and tags on the
      other), sync them through the server, and print the converged notes with the change that
      won each field.

      This build has the storage layer only; the engine and sync arrive in later versions.
      """)
  }
}
