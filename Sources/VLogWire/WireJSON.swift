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
      throw WireError(error)
    } catch {
      throw WireError("", "not valid JSON (\(error))")
    }
  }
}
