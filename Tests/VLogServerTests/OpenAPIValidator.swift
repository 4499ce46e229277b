import Foundation
import VLogServer
import VLogSync

/// Checks responses against the server's OpenAPI document: the path, method and status must be
/// documented, and a JSON body must match the documented schema (types, required and unknown
/// properties, enums, patterns, bounds, `$ref`s, `oneOf`, `anyOf`, `not`, `if`/`then`/`else`).
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
          let content = resolve(response as! [String: Any])["content"] as? [String: Any]
          for mediaType in content?.keys.sorted() ?? ["none"] {
            result.insert("\(method.uppercased()) \(path) \(status) \(mediaType)")
          }
        }
      }
    }
    return result
  }

  /// The documented path template that `path` matches: a concrete path before a templated
  /// one (`/v1/sessions/current` before `/v1/sessions/{id}`), as OpenAPI says.
  func template(for path: String) -> String? {
    let parts = path.split(separator: "/", omittingEmptySubsequences: false)
    let matching = paths.keys.filter { template in
      let templateParts = template.split(separator: "/", omittingEmptySubsequences: false)
      return templateParts.count == parts.count
        && zip(templateParts, parts).allSatisfy { $0.hasPrefix("{") || $0 == $1 }
    }
    return matching.min { $0.filter { $0 == "{" }.count < $1.filter { $0 == "{" }.count }
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
    // A HEAD answer has GET's headers but no body: documented without content.
    let mediaType = request.method == "HEAD" ? "none" : response.headers["content-type"] ?? "none"
    let key = "\(request.method) \(template) \(response.status) \(mediaType)"
    let methods = Set((paths[template] ?? [:]).keys.filter { $0 != "parameters" })
    guard methods.contains(request.method.lowercased()) else {
      return (key, methodNotAllowedProblems(response, methods: methods, key: key))
    }
    guard
      let operation = paths[template]?[request.method.lowercased()] as? [String: Any],
      let responses = operation["responses"] as? [String: Any],
      let reference = responses[String(response.status)] as? [String: Any]
    else { return (key, ["undocumented response \(key)"]) }
    let documented = resolve(reference)
    // The binary encoding is described in an extension that generators skip.
    let binary = (operation["x-vlog-binary-encoding"] as? [String: Any])?["mediaType"] as? String
    var problems: [String] = []
    // A request the server accepted must have had a documented body type.
    if (200..<300).contains(response.status), let sent = request.headers["content-type"],
      !request.body.isEmpty
    {
      let accepted = (operation["requestBody"] as? [String: Any])?["content"] as? [String: Any]
      if accepted?[sent] == nil && sent != binary {
        problems.append("\(key): request media type \(sent) undocumented")
      }
    }
    // And a JSON body it accepted must match the documented request schema: the document is
    // no stricter than the server.
    if (200..<300).contains(response.status), request.headers["content-type"] == "application/json",
      let accepted = (operation["requestBody"] as? [String: Any])?["content"] as? [String: Any],
      let media = accepted["application/json"] as? [String: Any],
      let schema = media["schema"] as? [String: Any],
      // Requests that are not JSON on purpose (the refusal tests) have no schema to meet.
      let body = try? JSONSerialization.jsonObject(with: Data(request.body))
    {
      var found: [String] = []
      validate(body, against: schema, at: "request", problems: &found)
      problems += found.map { "\(key): \($0)" }
    }
    guard let content = documented["content"] as? [String: Any] else {
      return (key, problems + (response.body.isEmpty ? [] : ["\(key) should have no body"]))
    }
    if response.status == 200 && mediaType == binary { return (key, problems) }
    guard let media = content[mediaType] as? [String: Any] else {
      return (key, problems + ["\(key): media type \(mediaType) undocumented"])
    }
    // Bodies other than JSON are documented as opaque bytes; their own tests check them. A
    // HEAD answer is GET's without the body.
    if request.method == "HEAD" {
      return (key, problems + (response.body.isEmpty ? [] : ["\(key) should have no body"]))
    }
    guard mediaType == "application/json" else { return (key, problems) }
    let schema = media["schema"] as! [String: Any]
    // A body that is not JSON is itself the finding, reported below.
    guard let body = try? JSONSerialization.jsonObject(with: Data(response.body)) else {
      return (key, problems + ["\(key): the body is not JSON"])
    }
    validate(body, against: schema, at: "body", problems: &problems)
    return (key, problems.map { "\(key): \($0)" })
  }

  /// The problems the document finds with a JSON request body for an operation.
  func requestProblems(method: String, path: String, body: [UInt8]) -> [String] {
    guard let template = template(for: path),
      let operation = paths[template]?[method.lowercased()] as? [String: Any],
      let content = (operation["requestBody"] as? [String: Any])?["content"] as? [String: Any],
      let media = content["application/json"] as? [String: Any],
      let schema = media["schema"] as? [String: Any]
    else { return ["no JSON request body documented for \(method) \(path)"] }
    // A body that is not JSON is itself the problem to report.
    guard let value = try? JSONSerialization.jsonObject(with: Data(body)) else {
      return ["not JSON"]
    }
    var problems: [String] = []
    validate(value, against: schema, at: "request", problems: &problems)
    return problems
  }

  /// A method the path does not document must get 405, `Allow` naming the documented ones,
  /// and the body of `components.responses.MethodNotAllowed`.
  private func methodNotAllowedProblems(
    _ response: TransportResponse, methods: Set<String>, key: String
  ) -> [String] {
    guard response.status == 405 else { return ["undocumented response \(key)"] }
    var problems: [String] = []
    let allowed = Set(
      (response.headers["allow"] ?? "").split(separator: ",").map {
        $0.trimmingCharacters(in: .whitespaces).lowercased()
      })
    if allowed != methods {
      problems.append("\(key): Allow lists \(allowed.sorted()), the document \(methods.sorted())")
    }
    let documented = (document["components"] as? [String: Any])?["responses"] as? [String: Any]
    guard
      let response405 = documented?["MethodNotAllowed"] as? [String: Any],
      let content = response405["content"] as? [String: Any],
      let media = content["application/json"] as? [String: Any],
      let schema = media["schema"] as? [String: Any],
      let body = try? JSONSerialization.jsonObject(with: Data(response.body))
    else { return problems + ["\(key): no documented 405 answer, or its body is not JSON"] }
    validate(body, against: schema, at: "body", problems: &problems)
    return problems
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
    if let variants = schema["oneOf"] as? [[String: Any]] {
      validateOneOf(
        value, variants, discriminator: schema["discriminator"], at: path, problems: &problems)
    }
    if let variants = schema["anyOf"] as? [[String: Any]] {
      let matching = variants.filter { variant in
        var found: [String] = []
        validate(value, against: variant, at: path, problems: &found)
        return found.isEmpty
      }
      if matching.isEmpty { problems.append("\(path): matches none of the anyOf variants") }
    }
    // if / then / else: the condition's outcome picks the schema that must hold.
    if let condition = schema["if"] as? [String: Any] {
      var found: [String] = []
      validate(value, against: condition, at: path, problems: &found)
      if let next = schema[found.isEmpty ? "then" : "else"] as? [String: Any] {
        validate(value, against: next, at: path, problems: &problems)
      }
    }
    if let forbidden = schema["not"] as? [String: Any] {
      var found: [String] = []
      validate(value, against: forbidden, at: path, problems: &found)
      if found.isEmpty { problems.append("\(path): matches a schema it must not (not)") }
    }
    // One type, or (OpenAPI 3.1) a list of them, such as ["string", "null"] for a nullable field.
    if let types = (schema["type"] as? [String]) ?? (schema["type"] as? String).map({ [$0] }) {
      let matches = types.contains { type in
        switch type {
        case "object": value is [String: Any]
        case "array": value is [Any]
        case "string": value is String
        case "boolean": Self.isBoolean(value)
        case "integer":
          Self.isNumber(value)
            && (value as! NSNumber).doubleValue.rounded() == (value as! NSNumber).doubleValue
        case "number": Self.isNumber(value)
        case "null": value is NSNull
        default: true
        }
      }
      guard matches else {
        problems.append("\(path): expected \(types.joined(separator: " or ")), found \(value)")
        return
      }
    }
    if let constant = schema["const"] as? String, value as? String != constant {
      problems.append("\(path): expected '\(constant)', found \(value)")
    } else if let constant = schema["const"] as? NSNumber, !(schema["const"] is String),
      (value as? NSNumber).map({ $0 != constant }) ?? true
    {
      problems.append("\(path): expected \(constant), found \(value)")
    }
    if let string = value as? String {
      let length = string.unicodeScalars.count
      if let minimum = schema["minLength"] as? Int, length < minimum {
        problems.append("\(path): \(length) characters, fewer than \(minimum)")
      }
      if let maximum = schema["maxLength"] as? Int, length > maximum {
        problems.append("\(path): \(length) characters, more than \(maximum)")
      }
    }
    if let array = value as? [Any] {
      if let minimum = schema["minItems"] as? Int, array.count < minimum {
        problems.append("\(path): \(array.count) items, fewer than \(minimum)")
      }
      if let maximum = schema["maxItems"] as? Int, array.count > maximum {
        problems.append("\(path): \(array.count) items, more than \(maximum)")
      }
    }
    if let allowed = (schema["enum"] as? [Any])?.compactMap({ $0 as? String }),
      let string = value as? String,
      !allowed.contains(string)
    {
      problems.append("\(path): '\(string)' is not one of \(allowed)")
    }
    if let pattern = schema["pattern"] as? String, let string = value as? String,
      string.range(of: pattern, options: .regularExpression) == nil
    {
      problems.append("\(path): '\(string)' does not match \(pattern)")
    }
    // The server answers every time in one form; what it takes, the schema's pattern says.
    if schema["format"] as? String == "date-time", path.hasPrefix("body"),
      let string = value as? String,
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
        if properties[key] as? Bool == false {
          problems.append("\(path).\(key): not allowed here")
        } else if let property = properties[key] as? [String: Any] {
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

  /// Exactly one variant must match; with a discriminator, the one its property names.
  private func validateOneOf(
    _ value: Any, _ variants: [[String: Any]], discriminator: Any?, at path: String,
    problems: inout [String]
  ) {
    if let discriminator = discriminator as? [String: Any],
      let property = discriminator["propertyName"] as? String,
      let mapping = discriminator["mapping"] as? [String: String]
    {
      guard let name = (value as? [String: Any])?[property] as? String,
        let reference = mapping[name]
      else {
        problems.append("\(path).\(property): not one of \(mapping.keys.sorted())")
        return
      }
      validate(value, against: ["$ref": reference], at: path, problems: &problems)
      return
    }
    var matching = 0
    for variant in variants {
      var found: [String] = []
      validate(value, against: variant, at: path, problems: &found)
      if found.isEmpty { matching += 1 }
    }
    if matching != 1 { problems.append("\(path): matches \(matching) of the oneOf variants") }
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
