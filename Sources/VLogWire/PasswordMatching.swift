internal import Foundation

/// A part of a password that a guesser would guess as one unit, with what it costs.
struct PasswordMatch: Sendable, Hashable {
  /// The first and the last character (Unicode scalar offsets), inclusive.
  var start: Int
  var end: Int
  /// Guesses to find this part once a guesser tries its kind.
  var guesses: Double
  /// What makes this part guessable, in words; nil for characters guessed one at a time.
  var weakness: String?

  var length: Int { end - start + 1 }
}

/// Finds every part of a password a guesser would try as a unit: ranked words, the user name,
/// runs, repeats, keyboard rows, years and dates. Pure: a password in, matches out.
struct PasswordMatcher {
  let characters: [Unicode.Scalar]
  /// The characters lowercased (one scalar each where lowercasing keeps it one).
  let lowered: [Unicode.Scalar]
  let userInputs: [String]

  init(_ characters: [Unicode.Scalar], userInputs: [String]) {
    self.characters = characters
    self.lowered = characters.map { scalar in
      let lower = scalar.properties.lowercaseMapping.unicodeScalars
      return lower.count == 1 ? lower.first! : scalar
    }
    self.userInputs = userInputs
  }

  func matches() -> [PasswordMatch] {
    dictionaryMatches() + sequenceMatches() + repeatMatches() + keyboardMatches()
      + dateMatches()
  }

  // MARK: Ranked words

  /// The longest entry of any list that is worth looking up.
  private static let longestWord = 24

  private func dictionaryMatches() -> [PasswordMatch] {
    var found: [PasswordMatch] = []
    let n = characters.count
    for start in 0..<n {
      for end in start..<min(n, start + Self.longestWord) {
        let slice = Array(lowered[start...end])
        let word = String(String.UnicodeScalarView(slice))
        let original = characters[start...end]
        let caps = Self.capitalVariations(original)
        if let entry = Self.rank(of: word, userInputs: userInputs) {
          found.append(
            PasswordMatch(
              start: start, end: end, guesses: Double(entry.rank) * caps,
              weakness: Self.weakness(of: entry.list, changed: caps > 1)))
        }
        if slice.count >= 3,
          let entry = Self.rank(of: String(word.reversed()), userInputs: userInputs)
        {
          found.append(
            PasswordMatch(
              start: start, end: end, guesses: Double(entry.rank) * caps * 2,
              weakness: Self.weakness(of: entry.list, changed: true)))
        }
        for (plain, substitutions) in Self.unleeted(slice) {
          guard let entry = Self.rank(of: plain, userInputs: userInputs) else { continue }
          let variations = caps * pow(2, Double(substitutions))
          found.append(
            PasswordMatch(
              start: start, end: end, guesses: Double(entry.rank) * variations,
              weakness: Self.weakness(of: entry.list, changed: true)))
        }
      }
    }
    return found
  }

  private static func weakness(of list: String, changed: Bool) -> String {
    switch list {
    case "userInputs": "it contains the user name"
    case "passwords":
      changed
        ? "it is a common password with a few changes" : "it is one of the most common passwords"
    case "surnames", "femaleNames", "maleNames": "it is built on a name"
    default: "it is built on a common word"
    }
  }

  /// Each list's entries and their ranks, most frequent 1; a word in several lists keeps its
  /// best rank.
  private static let ranks: [String: (rank: Int, list: String)] = {
    var ranks: [String: (rank: Int, list: String)] = [:]
    for (name, entries) in PasswordStrength.rankedLists {
      var rank = 0
      for entry in entries.split(separator: "\n") {
        rank += 1
        let word = String(entry)
        if let known = ranks[word], known.rank <= rank { continue }
        ranks[word] = (rank, name)
      }
    }
    return ranks
  }()

  private static func rank(of word: String, userInputs: [String]) -> (rank: Int, list: String)? {
    if userInputs.contains(word) { return (1, "userInputs") }
    return ranks[word]
  }

  /// How many ways of capitalising a word a guesser tries before this one: 1 for none, 2 for
  /// the first or last letter or all of them, more for capitals scattered inside.
  private static func capitalVariations(_ word: ArraySlice<Unicode.Scalar>) -> Double {
    let upper = word.filter { $0.properties.isUppercase }.count
    let lower = word.filter { $0.properties.isLowercase }.count
    if upper == 0 { return 1 }
    if lower == 0 { return 2 }
    if upper == 1,
      word.first?.properties.isUppercase == true || word.last?.properties.isUppercase == true
    {
      return 2
    }
    var variations = 0.0
    for taken in 1...min(upper, lower) { variations += binomial(upper + lower, taken) }
    return max(2, variations)
  }

