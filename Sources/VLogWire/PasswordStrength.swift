internal import Foundation

/// How many guesses a password would take an attacker who tries the likeliest first, and what
/// makes it guessable: the floor an end-to-end encrypted account's password must clear on the
/// device, where the password is all that guards the account's keys against offline guessing.
///
/// The estimate follows zxcvbn's model (Wheeler, USENIX Security 2016): it finds every part of
/// the password an attacker would guess as a unit — a common password, an English word or a
/// name from ranked lists (in any case, reversed, or with `@` for `a` and the like), the user
/// name, a run like `abc` or `987`, a repeat like `aaa` or `abab`, a keyboard row like
/// `qwerty`, a year or a date — and takes the cheapest way to cover the whole password with
/// them and with characters guessed one at a time. It is an estimate of a smart guesser's
/// work, not of randomness: `correct horse battery staple` is strong, `P@ssw0rd2024!` is not.
///
/// ```swift
/// let strength = PasswordStrength(of: "P@ssw0rd2024!", username: "ann")
/// strength.guesses   // about 10⁵
/// strength.weakness  // "it is a common password with a few changes"
/// try PasswordStrength.check("P@ssw0rd2024!", username: "ann")  // throws
/// ```
public struct PasswordStrength: Sendable, Hashable {
  /// The fewest characters (Unicode scalars) an encrypted account's password may have: 12.
  public static let minimumLength = 12
  /// The fewest estimated guesses an encrypted account's password may take: 10¹⁰, zxcvbn's
  /// "strong protection from an offline slow-hash attack". At one guess per second per core
  /// (the key derivation's cost), that is centuries of a core.
  public static let minimumGuesses = 1e10
  /// The most characters the estimate reads: the rest of a longer password only adds to it.
  static let examinedLength = 128

  /// The estimated number of guesses, at least 1.
  public let guesses: Double
  /// Why the password is guessable, in words, when a part of it is: nil when the cheapest
  /// cover is characters guessed one at a time.
  public let weakness: String?

  /// log₁₀ of ``guesses``.
  public var guessesLog10: Double { log10(guesses) }

  /// Estimates `password`'s strength. Parts equal to `username` (or to any of `otherInputs`,
  /// such as the app's name) count as guessed at once.
  public init(of password: String, username: String = "", otherInputs: [String] = []) {
    let characters = Array(password.unicodeScalars.prefix(Self.examinedLength))
    guard !characters.isEmpty else {
      self.guesses = 1
      self.weakness = "it is empty"
      return
    }
    let inputs = ([username] + otherInputs).map { $0.lowercased() }.filter { $0.count >= 3 }
    let matches = PasswordMatcher(characters, userInputs: inputs).matches()
    let cover = PasswordCover(length: characters.count, matches: matches)
    self.guesses = max(1, cover.guesses)
    self.weakness = cover.weakest?.weakness
  }

  /// Whether the password clears the floor: at least ``minimumLength`` characters and
  /// ``minimumGuesses`` guesses.
  public var isAcceptable: Bool { guesses >= Self.minimumGuesses }

  /// Checks that `password` may guard an encrypted account's keys.
  ///
  /// - Parameters:
  ///   - password: The password.
  ///   - username: The account's user name, which a guesser tries first.
  ///   - field: The field the error names (`password`, `newPassword`).
  /// - Throws: ``WireError`` naming `field` and saying why: too short, or too guessable and
  ///   what makes it so.
  public static func check(_ password: String, username: String, field: String = "password")
    throws(WireError)
  {
    let length = password.unicodeScalars.count
    guard length >= minimumLength else {
      throw WireError(
        field,
        "an encrypted account's password is at least \(minimumLength) characters long"
          + " (this one has \(length)): a longer phrase of a few unrelated words is best")
    }
    guard Credentials.passwordLengths.contains(length) else {
      throw WireError(
        field, "a password is at most \(Credentials.passwordLengths.upperBound) characters")
    }
    let strength = PasswordStrength(of: password, username: username)
    guard strength.isAcceptable else {
      throw WireError(
        field,
        "this password is too easy to guess (about 10^\(Int(strength.guessesLog10)) guesses,"
          + " at least 10^10 needed): \(strength.weakness ?? "it is too short for its kinds of characters");"
          + " add another word or two that do not belong together")
    }
  }
}
