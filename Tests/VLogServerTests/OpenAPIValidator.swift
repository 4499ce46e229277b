import Foundation
import VLogServer
import VLogSync

/// Checks responses against the server's OpenAPI document: the path, method and status must be
/// documented, and a JSON body must match the documented schema (types, required and unknown
/// properties, enums, patterns, bounds, `$ref`s).
struct OpenAPIValidator: Sendable {
  let document: [String: any Sendable]

  init() throws {
    let object = try JSONSerialization.jsonObject(with: Data(SyncServer.openAPIDocument))
    document = object as! [String: any Sendable]
  }

  var paths: [String: [String: Any]] { document["paths"] as! [String: [String: Any]] }

  /// Every documented (method, path template, status, media type or `none`).
  var documentedResponses: Set<String> {
    var result = Set<String>()
    for (path, item) in paths {
      for (method, operation) in item where method != "parameters" {
        let responses = (operation as! [String: Any])["responses"] as! [String: Any]
        for (status, response) in responses {
          let content = (response as! [String: Any])["content"] as? [String: Any]
          for mediaType in content?.keys.sorted() ?? ["none"] {
            result.insert("\(method.uppercased()) \(path) \(status) \(mediaType)")
          }
        }
      }
    }
    return result
  }

  /// The documented path template that `path` matches.
  func template(for path: String) -> String? {
    let parts = path.split(separator: "/", omittingEmptySubsequences: false)
    return paths.keys.first { template in
      let templateParts = template.split(separator: "/", omittingEmptySubsequences: false)
      return templateParts.count == parts.count
        && zip(templateParts, parts).allSatisfy { $0.hasPrefix("{") || $0 == $1 }
    }
  }

  /// Checks one response; returns its key (`METHOD template status media-type`) and the problems
  /// found.
  func check(_ request: TransportRequest, _ response: TransportResponse) -> (
    key: String, problems: [String]
  ) {
    let path = String(request.path.split(separator: "?").first ?? "")
    guard let template = template(for: path) else {
      return ("\(request.method) \(path) \(response.status)", ["undocumented path \(path)"])
    }
    let mediaType = response.headers["content-type"] ?? "none"
    let key = "\(request.method) \(template) \(response.status) \(mediaType)"
    guard
      let operation = paths[template]?[request.method.lowercased()] as? [String: Any],
      let responses = operation["responses"] as? [String: Any],
      let documented = responses[String(response.status)] as? [String: Any]
    else { return (key, ["undocumented response \(key)"]) }
    var problems: [String] = []
    // A request the server accepted must have had a documented body type.
    if (200..<300).contains(response.status), let sent = request.headers["content-type"],
      !request.body.isEmpty
    {
      let accepted = (operation["requestBody"] as? [String: Any])?["content"] as? [String: Any]
      if accepted?[sent] == nil {
        problems.append("\(key): request media type \(sent) undocumented")
      }
    }
    guard let content = documented["content"] as? [String: Any] else {
      return (key, problems + (response.body.isEmpty ? [] : ["\(key) should have no body"]))
    }
    guard let media = content[mediaType] as? [String: Any] else {
      return (key, problems + ["\(key): media type \(mediaType) undocumented"])
    }
    // Bodies other than JSON are documented as opaque bytes; their own tests check them.
    guard mediaType == "application/json" else { return (key, problems) }
    let schema = media["schema"] as! [String: Any]
    // A body that is not JSON is itself the finding, reported below.
    guard let body = try? JSONSerialization.jsonObject(with: Data(response.body)) else {
      return (key, problems + ["\(key): the body is not JSON"])
    }
    validate(body, against: schema, at: "body", problems: &problems)
    return (key, problems.map { "\(key): \($0)" })
  }

  private func resolve(_ schema: [String: Any]) -> [String: Any] {
    guard let reference = schema["$ref"] as? String else { return schema }
    var node: Any = document
    for part in reference.dropFirst(2).split(separator: "/") {
      node = (node as! [String: Any])[String(part)]!
    }
    return node as! [String: Any]
  }

  func validate(
    _ value: Any, against schema: [String: Any], at path: String, problems: inout [String]
  ) {
    let schema = resolve(schema)
    if let type = schema["type"] as? String {
      let matches: Bool
      switch type {
      case "object": matches = value is [String: Any]
      case "array": matches = value is [Any]
      case "string": matches = value is String
      case "boolean": matches = Self.isBoolean(value)
      case "integer":
        matches =
          Self.isNumber(value)
          && (value as! NSNumber).doubleValue.rounded() == (value as! NSNumber).doubleValue
      case "number": matches = Self.isNumber(value)
      default: matches = true
      }
      guard matches else {
        problems.append("\(path): expected \(type), found \(value)")
        return
      }
    }
    if let allowed = schema["enum"] as? [String], let string = value as? String,
      !allowed.contains(string)
    {
      problems.append("\(path): '\(string)' is not one of \(allowed)")
    }
    if let pattern = schema["pattern"] as? String, let string = value as? String,
      string.range(of: pattern, options: .regularExpression) == nil
    {
      problems.append("\(path): '\(string)' does not match \(pattern)")
    }
    if schema["format"] as? String == "date-time", let string = value as? String,
      string.range(
        of: #"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$"#, options: .regularExpression) == nil
    {
      problems.append("\(path): '\(string)' is not an ISO 8601 time with milliseconds")
    }
    if let number = value as? NSNumber, Self.isNumber(value) {
      if let minimum = schema["minimum"] as? Double, number.doubleValue < minimum {
        problems.append("\(path): \(number) is below \(minimum)")
      }
      if let maximum = schema["maximum"] as? Double, number.doubleValue > maximum {
        problems.append("\(path): \(number) is above \(maximum)")
      }
    }
    if let object = value as? [String: Any] {
      let properties = schema["properties"] as? [String: Any] ?? [:]
      for required in schema["required"] as? [String] ?? [] where object[required] == nil {
        problems.append("\(path).\(required): required")
      }
      for (key, child) in object {
        if let property = properties[key] as? [String: Any] {
          validate(child, against: property, at: "\(path).\(key)", problems: &problems)
        } else if schema["additionalProperties"] as? Bool == false {
          problems.append("\(path).\(key): not in the schema")
        }
      }
    }
    if let array = value as? [Any], let items = schema["items"] as? [String: Any] {
      for (index, item) in array.enumerated() {
        validate(item, against: items, at: "\(path)[\(index)]", problems: &problems)
      }
    }
  }

  /// JSONSerialization returns true and false as NSNumbers of type `c`.
  private static func isBoolean(_ value: Any) -> Bool {
    guard let number = value as? NSNumber else { return false }
    return String(cString: number.objCType) == "c"
  }

  private static func isNumber(_ value: Any) -> Bool {
    value is NSNumber && !isBoolean(value)
  }
}
