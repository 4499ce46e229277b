import ArgumentParser
import Foundation
import VLog
import VLogSync
import VLogWire

/// The keys drawn from `password` as the server says the account's password is stretched
/// (`POST /v1/sessions/parameters`), for every account — no password leaves this machine.
/// `encryption` is the least key derivation cost accepted; given, the account must be
/// encrypted: a server that says otherwise is refused; else `cost` is (the standard cost, but
/// in tests).
private func passwordKeys(
  _ password: String, user: String, caller: APICaller, encryption: KeyDerivationCost?,
  cost: KeyDerivationCost
) async throws -> (keys: PasswordKeys, encrypted: Bool) {
  do {
    return try await caller.passwordKeys(
      username: user, password: password, floor: encryption ?? cost,
      encrypted: encryption != nil)
  } catch let error as AccountKeyError {
    throw CLIError(error.description)
  }
}

/// Signs in as `user`, runs `body` with the token and what the server knows as the password
/// (the secret drawn from it), then signs that session out again, so a command leaves no
/// session behind.
private func withSession<R>(
  server: String, user: String, password: String, encryption: KeyDerivationCost? = nil,
  cost: KeyDerivationCost, transport: (any Transport)?,
  _ body: (APICaller, String, _ secret: String, _ encrypted: Bool) async throws -> R
) async throws -> R {
  let caller = APICaller(transport: transport ?? HTTPTransport(baseURL: server))
  let name = Credentials(username: user, password: "").normalizedUsername
  let (keys, encrypted) = try await passwordKeys(
    password, user: name, caller: caller, encryption: encryption, cost: cost)
  let (credentials, kept) = try await APICaller.signInCredentials(
    username: name, keys: keys, password: password, cost: encryption ?? cost)
  let token = try await caller.signIn(credentials).get().token
  let result = try await body(caller, token, kept.signInSecret, encrypted)
  // After a deletion or a revocation of this very session the token is already gone: the
  // answer (401) says nothing the command did not already report.
  _ = await caller.signOut(token: token)
  return result
}

/// What a command that re-keyed an account adds to its output: the new recovery key, and why
/// it matters.
private func rekeyedText(_ recoveryKey: RecoveryKey?) -> String {
  guard let recoveryKey else { return "" }
  return """

    re-keyed: keys a lost or signed-out device kept open nothing written from now on; the \
    account's devices open the new keys with the password.
    new recovery key: \(recoveryKey)
    Write it down and keep it apart from the password: it is shown this once, and the old \
    recovery key opens nothing any more.
    """
}

/// The server URL and user name, both required.
private func required(_ server: ServerOptions, _ command: String) throws -> (String, String) {
  guard let url = server.server, let user = server.user else {
    throw ValidationError("account \(command) needs --server URL and --user NAME")
  }
  return (url, user)
}

/// `vlog account delete`.
struct DeleteAccount: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "delete",
    abstract: "Delete an account and everything of it on the server.",
    discussion: """
      Erases the account's events, attachments, sessions and record on the server; stores \
      that synced with it keep their notes. The password comes from VLOG_PASSWORD or a \
      prompt. Nothing is deleted without --yes.
      """)

  @OptionGroup var server: ServerOptions

  @Flag(name: .long, help: "Confirm: delete the account and everything of it.")
  var yes = false

  @Flag(name: .long, help: "Print JSON instead of text.")
  var json = false

  func validate() throws {
    let (url, user) = try required(server, "delete")
    guard yes else {
      throw ValidationError(
        "this erases every note of '\(user.lowercased())' on \(url) for good; pass --yes to confirm"
      )
    }
  }

  func run() async throws {
    let (url, user) = try required(server, "delete")
    let output = try await Self.execute(
      server: url, user: user, password: try readPassword(), encryption: server.encryption)
    print(json ? try output.jsonText() : output.text)
  }

  static func execute(
    server: String, user: String, password: String, encryption: KeyDerivationCost? = nil,
    cost: KeyDerivationCost = .standard, transport: (any Transport)? = nil
  ) async throws -> CommandOutput {
    try await withSession(
      server: server, user: user, password: password, encryption: encryption, cost: cost,
      transport: transport
    ) { caller, token, secret, _ in
      _ = try await caller.deleteAccount(password: secret, token: token).get()
    }
    struct JSON: Encodable {
      let server: String
      let username: String
      let deleted: Bool
    }
    let name = user.lowercased()
    return CommandOutput(
      text: "deleted account '\(name)' and everything of it on \(server)",
      json: JSON(server: server, username: name, deleted: true))
  }
}

