import ArgumentParser
import Foundation
import Logging
import VLog
import VLogServer
import VLogSync

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// The server and user options of the commands that talk to a server.
struct ServerOptions: ParsableArguments {
  @Option(name: .long, help: "The server's base URL, such as http://127.0.0.1:8080.")
  var server: String?

  @Option(name: .long, help: "The account's user name.")
  var user: String?

  @Flag(
    name: .long,
    help: """
      The account is end-to-end encrypted: the server stores its notes sealed. Without it, a \
      new account is clear, and an existing one is as the server says; with it, a server that \
      says otherwise is refused. No account's password leaves this machine: the server gets \
      a secret drawn from it.
      """)
  var encrypted = false

  /// How an encrypted account's keys are drawn from the password: at the standard cost; nil
  /// for an account that is not encrypted.
  var encryption: KeyDerivationCost? { encrypted ? .standard : nil }

  func validate() throws {
    if let server, !(server.hasPrefix("http://") || server.hasPrefix("https://")) {
      throw ValidationError("--server: '\(server)' is not an http:// or https:// URL")
    }
  }
}

/// Reads the password from `variable` (`VLOG_PASSWORD`), or asks for it without echo on a
/// terminal. It is never an argument, so it never shows in the process list.
func readPassword(prompt: String = "Password: ", variable: String = "VLOG_PASSWORD") throws
  -> String
{
  if let password = ProcessInfo.processInfo.environment[variable], !password.isEmpty {
    return password
  }
  guard isatty(STDIN_FILENO) != 0 else {
    throw CLIError("no password: set \(variable), or run in a terminal to be asked for it")
  }
  guard let password = getpass(prompt) else { throw CLIError("could not read the password") }
  return String(cString: password)
}

