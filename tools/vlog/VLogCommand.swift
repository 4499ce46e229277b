import ArgumentParser

/// The `vlog` command: inspect, replay and verify VLog stores, and run and use the sync server.
@main
struct VLogCommand: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "vlog",
    abstract: "Inspect, replay and verify VLog stores, and run and use the VLog sync server.",
    version: VLogVersion.current,
    subcommands: [Demo.self]
  )
}

/// The version `vlog --version` prints.
enum VLogVersion {
  static let current = "0.1.0"
}
