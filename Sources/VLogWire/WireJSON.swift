internal import Foundation

/// JSON as the wire speaks it: decoding that turns every failure into a ``WireError`` naming
/// the field at fault.
public enum WireJSON {
  /// Decodes a wire object from JSON bytes.
  ///
  /// - Throws: ``WireError`` with the path of the field at fault, or an empty path for bytes
  ///   that are not JSON at all.
  public static func decode<T: Decodable>(_ type: T.Type = T.self, from bytes: [UInt8])
    throws(WireError) -> T
  {
    do {
      return try JSONDecoder().decode(T.self, from: Data(bytes))
    } catch let error as DecodingError {
      if case .dataCorrupted(let context) = error, context.codingPath.isEmpty,
        let number = outOfRangeNumber(in: bytes)
      {
        throw WireError(number.path, "out of range (\(number.value))")
      }
      throw WireError(error)
    } catch {
      throw WireError("", "not valid JSON (\(error))")
    }
  }

  /// Where a number lies that no integer field can hold — negative, with a fraction, or past
  /// 2⁶³ − 1 — in bytes that are JSON: Foundation reports a number that does not fit its field
  /// as JSON that is not valid, naming no field. The first such number in key order, with its
  /// path; nil for bytes that are not JSON, or that hold no such number.
  static func outOfRangeNumber(in bytes: [UInt8]) -> (path: String, value: String)? {
    guard
      let root = try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])
    else { return nil }
    func find(_ value: Any, _ path: String) -> (path: String, value: String)? {
      switch value {
      case let object as [String: Any]:
        for key in object.keys.sorted() {
          if let found = find(object[key]!, path.isEmpty ? key : path + "." + key) { return found }
        }
        return nil
      case let array as [Any]:
        for (index, element) in array.enumerated() {
          if let found = find(element, path + "[\(index)]") { return found }
        }
        return nil
      case let number as NSNumber:
        // A boolean is a number here too: 0 or 1, which fits.
        let decimal = number.decimalValue
        var whole = decimal
        var rounded = Decimal()
        NSDecimalRound(&rounded, &whole, 0, .plain)
        let fits = decimal >= 0 && rounded == decimal && decimal <= Decimal(Int64.max)
        return fits ? nil : (path, "\(number)")
      default:
        return nil
      }
    }
    return find(root, "")
  }
}