/// `vlog sync`.
struct SyncCommand: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "sync",
    abstract: "Sync a store with a server: push its outbox, pull everything new.",
    discussion: """
      The server and user are remembered in the store's sync-state.json, so later syncs need \
      neither. The password comes from VLOG_PASSWORD or a prompt, never from an argument; the \
      session token it gets is kept in the store's credentials.json (mode 0600), so later \
      syncs need no password until the token expires or is revoked. A store belongs to the \
      first account and server it signs in to: syncing it as another is refused (its notes \
      would go into that account). To start over, sync a new store, or erase this one with \
      'vlog erase'. A failed sign-in writes nothing. With --watch, it then keeps the store \
      in sync until interrupted: it holds the server's live channel, pulls as soon as another \
      device pushes, pushes two seconds after a local change, and prints each change pulled \
      (with --json, one JSON object per line). An end-to-end encrypted account (--encrypted \
      at its first sync) seals what it pushes and opens what it pulls; its keys are kept in \
      credentials.json beside the token, so later syncs need neither the flag nor the password. \
      With --check, it syncs nothing: it compares the store's events with the server's and \
      lists each event one side lacks, the note it is about, and whether the next sync repairs \
      it.
      """)

  @OptionGroup var options: StoreOptions
  @OptionGroup var server: ServerOptions

  @Flag(name: .long, help: "Keep syncing live, printing each change pulled, until interrupted.")
  var watch = false

  @Flag(
    name: .long,
    help: """
      Sync nothing: name the events and notes this store and the server do not share, and \
      whether the next sync repairs them (exit status 1 if they differ).
      """)
  var check = false

  func validate() throws {
    if check && watch { throw ValidationError("--check and --watch do not go together") }
  }

  func run() async throws {
    let path = try options.path()
    let files = FileManager.default
    let isNew = !files.fileExists(atPath: path + "/data.mdb")
    let directoryIsNew = !files.fileExists(atPath: path)
    // A check compares a store that synced: it makes none.
    let store = try options.open(creating: !check)
    do {
      try await run(on: store)
      store.close()
    } catch {
      // A store this sync made and that holds nothing — a wrong password, a server that
      // cannot be reached — goes again: a failed first sync leaves nothing on disk.
      let empty = isNew && ((try? store.eventCount()) ?? 1) == 0
      store.close()
      if empty { Self.remove(newStore: path, directoryToo: directoryIsNew) }
      throw error
    }
  }

  /// Removes the files a new store's open and a failed first sync made in `path`, and the
  /// directory too if it made that and nothing else is in it.
  static func remove(newStore path: String, directoryToo: Bool) {
    let files = FileManager.default
    for name in ["data.mdb", "lock.mdb", "open.lock", "sync-state.json", "credentials.json"] {
      try? files.removeItem(atPath: path + "/" + name)
    }
    if directoryToo, (try? files.contentsOfDirectory(atPath: path))?.isEmpty == true {
      try? files.removeItem(atPath: path)
    }
  }

  private func run(on store: NoteStore) async throws {
    if check, try store.account() == nil {
      throw ValidationError("this store has not synced yet: there is nothing to check")
    }
    let state = try SyncAccount.loadState(from: SyncAccount.stateFile(for: store))
    guard let url = server.server ?? state?.server else {
      throw ValidationError("this store has not synced yet: pass --server URL")
    }
    guard let user = server.user ?? state?.username else {
      throw ValidationError("this store has not synced yet: pass --user NAME")
    }
    // A kept token for this user and server spares the password, unless one is given.
    let username = Credentials(username: user, password: "").normalizedUsername
    let sameAccount = state?.binding == AccountBinding(server: url, username: username)
    let kept = sameAccount ? try FileCredentialStore.file(for: store).token(for: username) : nil
    let given = ProcessInfo.processInfo.environment["VLOG_PASSWORD"].flatMap {
      $0.isEmpty ? nil : $0
    }
    let password = kept == nil || given != nil ? try readPassword() : nil
    let account = try Self.account(
      for: store, server: url, user: user, password: password, encryption: server.encryption)
    if check {
      let (output, inSync) = try await Self.check(
        on: store, account: account, signIn: password != nil)
      try options.emit(output)
      if !inSync { throw ExitCode(1) }
      return
    }
    let output = try await Self.execute(on: store, account: account, signIn: password != nil)
    try options.emit(output)
    if watch { try await Self.watch(store, account: account, json: options.json) }
  }

  /// The account that syncs `store`; without a password, with the token kept in the store's
  /// credentials file.
  static func account(
    for store: NoteStore, server: String, user: String, password: String?,
    encryption cost: KeyDerivationCost? = nil, clearCost: KeyDerivationCost = .standard,
    transport: (any Transport)? = nil
  ) throws -> SyncAccount {
    let stateFile = SyncAccount.stateFile(for: store)
    let transport = transport ?? HTTPTransport(baseURL: server)
    let tokens = FileCredentialStore.file(for: store)
    // Encrypted for certain with --encrypted; otherwise as the account's keys kept with the
    // token, its state file, or the server before the first sign-in say.
    let encryption = EncryptionOptions(cost: cost ?? clearCost, isRequired: cost != nil)
    // The account ignores a state file of another account or server, and refuses a store
    // bound to another before it sends anything; it writes only once the server accepts it.
    return if let password {
      try SyncAccount(
        store: store, transport: transport,
        credentials: Credentials(username: user, password: password), credentialStore: tokens,
        stateFile: stateFile, encryption: encryption)
    } else {
      try SyncAccount(
        store: store, transport: transport, username: user, credentialStore: tokens,
        stateFile: stateFile, encryption: encryption)
    }
  }

  /// Syncs `store` once; without a password, with the token kept in the store's credentials
  /// file.
  static func execute(
    on store: NoteStore, server: String, user: String, password: String?,
    encryption: KeyDerivationCost? = nil, cost: KeyDerivationCost = .standard,
    transport: (any Transport)? = nil
  ) async throws -> CommandOutput {
    let account = try account(
      for: store, server: server, user: user, password: password, encryption: encryption,
      clearCost: cost, transport: transport)
    return try await execute(on: store, account: account, signIn: password != nil)
  }

  /// Syncs `store` once with `account`, signing in first if told.
  static func execute(on store: NoteStore, account: SyncAccount, signIn: Bool) async throws
    -> CommandOutput
  {
    let server = account.binding.server
    let report: SyncReport
    do {
      // A password given is used: it signs in afresh, replacing the kept token.
      if signIn { try await account.signIn() }
      report = try await account.sync()
    } catch let error as APIError where error.code == .signedOut {
      throw CLIError("\(error.message): run `VLOG_PASSWORD=… vlog sync` or run it in a terminal")
    } catch let error as VLogError where error.code == .otherAccount {
      throw CLIError(
        "\(error.message). Start over: `vlog sync --store NEW_DIRECTORY …`, or "
          + "`vlog erase --store \(store.path) --yes` and sync again")
    }
    let after = await account.state
    struct JSON: Encodable {
      let server: String
      let username: String
      let pushed: Int
      let pulled: Int
      let applied: Int
      let calls: Int
      let blobsUploaded: Int
      let repaired: Int
      let fetched: Int
      let deferred: Int
      let cursor: UInt64
      let eventSetDigest: String
      let serverEventSetDigest: String
      let inSync: Bool
      let clockSkewMilliseconds: Int64?
      let quarantined: Int
      let cursorReset: Bool
      let movedToNewReplica: Int
    }
    let local = after.digest(counting: try store.eventSetDigest())
    var lines = [
      "synced with \(server) as \(after.username): pushed \(report.pushed) events, pulled "
        + "\(report.pulled) (\(report.applied) new) in \(report.calls) calls"
        + (report.blobsUploaded > 0 ? "; uploaded \(report.blobsUploaded) blobs" : ""),
      "event sets: this store \(local), server \(report.serverEventSetDigest) — "
        + (report.inSync
          ? "in sync"
          : report.deferred > 0
            ? "different (\(report.deferred) events are stamped too far ahead of the server's "
              + "clock to push yet)"
            : "different (the server changed during the sync; sync again)"),
    ]
    if report.restamped > 0, let restamp = after.restamped {
      lines.insert(describe(restamp), at: 1)
    }
    if report.repaired > 0 || report.fetched > 0 {
      lines.insert(
        "repaired: the event sets differed; pushed \(report.repaired) events the server "
          + "lacked and fetched \(report.fetched) this store lacked", at: 1)
    }
    if report.cursorReset {
      lines.insert(
        "the server's log is shorter than this store last saw (restored from a backup?): pulled "
          + "from the start, and compared event sets to push back what the server lost", at: 1)
    }
    if report.movedToNewReplica > 0 {
      lines.insert(
        "new replica id: the server holds other changes under the ids of \(report.movedToNewReplica) "
          + "changes made here — another device shares this store's replica id (a copied or "
          + "restored store) — so they went under a new one", at: 1)
    }
    if report.quarantined > 0 {
      lines.insert(
        "quarantined: \(report.quarantined) events the server served were set aside: no device "
          + "of the account vouched for them ('vlog status' lists them)", at: 1)
    }
    if let skew = after.clockSkewMilliseconds { lines.append(describeSkew(skew)) }
    return CommandOutput(
      text: lines.joined(separator: "\n"),
      json: JSON(
        server: server, username: after.username, pushed: report.pushed, pulled: report.pulled,
        applied: report.applied, calls: report.calls, blobsUploaded: report.blobsUploaded,
        repaired: report.repaired, fetched: report.fetched, deferred: report.deferred,
        cursor: after.cursor, eventSetDigest: local.description,
        serverEventSetDigest: report.serverEventSetDigest.description, inSync: report.inSync,
        clockSkewMilliseconds: after.clockSkewMilliseconds, quarantined: report.quarantined,
        cursorReset: report.cursorReset, movedToNewReplica: report.movedToNewReplica))
  }
}

