internal import Foundation

/// The cheapest way to guess a whole password: a sequence of matches and of characters guessed
/// one at a time that covers it, as zxcvbn scores it. A guesser who knows the sequence's length
/// `l` still tries its parts in every order (`l!`), and tries shorter sequences first (`10⁴` per
/// part before).
struct PasswordCover {
  /// The estimated guesses of the cheapest cover.
  let guesses: Double
  /// The longest match of the cheapest cover that is not characters guessed one at a time.
  let weakest: PasswordMatch?

  /// Guesses per character guessed one at a time.
  static let perCharacter = 10.0
  /// The fewest guesses any one part costs: a guesser tries these first.
  static let singleCharacterFloor = 10.0
  static let severalCharactersFloor = 50.0
  static let perPartBefore = 10_000.0

  private struct Entry {
    var product: Double
    var guesses: Double
    var match: PasswordMatch
    /// The parts before: the entry at `match.start - 1` with one part fewer.
    var count: Int
  }

  init(length n: Int, matches: [PasswordMatch]) {
    var byEnd = [[PasswordMatch]](repeating: [], count: n)
    for match in matches where match.end < n { byEnd[match.end].append(match) }
    // best[k][l]: the cheapest cover of characters 0...k by l parts.
    var best = [[Int: Entry]](repeating: [:], count: n)

    func floor(_ match: PasswordMatch) -> Double {
      max(
        match.guesses, match.length == 1 ? Self.singleCharacterFloor : Self.severalCharactersFloor)
    }
    func update(_ match: PasswordMatch, parts: Int, product: Double) {
      let total = factorial(parts) * product + pow(Self.perPartBefore, Double(parts - 1))
      for (count, entry) in best[match.end] where count <= parts && entry.guesses <= total {
        return
      }
      best[match.end][parts] = Entry(product: product, guesses: total, match: match, count: parts)
    }
    func extend(_ match: PasswordMatch) {
      let guesses = floor(match)
      if match.start == 0 {
        update(match, parts: 1, product: guesses)
        return
      }
      for (count, entry) in best[match.start - 1] {
        // Two runs of single characters in a row are one run.
        if match.weakness == nil, entry.match.weakness == nil { continue }
        update(match, parts: count + 1, product: entry.product * guesses)
      }
    }
    for end in 0..<n {
      for match in byEnd[end] { extend(match) }
      for start in 0...end {
        extend(
          PasswordMatch(
            start: start, end: end, guesses: pow(Self.perCharacter, Double(end - start + 1)),
            weakness: nil))
      }
    }
    guard n > 0, let (parts, last) = best[n - 1].min(by: { $0.value.guesses < $1.value.guesses })
    else {
      self.guesses = 1
      self.weakest = nil
      return
    }
    self.guesses = last.guesses
    // Walk the cover back to find its longest guessable part.
    var sequence: [PasswordMatch] = []
    var end = n - 1
    var count = parts
    while end >= 0, count > 0, let entry = best[end][count] {
      sequence.append(entry.match)
      end = entry.match.start - 1
      count -= 1
    }
    self.weakest = sequence.filter { $0.weakness != nil }.max { $0.length < $1.length }
  }
}

/// n!, as a `Double`.
private func factorial(_ n: Int) -> Double {
  (1...max(1, n)).reduce(1.0) { $0 * Double($1) }
}
