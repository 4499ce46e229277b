/// Something found in a note's text: a link, an e-mail address, a phone number or a date.
public struct DetectedData: Sendable, Hashable {
  /// What was found.
  public enum Kind: String, Sendable, Hashable {
    /// A web link: `https://…`, `http://…` or `www.…`.
    case link
    /// An e-mail address.
    case emailAddress
    /// A phone number of 7 to 15 digits.
    case phoneNumber
    /// A calendar date.
    case date
  }

  /// What was found.
  public let kind: Kind
  /// The text as it appears in the note.
  public let text: String
  /// Where it appears, in characters from the start of the note's text.
  public let range: Range<Int>
  /// The normalised value: a link with its scheme (`https://www.example.com`), an address in
  /// lowercase, a phone number's digits (with a leading `+` if it had one), a date as
  /// `YYYY-MM-DD`.
  public let value: String
}

/// Finds links, e-mail addresses, phone numbers and dates in text.
///
/// Foundation's `NSDataDetector` does not exist on Linux; this is a small, predictable
/// replacement. Where two finds overlap, the earlier kind in this order wins: link, e-mail
/// address, date, phone number (so `2026-11-22` is a date, not a phone number). Numeric dates
/// with slashes are read month first (`3/4/2026` is 4 March) unless the first number exceeds
/// 12 (`13/4/2026` is 13 April).
enum DataDetector {
  static func detect(in text: String) -> [DetectedData] {
    guard text.contains(where: { $0.isNumber || $0 == "@" || $0 == "." || $0 == ":" }) else {
      return []
    }
    var found: [(range: Range<String.Index>, data: DetectedData)] = []
    func accept(_ range: Range<String.Index>, _ kind: DetectedData.Kind, _ value: String) {
      guard !found.contains(where: { $0.range.overlaps(range) }) else { return }
      let start = text.distance(from: text.startIndex, to: range.lowerBound)
      let count = text.distance(from: range.lowerBound, to: range.upperBound)
      found.append(
        (
          range,
          DetectedData(
            kind: kind, text: String(text[range]), range: start..<(start + count), value: value)
        ))
    }

    for match in text.matches(of: /(?i)(?:https?:\/\/|www\.)[^\s<>"]+/) {
      let range = trimmingTrailingPunctuation(match.range, in: text)
      let link = String(text[range])
      guard link.contains("."), link.count > 7 else { continue }
      accept(range, .link, link.lowercased().hasPrefix("www.") ? "https://" + link : link)
    }
    for match in text.matches(
      of: /(?i)[a-z0-9._%+\-]+@[a-z0-9\-]+(?:\.[a-z0-9\-]+)*\.[a-z]{2,}/)
    {
      accept(match.range, .emailAddress, String(text[match.range]).lowercased())
    }
    for match in text.matches(of: /\b(\d{4})-(\d{2})-(\d{2})\b/) {
      if let value = date(year: match.1, month: match.2, day: match.3) {
        accept(match.range, .date, value)
      }
    }
    for match in text.matches(of: /\b(\d{1,2})\/(\d{1,2})\/(\d{4})\b/) {
      let (first, second) = (Int(match.1) ?? 0, Int(match.2) ?? 0)
      let (month, day) = first > 12 ? (second, first) : (first, second)
      if let value = date(year: match.3, month: "\(month)", day: "\(day)") {
        accept(match.range, .date, value)
      }
    }
    for match in text.matches(
      of: /(?i)\b([a-z]{3,9})\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})\b/)
    {
      if let month = monthNumber(match.1),
        let value = date(year: match.3, month: "\(month)", day: match.2)
      {
        accept(match.range, .date, value)
      }
    }
    for match in text.matches(
      of: /(?i)\b(\d{1,2})(?:st|nd|rd|th)?\s+([a-z]{3,9})\.?,?\s+(\d{4})\b/)
    {
      if let month = monthNumber(match.2),
        let value = date(year: match.3, month: "\(month)", day: match.1)
      {
        accept(match.range, .date, value)
      }
    }
    for match in text.matches(of: /\+?\(?\d[\d \-.()]{5,}\d(?!\w)/) {
      if match.range.lowerBound > text.startIndex {
        let before = text[text.index(before: match.range.lowerBound)]
        guard !(before.isLetter || before.isNumber || before == "_" || before == "+") else {
          continue
        }
      }
      let phone = text[match.range]
      // Something shaped like an ISO date is never a phone number, even an impossible date.
      let isDateShaped =
        phone.count == 10
        && phone.enumerated().allSatisfy { offset, character in
          offset == 4 || offset == 7 ? character == "-" : character.isNumber
        }
      guard !isDateShaped else { continue }
      let digits = phone.filter { $0.isNumber }
      guard (7...15).contains(digits.count) else { continue }
      accept(match.range, .phoneNumber, (phone.hasPrefix("+") ? "+" : "") + digits)
    }
    return found.sorted { $0.range.lowerBound < $1.range.lowerBound }.map(\.data)
  }

  private static func trimmingTrailingPunctuation(
    _ range: Range<String.Index>, in text: String
  ) -> Range<String.Index> {
    var end = range.upperBound
    while end > range.lowerBound {
      let previous = text.index(before: end)
      guard ".,;:!?)]}'\"".contains(text[previous]) else { break }
      end = previous
    }
    return range.lowerBound..<end
  }

  private static func date(
    year: some StringProtocol, month: some StringProtocol, day: some StringProtocol
  ) -> String? {
    guard let year = Int(year), let month = Int(month), let day = Int(day),
      (1...12).contains(month), day >= 1
    else { return nil }
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
    let days = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1]
    guard day <= days else { return nil }
    func pad(_ value: Int, _ width: Int) -> String {
      let text = String(value)
      return String(repeating: "0", count: max(0, width - text.count)) + text
    }
    return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))"
  }

  private static func monthNumber(_ name: some StringProtocol) -> Int? {
    let months = [
      "january", "february", "march", "april", "may", "june", "july", "august", "september",
      "october", "november", "december",
    ]
    let lowered = name.lowercased()
    if let full = months.firstIndex(of: lowered) { return full + 1 }
    if lowered == "sept" { return 9 }
    guard lowered.count == 3 else { return nil }
    return months.firstIndex(where: { $0.hasPrefix(lowered) }).map { $0 + 1 }
  }
}
