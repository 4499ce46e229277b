internal import Foundation

/// A wire object that cannot be accepted: the path of the field at fault and what is wrong.
public struct WireError: Error, Sendable, Hashable, CustomStringConvertible {
  /// The field's path, for example `attachment.sha256` or `events[3].note`.
  public let path: String
  /// What is wrong with it.
  public let message: String

  /// Creates an error.
  public init(_ path: String, _ message: String) {
    self.path = path
    self.message = message
  }

  /// The same error, inside a container: `events[3]` + `note` gives `events[3].note`.
  public func within(_ prefix: String) -> WireError {
    WireError(path.isEmpty ? prefix : prefix + "." + path, message)
  }

  /// `path: message`.
  public var description: String { path.isEmpty ? message : "\(path): \(message)" }

  /// The error for a JSON decoding failure, with the path it happened at.
  public init(_ error: DecodingError) {
    func render(_ path: [any CodingKey]) -> String {
      path.reduce("") { result, key in
        if let index = key.intValue { return result + "[\(index)]" }
        return result.isEmpty ? key.stringValue : result + "." + key.stringValue
      }
    }
    switch error {
    case .typeMismatch(let type, let context):
      self.init(render(context.codingPath), "expected \(Self.describe(type))")
    case .valueNotFound(let type, let context):
      self.init(render(context.codingPath), "expected \(Self.describe(type)), found null")
    case .keyNotFound(let key, let context):
      self.init(render(context.codingPath + [key]), "required")
    case .dataCorrupted(let context):
      if let underlying = context.underlyingError {
        let detail = (underlying as NSError).userInfo["NSDebugDescription"] as? String
        self.init(render(context.codingPath), "not valid JSON (\(detail ?? "\(underlying)"))")
      } else if context.codingPath.isEmpty {
        self.init("", "not valid JSON (\(context.debugDescription))")
      } else {
        self.init(render(context.codingPath), context.debugDescription)
      }
    @unknown default:
      self.init("", "\(error)")
    }
  }

  private static func describe(_ type: Any.Type) -> String {
    switch type {
    case is String.Type: "a string"
    case is Int.Type, is Int64.Type, is UInt64.Type, is Decimal.Type: "an integer"
    case is Bool.Type: "true or false"
    case is [String].Type: "an array of strings"
    default: "\(type)"
    }
  }
}