  /// The common substitutions of symbols and digits for letters.
  private static let substitutions: [Unicode.Scalar: [Unicode.Scalar]] = [
    "4": ["a"], "@": ["a"], "8": ["b"], "(": ["c"], "{": ["c"], "[": ["c"], "<": ["c"],
    "3": ["e"], "6": ["g"], "9": ["g"], "1": ["i", "l"], "!": ["i"], "|": ["i", "l"],
    "0": ["o"], "$": ["s"], "5": ["s"], "+": ["t"], "7": ["t"], "%": ["x"], "2": ["z"],
  ]

  /// The word with its substituted characters read back as letters (each reading where a
  /// character stands for two letters), and how many characters were substituted.
  private static func unleeted(_ word: [Unicode.Scalar]) -> [(String, Int)] {
    let substituted = word.filter { substitutions[$0] != nil }.count
    guard substituted > 0, substituted < word.count else { return [] }
    var readings: [[Unicode.Scalar]] = [[]]
    for scalar in word {
      let choices = substitutions[scalar] ?? [scalar]
      readings = readings.flatMap { reading in choices.map { reading + [$0] } }
      if readings.count > 8 { readings = Array(readings.prefix(8)) }
    }
    return readings.map { (String(String.UnicodeScalarView($0)), substituted) }
  }

  // MARK: Runs, repeats and keyboard rows

  /// Runs of three or more characters with a constant step of 1 to 5: `abc`, `9753`, `zyx`.
  private func sequenceMatches() -> [PasswordMatch] {
    var found: [PasswordMatch] = []
    var start = 0
    while start + 2 < lowered.count {
      let step = Int(lowered[start + 1].value) - Int(lowered[start].value)
      var end = start + 1
      guard (1...5).contains(abs(step)) else {
        start += 1
        continue
      }
      while end + 1 < lowered.count,
        Int(lowered[end + 1].value) - Int(lowered[end].value) == step
      {
        end += 1
      }
      if end - start >= 2 {
        let first = lowered[start]
        let base: Double =
          "az09".unicodeScalars.contains(first) || first == "1"
          ? 4 : first.properties.numericType != nil ? 10 : 26
        found.append(
          PasswordMatch(
            start: start, end: end,
            guesses: base * Double(end - start + 1) * (step < 0 ? 2 : 1),
            weakness: "it has a run like abc or 123"))
        start = end
      } else {
        start += 1
      }
    }
    return found
  }

  /// A block repeated two or more times in a row: `aaa`, `abcabc`. Costs the block's own
  /// guesses times the repeats.
  private func repeatMatches() -> [PasswordMatch] {
    var found: [PasswordMatch] = []
    var unitCache: [String: Double] = [:]
    let n = characters.count
    for start in 0..<n {
      for block in 1...max(1, min(32, (n - start) / 2)) where start + 2 * block <= n {
        let unit = characters[start..<(start + block)]
        var count = 1
        while start + (count + 1) * block <= n,
          characters[(start + count * block)..<(start + (count + 1) * block)] == unit
        {
          count += 1
        }
        guard count >= 2, count * block >= 3, Self.isPrimitive(unit) else { continue }
        // Only the longest repeat from here: a shorter one is inside it.
        if start - block >= 0, characters[(start - block)..<start] == unit { continue }
        let text = String(String.UnicodeScalarView(Array(unit)))
        let unitGuesses = unitCache[text] ?? PasswordStrength(of: text).guesses
        unitCache[text] = unitGuesses
        found.append(
          PasswordMatch(
            start: start, end: start + count * block - 1,
            guesses: unitGuesses * Double(count),
            weakness: "it repeats characters or a part of itself"))
      }
    }
    return found
  }

  /// Whether `unit` is not itself a shorter block repeated (`abab` is `ab` twice).
  private static func isPrimitive(_ unit: ArraySlice<Unicode.Scalar>) -> Bool {
    let scalars = Array(unit)
    for period in 1..<max(1, scalars.count) where scalars.count % period == 0 {
      if (period..<scalars.count).allSatisfy({ scalars[$0] == scalars[$0 - period] }) {
        return false
      }
    }
    return true
  }

  /// The keyboard's rows, unshifted and shifted (US layout).
  private static let rows: [[Unicode.Scalar]] = [
    "`1234567890-=", "qwertyuiop[]\\", "asdfghjkl;'", "zxcvbnm,./",
    "~!@#$%^&*()_+", "QWERTYUIOP{}|", "ASDFGHJKL:\"", "ZXCVBNM<>?",
  ].map { Array($0.unicodeScalars) }