extension SyncCommand {
  /// Keeps `store` in sync live until SIGINT or SIGTERM, printing each change pulled and each
  /// change of the live channel's state.
  static func watch(_ store: NoteStore, account: SyncAccount, json: Bool) async throws {
    let automatic = AutomaticSync(account: account)
    let changes = store.changes()
    let statuses = await automatic.statusUpdates()
    let (signals, sources) = interruptions()
    await withTaskGroup(of: Void.self) { tasks in
      tasks.addTask {
        for await change in changes where change.source == .sync {
          emit(watchLine(for: change, in: store), json: json)
        }
      }
      tasks.addTask {
        var shown = SyncStatus.LiveChannelState.off
        var error: String?
        for await status in statuses {
          if status.liveChannel != shown {
            shown = status.liveChannel
            emit(WatchLine(event: "live", message: liveText(status.liveChannel)), json: json)
          }
          if status.lastError?.message != error {
            error = status.lastError?.message
            if let error { emit(WatchLine(event: "error", message: "sync: \(error)"), json: json) }
          }
        }
      }
      await automatic.start()
      // Until interrupted; then the automatic sync stops, which ends the status stream.
      for await _ in signals { break }
      await automatic.stop()
      tasks.cancelAll()
    }
    for source in sources { source.cancel() }
  }

  /// One line of `vlog sync --watch`.
  struct WatchLine: Encodable {
    var time = ISO8601.format(milliseconds: Date().milliseconds)
    let event: String
    let message: String
    var notes: [String]? = nil
  }

