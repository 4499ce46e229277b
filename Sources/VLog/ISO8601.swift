/// ISO 8601 timestamps with milliseconds in UTC (`2026-11-22T04:13:46.123Z`): how VLog writes
/// dates for people and on the wire. It reads every RFC 3339 form of a whole millisecond.
package enum ISO8601 {
  /// Formats milliseconds since 1970 as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
  package static func format(milliseconds: Int64) -> String {
    let millisecondsPerDay: Int64 = 86_400_000
    var days = milliseconds / millisecondsPerDay
    var rest = milliseconds % millisecondsPerDay
    if rest < 0 {
      rest += millisecondsPerDay
      days -= 1
    }
    let (year, month, day) = civil(fromDays: days)
    let hour = rest / 3_600_000
    let minute = rest / 60_000 % 60
    let second = rest / 1000 % 60
    let millisecond = rest % 1000
    return pad(year, 4) + "-" + pad(month, 2) + "-" + pad(day, 2) + "T" + pad(hour, 2) + ":"
      + pad(minute, 2) + ":" + pad(second, 2) + "." + pad(millisecond, 3) + "Z"
  }

  /// Why a text is not a VLog time.
  package enum ParseFailure: Error, Sendable, Hashable {
    /// Not an RFC 3339 date-time, or an impossible date.
    case malformed
    /// A valid RFC 3339 date-time, but finer than a millisecond (non-zero digits after the
    /// third fractional digit): VLog times are whole milliseconds.
    case finerThanMillisecond
  }

  /// Parses an RFC 3339 date-time that denotes a whole millisecond: `T` or `t`, `Z`, `z` or any
  /// offset `±HH:MM`, no fraction or any number of fractional digits of which those after the
  /// third are zeros (`2026-11-23T18:56:55.477000+00:00`).
  ///
  /// - Returns: Milliseconds since 1970, or nil if `text` is not such a timestamp.
  package static func parse(_ text: some StringProtocol) -> Int64? {
    guard case .success(let milliseconds) = parseChecked(text) else { return nil }
    return milliseconds
  }

  /// ``parse(_:)``, saying why a text is refused.
  package static func parseChecked(_ text: some StringProtocol) -> Result<Int64, ParseFailure> {
    let bytes = Array(text.utf8)
    func number(_ range: Range<Int>) -> Int64? {
      guard range.upperBound <= bytes.count else { return nil }
      var value: Int64 = 0
      for byte in bytes[range] {
        guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
        value = value * 10 + Int64(byte - UInt8(ascii: "0"))
      }
      return value
    }
    func byte(_ index: Int, is character: Character) -> Bool {
      index < bytes.count && bytes[index] == character.asciiValue
    }
    func isDigit(_ index: Int) -> Bool {
      index < bytes.count && bytes[index] >= UInt8(ascii: "0") && bytes[index] <= UInt8(ascii: "9")
    }
    guard bytes.count >= 20, let year = number(0..<4), byte(4, is: "-"),
      let month = number(5..<7), byte(7, is: "-"), let day = number(8..<10),
      byte(10, is: "T") || byte(10, is: "t"), let hour = number(11..<13), byte(13, is: ":"),
      let minute = number(14..<16), byte(16, is: ":"), let second = number(17..<19)
    else { return .failure(.malformed) }
    var index = 19
    var millisecond: Int64 = 0
    var finer = false
    if byte(index, is: ".") {
      index += 1
      let start = index
      while isDigit(index) { index += 1 }
      let digits = index - start
      guard digits >= 1 else { return .failure(.malformed) }
      let kept = min(digits, 3)
      guard let fraction = number(start..<(start + kept)) else { return .failure(.malformed) }
      millisecond = fraction * [100, 10, 1][kept - 1]
      finer = bytes[(start + kept)..<index].contains { $0 != UInt8(ascii: "0") }
    }
    // The offset: Z, z, or ±HH:MM; local time minus the offset is UTC.
    var offsetMinutes: Int64 = 0
    if (byte(index, is: "Z") || byte(index, is: "z")) && index + 1 == bytes.count {
      offsetMinutes = 0
    } else if byte(index, is: "+") || byte(index, is: "-"), index + 6 == bytes.count,
      let offsetHour = number((index + 1)..<(index + 3)), byte(index + 3, is: ":"),
      let offsetMinute = number((index + 4)..<(index + 6)), offsetHour < 24, offsetMinute < 60
    {
      offsetMinutes = (offsetHour * 60 + offsetMinute) * (byte(index, is: "-") ? -1 : 1)
    } else {
      return .failure(.malformed)
    }
    guard (1...12).contains(month), (1...daysIn(month: month, year: year)).contains(day),
      hour < 24, minute < 60, second < 60
    else { return .failure(.malformed) }
    guard !finer else { return .failure(.finerThanMillisecond) }
    let days = self.days(fromCivil: year, month, day)
    let local = ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millisecond
    return .success(local - offsetMinutes * 60_000)
  }

  /// What is wrong with `text` as a time, for an error message: `'…' is not a time like
  /// 2026-03-14T09:30:00.000Z`, or that it is finer than a millisecond.
  package static func problem(with text: String, noun: String = "time") -> String {
    if case .failure(.finerThanMillisecond) = parseChecked(text) {
      return "'\(text)' is finer than a millisecond; a \(noun) is a whole number of "
        + "milliseconds (digits after the third fractional one must be zeros)"
    }
    return "'\(text)' is not a \(noun) like 2026-03-14T09:30:00.000Z (RFC 3339, any offset)"
  }

  private static func pad(_ value: Int64, _ width: Int) -> String {
    let text = String(value)
    return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
  }

  private static func daysIn(month: Int64, year: Int64) -> Int64 {
    switch month {
    case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
    case 4, 6, 9, 11: 30
    default: 31
    }
  }

  // Howard Hinnant's algorithms for the proleptic Gregorian calendar.
  private static func civil(fromDays days: Int64) -> (Int64, Int64, Int64) {
    let z = days + 719_468
    let era = (z >= 0 ? z : z - 146_096) / 146_097
    let dayOfEra = z - era * 146_097
    let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
    let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
    let monthIndex = (5 * dayOfYear + 2) / 153
    let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
    let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
    return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
  }

  private static func days(fromCivil year: Int64, _ month: Int64, _ day: Int64) -> Int64 {
    let year = month <= 2 ? year - 1 : year
    let era = (year >= 0 ? year : year - 399) / 400
    let yearOfEra = year - era * 400
    let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
    let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
    return era * 146_097 + dayOfEra - 719_468
  }
}
