/// A byte count in binary units, for messages: `64 MiB`, `1 TiB`, `1.5 GiB`.
func formattedBytes(_ bytes: Int) -> String {
  let units = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"]
  var value = Double(bytes)
  var unit = 0
  while value >= 1024 && unit < units.count - 1 {
    value /= 1024
    unit += 1
  }
  if unit == 0 { return "\(bytes) bytes" }
  let rounded = (value * 10).rounded() / 10
  return rounded == rounded.rounded()
    ? "\(Int(rounded)) \(units[unit])" : "\(rounded) \(units[unit])"
}
