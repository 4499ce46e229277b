/// The magnitude of a duration for people, rounded to its unit: `850 ms`, `12 s`, `5 min`,
/// `24 h`, `3 d`.
public func formatDuration(milliseconds: Int64) -> String {
  let magnitude = milliseconds.magnitude
  func rounded(_ unit: UInt64) -> UInt64 { (magnitude + unit / 2) / unit }
  if magnitude < 2000 { return "\(magnitude) ms" }
  if magnitude < 120_000 { return "\(rounded(1000)) s" }
  if magnitude < 7_200_000 { return "\(rounded(60_000)) min" }
  if magnitude < 172_800_000 { return "\(rounded(3_600_000)) h" }
  return "\(rounded(86_400_000)) d"
}