/// `vlog account password`.
struct ChangePassword: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "password",
    abstract: "Change an account's password, signing out every session.",
    discussion: """
      The password now comes from VLOG_PASSWORD or a prompt, the new one from \
      VLOG_NEW_PASSWORD or a second prompt. Every session of the account is signed out: \
      devices sign in again with the new password. An end-to-end encrypted account's keys \
      are sealed to the new password in the same change; no note is encrypted again. Then, \
      unless --no-rekey, the account is re-keyed: a lost device's keys open nothing written \
      afterwards and make no change the account's devices apply, and a new recovery key \
      replaces the old one, printed once.
      """)

  @OptionGroup var server: ServerOptions

  @Flag(
    inversion: .prefixedNo,
    help: """
      Re-key an end-to-end encrypted account too (the default): a lost device's keys open \
      nothing written afterwards, and a new recovery key is printed once. A clear account \
      has no keys to re-key.
      """)
  var rekey = true

  @Flag(name: .long, help: "Print JSON instead of text.")
  var json = false

  func run() async throws {
    let (url, user) = try required(server, "password")
    let current = try readPassword()
    let new = try readPassword(prompt: "New password: ", variable: "VLOG_NEW_PASSWORD")
    let output = try await Self.execute(
      server: url, user: user, current: current, new: new, encryption: server.encryption,
      rekey: rekey)
    print(json ? try output.jsonText() : output.text)
  }

  static func execute(
    server: String, user: String, current: String, new: String,
    encryption: KeyDerivationCost? = nil, cost: KeyDerivationCost = .standard, rekey: Bool = true,
    transport: (any Transport)? = nil
  ) async throws -> CommandOutput {
    let recoveryKey = try await withSession(
      server: server, user: user, password: current, encryption: encryption, cost: cost,
      transport: transport
    ) { caller, token, _, encrypted -> RecoveryKey? in
      guard encrypted else {
        try await caller.changeClearPassword(
          username: user, from: current, to: new, floor: encryption ?? cost, token: token)
        return nil
      }
      let cost = encryption ?? .standard
      try await caller.changeEncryptedPassword(
        username: user, from: current, to: new, cost: cost, token: token)
      guard rekey else { return nil }
      return try await caller.rekeyEncryptedAccount(
        username: user, password: new, cost: cost, token: token)
    }
    struct JSON: Encodable {
      let server: String
      let username: String
      let changed: Bool
      let recoveryKey: String?
    }
    let name = user.lowercased()
    return CommandOutput(
      text: "changed the password of '\(name)' on \(server); every session was signed out"
        + rekeyedText(recoveryKey),
      json: JSON(
        server: server, username: name, changed: true, recoveryKey: recoveryKey?.description))
  }
}

/// `vlog account sessions`.
struct SessionsCommand: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "sessions",
    abstract: "List an account's sessions, or sign one out with --revoke ID.",
    discussion: """
      Each device signed in is a session, named by an id. The password comes from \
      VLOG_PASSWORD or a prompt; the command's own session is signed out when it ends.
      """)

  @OptionGroup var server: ServerOptions

  @Option(name: .long, help: "Sign out the session with this id.")
  var revoke: String?

  @Flag(
    name: .long,
    help: """
      With --revoke, re-key an end-to-end encrypted account too: the signed-out device's \
      keys open nothing written afterwards, and a new recovery key is printed once.
      """)
  var rekey = false

  @Flag(name: .long, help: "Print JSON instead of text.")
  var json = false

  func run() async throws {
    let (url, user) = try required(server, "sessions")
    if rekey, revoke == nil { throw ValidationError("--rekey goes with --revoke ID") }
    let output = try await Self.execute(
      server: url, user: user, password: try readPassword(), revoke: revoke,
      encryption: server.encryption, rekey: rekey)
    print(json ? try output.jsonText() : output.text)
  }

  static func execute(
    server: String, user: String, password: String, revoke: String? = nil,
    encryption: KeyDerivationCost? = nil, cost: KeyDerivationCost = .standard, rekey: Bool = false,
    transport: (any Transport)? = nil
  ) async throws -> CommandOutput {
    try await withSession(
      server: server, user: user, password: password, encryption: encryption, cost: cost,
      transport: transport
    ) { caller, token, _, encrypted in
      if let revoke {
        if rekey, !encrypted {
          throw CLIError("--rekey: only an end-to-end encrypted account has keys")
        }
        _ = try await caller.revokeSession(id: revoke, token: token).get()
        var recoveryKey: RecoveryKey?
        if rekey {
          recoveryKey = try await caller.rekeyEncryptedAccount(
            username: user, password: password, cost: encryption ?? .standard, token: token)
        }
        struct JSON: Encodable {
          let revoked: String
          let recoveryKey: String?
        }
        return CommandOutput(
          text: "signed out session \(revoke)" + rekeyedText(recoveryKey),
          json: JSON(revoked: revoke, recoveryKey: recoveryKey?.description))
      }
      // The command's own session is left out: it ends with the command.
      let sessions = try await caller.sessions(token: token).get().sessions.filter { !$0.current }
      let lines = sessions.map { "\($0.id)  expires \($0.expiresAt)" }
      let text =
        sessions.isEmpty
        ? "no sessions of '\(user.lowercased())' on \(server)"
        : lines.joined(separator: "\n")
      struct JSON: Encodable { let sessions: [SessionInfo] }
      return CommandOutput(text: text, json: JSON(sessions: sessions))
    }
  }
}

