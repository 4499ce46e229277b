import Testing
import VLogWire

@Suite("Password strength")
struct PasswordStrengthTests {
  @Test(
    "common, patterned and personal passwords are refused, and the error says why",
    arguments: [
      ("password1234", "common password"),
      ("P@ssw0rd2024!", "common password"),
      ("sdfghjkl;\'as", "row of keys"),
      ("abcdefghijkl", "run like abc"),
      ("aaaaaaaaaaaaaaaa", "repeats"),
      ("abcabcabcabc", "repeats"),
      ("iloveyou2000", "common"),
      ("12/04/1990abc", "year or a date"),
      ("Michael19870412", "date"),
      ("monkeydragon1", "common"),
    ])
  func refused(password: String, reason: String) throws {
    let error = #expect(throws: WireError.self) {
      try PasswordStrength.check(password, username: "ann")
    }
    #expect(error?.path == "password")
    #expect(error?.message.contains(reason) == true, "\(password): \(error?.message ?? "")")
  }

  @Test(
    "passphrases of unrelated words and random strings pass",
    arguments: [
      "correct horse battery staple",
      "my dog loves tuna on fridays",
      "Tr0ub4dor&3 plus a bit more",
      "x7#kQ9!mZ2$v",
      "vlvwzqhmbkjtrd",
      "purple elephants sing at dawn",
    ])
  func accepted(password: String) throws {
    try PasswordStrength.check(password, username: "ann")
    #expect(PasswordStrength(of: password).guesses >= PasswordStrength.minimumGuesses)
  }

  @Test("a password built on the user name is refused for it")
  func username() {
    let error = #expect(throws: WireError.self) {
      try PasswordStrength.check("Zyrtheldaquin!", username: "zyrtheldaquin")
    }
    #expect(error?.message.contains("user name") == true)
    #expect(PasswordStrength(of: "Zyrtheldaquin!", username: "ann").isAcceptable)
  }

  @Test("a password shorter than twelve characters is refused for its length")
  func tooShort() {
    let error = #expect(throws: WireError.self) {
      try PasswordStrength.check("x7#kQ9!mZ2", username: "ann", field: "newPassword")
    }
    #expect(error?.path == "newPassword")
    #expect(error?.message.contains("at least 12 characters") == true)
  }

  @Test("the estimate grows with every unrelated word and never traps on odd input")
  func monotonic() {
    let one = PasswordStrength(of: "correct").guesses
    let two = PasswordStrength(of: "correct horse").guesses
    let four = PasswordStrength(of: "correct horse battery staple").guesses
    #expect(one < two && two < four)
    for odd in ["", "é", "\u{0}", String(repeating: "🙂", count: 2000), "e\u{301}e\u{301}e\u{301}"] {
      #expect(PasswordStrength(of: odd).guesses >= 1)
    }
    // Random strings of digits, symbols, letters of every case and other scripts.
    var generator = SystemRandomNumberGenerator()
    let pool = Array("aA1!@4$0 zZ9é€ßİıΣ\u{301}\u{0}🙂/-.qwe".unicodeScalars)
    for _ in 0..<100 {
      let length = Int.random(in: 0...160, using: &generator)
      var scalars = String.UnicodeScalarView()
      for _ in 0..<length { scalars.append(pool.randomElement(using: &generator)!) }
      let strength = PasswordStrength(of: String(scalars), username: "ann")
      #expect(strength.guesses >= 1 && !strength.guesses.isNaN)
    }
  }
}