  private static func emit(_ line: WatchLine, json: Bool) {
    if json {
      let encoder = JSONEncoder()
      encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
      // Strings and a list of strings always encode.
      guard let data = try? encoder.encode(line) else { return }
      print(String(decoding: data, as: UTF8.self))
    } else {
      print("\(line.time)  \(line.message)")
    }
    // At once, though standard output is a pipe (all streams: `stdout` is a shared global).
    fflush(nil)
  }

  private static func watchLine(for change: ChangeSet, in store: NoteStore) -> WatchLine {
    var parts: [String] = []
    if !change.insertedNotes.isEmpty { parts.append("\(change.insertedNotes.count) new") }
    if !change.updatedNotes.isEmpty { parts.append("\(change.updatedNotes.count) changed") }
    if !change.deletedNotes.isEmpty { parts.append("\(change.deletedNotes.count) deleted") }
    if change.tagsChanged { parts.append("tags changed") }
    let notes = change.insertedNotes.union(change.updatedNotes).sorted {
      $0.description < $1.description
    }
    let titles = notes.prefix(5).map { id -> String in
      // A note that cannot be read is shown by its id alone: the line reports, it does not fail.
      let text = (try? store.note(id))??.text ?? ""
      let title = text.split(separator: "\n", maxSplits: 1).first.map(String.init) ?? ""
      return "\(id): " + (title.count > 60 ? title.prefix(59) + "…" : title)
    }
    let events = change.eventCount == 1 ? "1 event" : "\(change.eventCount) events"
    let summary = "pulled \(events): " + parts.joined(separator: ", ")
    return WatchLine(
      event: "pulled",
      message: ([summary] + titles.map { "  " + $0 }).joined(separator: "\n"),
      notes: notes.map { $0.description })
  }

  private static func liveText(_ state: SyncStatus.LiveChannelState) -> String {
    switch state {
    case .off: "live channel closed"
    case .connecting: "live channel opening"
    case .open: "live channel open: changes on other devices arrive as they are pushed"
    case .waiting(let reason, let retryIn):
      "live channel not open (\(reason)); polling, next attempt in "
        + formatDuration(milliseconds: Int64(retryIn.components.seconds * 1000))
    }
  }

  /// SIGINT and SIGTERM, as they come, and the sources that catch them, which the caller keeps
  /// (and cancels) while it listens: their default action, ending the process, is off.
  private static func interruptions() -> (AsyncStream<Int32>, [any DispatchSourceSignal]) {
    let (stream, continuation) = AsyncStream<Int32>.makeStream()
    let sources = [SIGINT, SIGTERM].map { number -> any DispatchSourceSignal in
      signal(number, SIG_IGN)
      let source = DispatchSource.makeSignalSource(signal: number)
      source.setEventHandler { continuation.yield(number) }
      source.resume()
      return source
    }
    return (stream, sources)
  }
}

/// `clock: this device is 24 h ahead of the server — WARNING: …`.
func describeSkew(_ skew: Int64) -> String {
  let direction = skew < 0 ? "ahead of" : "behind"
  let warning =
    abs(skew) > 60_000
    ? " — WARNING: set this device's clock; the server refuses events stamped too far ahead"
    : ""
  return "clock: this device is \(formatDuration(milliseconds: skew)) \(direction) the server"
    + warning
}

/// `vlog status`.
struct Status: StoreCommand {
  static let configuration = CommandConfiguration(
    abstract: "Show a store's sync status: outbox, cursor, last sync, clock skew, digests.")

  @OptionGroup var options: StoreOptions

