internal import Foundation
internal import HTTPTypes
internal import Hummingbird
internal import Logging
internal import NIOCore
internal import VLog
internal import VLogWire

/// Attachment bytes: which of them the server lacks, uploads and downloads by hash.
struct BlobsController: ServerController {
  let blobs: any BlobStorage
  let keys: any KeyStorage
  let auth: Authenticator
  let reader: RequestReader
  /// The most hashes one request asks about.
  let maximumHashes: Int
  /// The most bytes of one blob.
  let maximumBlobBytes: Int
  /// How long bytes no event uses are kept.
  let gracePeriod: Duration
  let now: @Sendable () -> Date

  var routes: [Route] {
    [
      Route("v1/sync/missing-blobs", .post) { try await missingBlobs($0, $1) },
      Route("v1/blobs/:hash", .get, answersHead: true) { try await blob($0, $1) },
      Route("v1/blobs/:hash", .put) { try await putBlob($0, $1) },
    ]
  }

  func missingBlobs(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, _) = try await auth.authenticate(request)
    let body = try await reader.decode(MissingBlobsRequest.self, from: request)
    let maximum = maximumHashes
    let hashes = try checked { () throws(WireError) in try body.validated(maximum: maximum) }
    // Bytes released more than half the grace period ago count as missing: the client then
    // sends them again (which keeps them a whole period), rather than push an attachment whose
    // bytes a sweep removes before the push arrives.
    let missing = try await blobs.missingBlobs(
      hashes, account: account,
      releasedBefore: Milliseconds(now()).subtracting(gracePeriod / 2))
    context.logger.info(
      "missing blobs",
      metadata: [
        "account": "\(account)", "asked": "\(hashes.count)", "missing": "\(missing.count)",
      ])
    return try json(MissingBlobsResponse(missing: missing), status: .ok)
  }

  func putBlob(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, _) = try await auth.authenticate(request)
    let hash = try blobHash(context)
    let bytes = try await reader.collect(request, upTo: maximumBlobBytes)
    let actual = sha256(bytes)
    guard actual == hash.bytes else {
      throw ServerError.blobMismatch(expected: hash, actual: actual)
    }
    // A token alone takes none of an encrypted account's room.
    if let record = try await keys.encryption(of: account),
      !record.admits(
        signature: request.headers[.requestSignature], method: "PUT", route: "/v1/blobs/\(hash)",
        body: bytes)
    {
      throw ServerError.unsignedWrite
    }
    let stored = try await blobs.storeBlob(
      bytes, hash: hash, account: account, now: Milliseconds(now()))
    context.logger.info(
      "blob", metadata: ["account": "\(account)", "bytes": "\(bytes.count)", "new": "\(stored)"])
    return Response(status: stored ? .created : .ok)
  }

  func blob(_ request: Request, _ context: ServerContext) async throws -> Response {
    let (account, _) = try await auth.authenticate(request)
    let hash = try blobHash(context)
    guard let bytes = try await blobs.blob(hash, account: account) else {
      throw ServerError.blobNotFound(hash)
    }
    var headers = HTTPFields()
    headers[.contentType] = "application/octet-stream"
    return Response(
      status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
  }

  private func blobHash(_ context: ServerContext) throws -> BlobHash {
    let text = context.parameters.get("hash") ?? ""
    guard let hash = BlobHash(hex: text) else {
      throw ServerError.invalid(
        WireError("hash", "'\(text)' is not a SHA-256 of 64 hexadecimal digits"))
    }
    return hash
  }
}