/// `vlog account …`.
struct AccountCommand: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "account", abstract: "Manage accounts on a sync server.",
    subcommands: [
      CreateAccount.self, DeleteAccount.self, ChangePassword.self, SessionsCommand.self,
      RecoverAccount.self,
    ])
}

/// `vlog account create`.
struct CreateAccount: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "create",
    abstract: "Create an account on a sync server (password from VLOG_PASSWORD or a prompt).",
    discussion: """
      With --encrypted, the account is end-to-end encrypted: its keys are made here, the \
      server stores what it cannot read, and a recovery key is printed once. Without the \
      password and the recovery key, the account's notes are lost.
      """)

  @OptionGroup var server: ServerOptions

  @Flag(name: .long, help: "Print JSON instead of text.")
  var json = false

  func run() async throws {
    guard let url = server.server, let user = server.user else {
      throw ValidationError("account create needs --server URL and --user NAME")
    }
    let output = try await Self.execute(
      server: url, user: user, password: try readPassword(), encryption: server.encryption)
    print(json ? try output.jsonText() : output.text)
  }

  static func execute(
    server: String, user: String, password: String, encryption: KeyDerivationCost? = nil,
    cost: KeyDerivationCost = .standard
  ) async throws -> CommandOutput {
    let caller = APICaller(transport: HTTPTransport(baseURL: server))
    struct JSON: Encodable {
      let server: String
      let username: String
      let encrypted: Bool
      let recoveryKey: String?
    }
    guard let encryption else {
      let created = try await caller.createClearAccount(
        username: user, password: password, cost: cost)
      return CommandOutput(
        text: "created account '\(created.username)' on \(server)",
        json: JSON(
          server: server, username: created.username, encrypted: false, recoveryKey: nil))
    }
    let account = try await caller.createEncryptedAccount(
      username: user, password: password, options: EncryptionOptions(cost: encryption))
    let name = account.credentials.username.lowercased()
    let key = account.recoveryKey.description
    return CommandOutput(
      text: """
        created end-to-end encrypted account '\(name)' on \(server)
        recovery key: \(key)
        Write the recovery key down and keep it apart from the password: it is shown this \
        once. It sets a new password if the password is lost ('vlog account recover'); \
        without both, nobody can read the account's notes again, the server included.
        """,
      json: JSON(server: server, username: name, encrypted: true, recoveryKey: key))
  }
}

/// `vlog account recover`.
struct RecoverAccount: AsyncParsableCommand {
  static let configuration = CommandConfiguration(
    commandName: "recover",
    abstract: "Set a new password of an end-to-end encrypted account with its recovery key.",
    discussion: """
      The recovery key comes from VLOG_RECOVERY_KEY or a prompt, the new password from \
      VLOG_NEW_PASSWORD or a second prompt. The account's keys are opened with the recovery \
      key here and sealed to the new password; every session of the account is signed out. \
      Then, unless --no-rekey, the account is re-keyed: a lost device's keys open nothing \
      written afterwards and make no change the account's devices apply, and a new recovery \
      key replaces the one used, printed once.
      """)

  @OptionGroup var server: ServerOptions

  @Flag(
    inversion: .prefixedNo,
    help: """
      Re-key the account too (the default): a lost device's keys open nothing written \
      afterwards, and a new recovery key replaces the one used, printed once.
      """)
  var rekey = true

  @Flag(name: .long, help: "Print JSON instead of text.")
  var json = false

  func run() async throws {
    let (url, user) = try required(server, "recover")
    let key = try readPassword(prompt: "Recovery key: ", variable: "VLOG_RECOVERY_KEY")
    let new = try readPassword(prompt: "New password: ", variable: "VLOG_NEW_PASSWORD")
    let output = try await Self.execute(
      server: url, user: user, recoveryKey: key, new: new, rekey: rekey)
    print(json ? try output.jsonText() : output.text)
  }

  static func execute(
    server: String, user: String, recoveryKey: String, new: String,
    cost: KeyDerivationCost = .standard, rekey: Bool = true, transport: (any Transport)? = nil
  ) async throws -> CommandOutput {
    let caller = APICaller(transport: transport ?? HTTPTransport(baseURL: server))
    do {
      try await caller.recoverEncryptedAccount(
        username: user, recoveryKey: recoveryKey, newPassword: new, cost: cost)
    } catch let error as AccountKeyError {
      throw CLIError("the recovery key: \(error)")
    }
    var newRecoveryKey: RecoveryKey?
    if rekey {
      newRecoveryKey = try await withSession(
        server: server, user: user, password: new, encryption: cost, cost: cost,
        transport: transport
      ) { caller, token, _, _ in
        try await caller.rekeyEncryptedAccount(
          username: user, password: new, cost: cost, token: token)
      }
    }
    struct JSON: Encodable {
      let server: String
      let username: String
      let recovered: Bool
      let recoveryKey: String?
    }
    let name = user.lowercased()
    return CommandOutput(
      text: "recovered '\(name)' on \(server) with a new password; every session was signed out"
        + rekeyedText(newRecoveryKey),
      json: JSON(
        server: server, username: name, recovered: true,
        recoveryKey: newRecoveryKey?.description))
  }
}
