public import VLog

// A client asks which attachment bytes the server lacks before it uploads any, so that bytes
// the server holds (uploaded by this device before a retry, by another device, or kept for an
// undo) never travel again.

/// The body of `POST /v1/sync/missing-blobs`: the SHA-256 hashes of the bytes the client is
/// about to upload.
public struct MissingBlobsRequest: Codable, Sendable, Hashable {
  /// The hashes, each 64 hexadecimal digits.
  public var hashes: [String]

  enum CodingKeys: String, CodingKey { case hashes }

  /// Creates a request.
  public init(hashes: [BlobHash]) { self.hashes = hashes.map(\.description) }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: ["hashes"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    hashes = try container.decode([String].self, forKey: .hashes)
  }

  /// Checks the hashes and converts them.
  ///
  /// - Parameter maximum: The most hashes one request may ask about.
  /// - Throws: ``WireError`` naming the hash at fault.
  public func validated(maximum: Int) throws(WireError) -> [BlobHash] {
    guard hashes.count <= maximum else {
      throw WireError(
        "hashes", "\(hashes.count) hashes; one request asks about at most \(maximum)")
    }
    return try parseHashes(hashes, field: "hashes")
  }
}

/// The answer to `POST /v1/sync/missing-blobs`: the hashes asked about whose bytes the account
/// does not hold, in the order asked.
public struct MissingBlobsResponse: Codable, Sendable, Hashable {
  /// The hashes, each 64 hexadecimal digits.
  public var missing: [String]

  enum CodingKeys: String, CodingKey { case missing }

  /// Creates a response.
  public init(missing: [BlobHash]) { self.missing = missing.map(\.description) }

  /// Decodes the JSON types, refusing keys this version does not know.
  public init(from decoder: any Decoder) throws {
    try refuseUnknownKeys(in: decoder, allowed: ["missing"])
    let container = try decoder.container(keyedBy: CodingKeys.self)
    missing = try container.decode([String].self, forKey: .missing)
  }

  /// Checks the hashes and converts them.
  ///
  /// - Throws: ``WireError`` naming the hash at fault.
  public func validated() throws(WireError) -> [BlobHash] {
    try parseHashes(missing, field: "missing")
  }
}

private func parseHashes(_ hashes: [String], field: String) throws(WireError) -> [BlobHash] {
  var result: [BlobHash] = []
  result.reserveCapacity(hashes.count)
  for (index, text) in hashes.enumerated() {
    guard let hash = BlobHash(hex: text) else {
      throw WireError(
        "\(field)[\(index)]", "'\(text)' is not a SHA-256 hash of 64 hexadecimal digits")
    }
    result.append(hash)
  }
  return result
}