  func execute(on store: NoteStore) throws -> CommandOutput {
    let binding = try store.account()
    // The state file of the account the store belongs to; one of another is not its own.
    let state = try SyncAccount.loadState(from: SyncAccount.stateFile(for: store)).flatMap {
      $0.binding != nil && $0.binding == binding ? $0 : nil
    }
    let outbox = try store.outboxCount()
    let pending = try store.pendingNotes()
    let stored = try store.eventSetDigest()
    let local = state?.digest(counting: stored) ?? stored
    struct JSON: Encodable {
      let server: String?
      let username: String?
      let outbox: Int
      let cursor: UInt64
      let lastSync: String?
      let clockSkewMilliseconds: Int64?
      let lastError: String?
      let eventSetDigest: String
      let serverEventSetDigest: String?
      let inSync: Bool
      let restamped: SyncState.Restamp?
      /// The notes with changes the server has not stored yet.
      let pendingNotes: [String]
      /// The events the server served that this device refused and set aside.
      let quarantined: [QuarantinedEvent]
    }
    let inSync = outbox == 0 && state?.serverEventSetDigest == local.description
    var lines = ["outbox: \(outbox) events not yet acknowledged by the server"]
    if !pending.isEmpty {
      lines.append(
        "pending: \(pending.count) note\(pending.count == 1 ? "" : "s") with changes the server "
          + "has not stored:")
      lines += pending.prefix(20).map { "  \($0)" }
      if pending.count > 20 {
        lines.append("  … and \(pending.count - 20) more (--json lists all)")
      }
    }
    if let binding, let state {
      lines.insert("account: \(binding.username) on \(binding.server)", at: 0)
      lines.append("cursor: \(state.cursor)")
      lines.append("last sync: \(state.lastSync.map(format) ?? "never")")
      if let skew = state.clockSkewMilliseconds { lines.append(describeSkew(skew)) }
      if let error = state.lastError { lines.append("last error: \(error)") }
      if let restamp = state.restamped { lines.append(describe(restamp)) }
      if let quarantined = state.quarantined, !quarantined.isEmpty {
        lines.append(
          "quarantined: \(quarantined.count) events the server served were set aside: no "
            + "device of the account vouched for them; none of them is applied")
        lines += quarantined.prefix(20).map { "  \($0.id) \($0.kind): \($0.reason)" }
        if quarantined.count > 20 {
          lines.append("  … and \(quarantined.count - 20) more (--json lists all)")
        }
      }
      lines.append(
        "event sets: this store \(local), server \(state.serverEventSetDigest ?? "unknown") at the last sync — "
          + (inSync ? "in sync" : "not in sync"))
    } else if let binding {
      lines.insert("account: \(binding.username) on \(binding.server)", at: 0)
      lines.append("last sync: never")
      lines.append("event set: \(local)")
    } else {
      lines.insert("account: none (this store has never synced; see 'vlog sync')", at: 0)
      lines.append("event set: \(local)")
    }
    return CommandOutput(
      text: lines.joined(separator: "\n"),
      json: JSON(
        server: binding?.server, username: binding?.username, outbox: outbox,
        cursor: state?.cursor ?? 0, lastSync: state?.lastSync.map(format),
        clockSkewMilliseconds: state?.clockSkewMilliseconds, lastError: state?.lastError,
        eventSetDigest: local.description, serverEventSetDigest: state?.serverEventSetDigest,
        inSync: inSync, restamped: state?.restamped, pendingNotes: pending.map(\.description),
        quarantined: state?.quarantined ?? []))
  }
}

/// `restamped: 3 outbox events stamped up to … were given new stamps at …`.
func describe(_ restamp: SyncState.Restamp) -> String {
  "restamped: the server refused \(restamp.events) outbox events stamped up to "
    + "\(restamp.latestOldTime), too far ahead of its clock; they were given new stamps at "
    + "\(format(restamp.date)) and pushed"
}

/// `vlog erase`.
struct Erase: ParsableCommand {
  static let configuration = CommandConfiguration(
    abstract: "Delete a store: its notes, log, attachments and the account it belongs to.",
    discussion: """
      The way to start over, for example to sync the directory as another account (a store \
      belongs to the first account it signs in to). What the store holds that was not synced \
      is lost: the command says how much, and erases only with --yes. The store must not be \
      open elsewhere.
      """)

  @OptionGroup var options: StoreOptions

  @Flag(name: .long, help: "Erase, losing what was not synced.")
  var yes = false

  func run() throws {
    let path = try options.path()
    guard FileManager.default.fileExists(atPath: path + "/data.mdb") else {
      throw CLIError("no store at '\(path)'; check the path")
    }
    try refuseDamagedStructure(path, kind: "store")
    let store = try NoteStore.open(at: path)
    let notes = try store.statistics().notes
    let outbox = try store.outboxCount()
    let binding = try store.account()
    let syncFiles = [SyncAccount.stateFile(for: store), FileCredentialStore.file(for: store).path]
    store.close()
    let what =
      "\(notes) notes, \(outbox) events not acknowledged by a server"
      + (binding.map { ", bound to \($0)" } ?? "")
    guard yes else {
      throw CLIError("'\(path)' holds \(what); to erase it, run again with --yes")
    }
    try NoteStore.erase(at: path)
    for file in syncFiles where FileManager.default.fileExists(atPath: file) {
      try FileManager.default.removeItem(atPath: file)
    }
    struct Output: Encodable {
      let path: String
      let notes: Int
      let unsynced: Int
    }
    try options.emit(
      CommandOutput(
        text: "erased '\(path)': \(what)",
        json: Output(path: path, notes: notes, unsynced: outbox)))
  }
}