  /// Where each key is: its row and place.
  private static let keys: [Unicode.Scalar: (row: Int, column: Int)] = {
    var keys: [Unicode.Scalar: (row: Int, column: Int)] = [:]
    for (row, scalars) in rows.enumerated() {
      for (column, scalar) in scalars.enumerated() { keys[scalar] = (row % 4, column) }
    }
    return keys
  }()

  /// Four or more keys each beside the last on a row of the keyboard: `qwerty`, `asdf`,
  /// `poiuy`, `1qaz` is not one (columns are not counted).
  private func keyboardMatches() -> [PasswordMatch] {
    var found: [PasswordMatch] = []
    var start = 0
    while start < characters.count {
      var end = start
      var turns = 0
      var direction = 0
      while end + 1 < characters.count,
        let here = Self.keys[characters[end]], let next = Self.keys[characters[end + 1]],
        here.row == next.row, abs(next.column - here.column) == 1
      {
        let step = next.column - here.column
        if direction != 0, step != direction { turns += 1 }
        direction = step
        end += 1
      }
      if end - start >= 3 {
        let length = Double(end - start + 1)
        found.append(
          PasswordMatch(
            start: start, end: end, guesses: 47 * 2 * length * pow(length, Double(turns)),
            weakness: "it has a row of keys like qwerty"))
        start = end + 1
      } else {
        start += 1
      }
    }
    return found
  }

  // MARK: Years and dates

  /// Years 1900–2099, and dates of 4 to 8 digits with or without separators.
  private func dateMatches() -> [PasswordMatch] {
    var found: [PasswordMatch] = []
    let n = characters.count
    let digits = characters.map { $0.properties.numericType == .decimal && $0.isASCII }
    for start in 0..<n {
      // A year.
      if start + 3 < n, digits[start...(start + 3)].allSatisfy({ $0 }) {
        let year = Int(String(String.UnicodeScalarView(Array(characters[start...(start + 3)]))))!
        if (1900...2099).contains(year) {
          found.append(
            PasswordMatch(
              start: start, end: start + 3, guesses: Double(max(abs(year - 2026), 20)),
              weakness: "it has a year or a date"))
        }
      }
      // A date: 4 to 8 digits, or digits with `/`, `-`, `.` or ` ` between day, month, year.
      for length in 4...10 where start + length <= n {
        let part = characters[start..<(start + length)]
        let separators = part.filter { "/-. ".unicodeScalars.contains($0) }.count
        let digitCount = part.filter { $0.properties.numericType == .decimal && $0.isASCII }.count
        guard digitCount + separators == length, separators == 0 || separators == 2,
          (4...8).contains(digitCount), digits[start], digits[start + length - 1],
          Self.isDate(part)
        else { continue }
        found.append(
          PasswordMatch(
            start: start, end: start + length - 1,
            guesses: 365 * 20 * (separators > 0 ? 4 : 1),
            weakness: "it has a year or a date"))
      }
    }
    return found
  }
}

extension PasswordMatcher {
  /// Whether digits (with two separators between the parts, or none) read as a day, a month
  /// and a year of 2 or 4 digits, the year first or last.
  static func isDate(_ part: ArraySlice<Unicode.Scalar>) -> Bool {
    let text = String(String.UnicodeScalarView(Array(part)))
    let pieces = text.split(whereSeparator: { "/-. ".contains($0) }).map(String.init)
    var splits: [[String]] = []
    if pieces.count == 3 {
      splits = [pieces]
    } else if pieces.count == 1 {
      let digits = Array(text)
      for first in 1...4 {
        for second in 1...4
        where first + second < digits.count && digits.count - first - second <= 4 {
          splits.append([
            String(digits[..<first]), String(digits[first..<(first + second)]),
            String(digits[(first + second)...]),
          ])
        }
      }
    }
    return splits.contains { split in
      let numbers = split.compactMap { Int($0) }
      guard numbers.count == 3 else { return false }
      for (yearAt, rest) in [(0, [1, 2]), (2, [0, 1])] {
        guard
          split[yearAt].count == 2
            || (split[yearAt].count == 4 && (1900...2099).contains(numbers[yearAt]))
        else { continue }
        let (a, b) = (numbers[rest[0]], numbers[rest[1]])
        guard split[rest[0]].count <= 2, split[rest[1]].count <= 2 else { continue }
        if ((1...31).contains(a) && (1...12).contains(b))
          || ((1...12).contains(a) && (1...31).contains(b))
        {
          return true
        }
      }
      return false
    }
  }
}

/// n choose k.
func binomial(_ n: Int, _ k: Int) -> Double {
  guard k >= 0, k <= n else { return 0 }
  var result = 1.0
  for i in 0..<min(k, n - k) { result = result * Double(n - i) / Double(i + 1) }
  return result
}
