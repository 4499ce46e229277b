internal import HTTPTypes
internal import Hummingbird
internal import NIOCore

/// What operators and load balancers ask: health, readiness, metrics and the API's document.
struct OperationsController: ServerController {
  /// `lmdb` or `postgres`.
  let backend: String
  /// Whether the storage answers now.
  let isReady: @Sendable () async -> Bool
  let metrics: ServerMetrics
  /// The connections open, for the metrics.
  let connections: ConnectionRegistry
  /// The live channels open, for the metrics.
  let live: LiveHub

  var routes: [Route] {
    [
      Route("metrics", .get) { _, _ in metricsResponse() },
      Route("v1/health", .get) { _, _ in try await health() },
      Route("v1/health/live", .get) { _, _ in try liveness() },
      Route("v1/openapi.json", .get, answersHead: true) { _, _ in documentResponse() },
    ]
  }

  /// `GET /v1/health`: 200 while the storage answers, 503 while it does not (a database that
  /// cannot be reached): for load balancers, which should send requests elsewhere then.
  func health() async throws -> Response {
    let ready = await isReady()
    return try json(
      HealthBody(
        status: ready ? "ready" : "unavailable", live: true, ready: ready, storage: backend),
      status: ready ? .ok : .serviceUnavailable)
  }

  /// `GET /v1/health/live`: 200 while the process serves requests, whatever the storage does.
  func liveness() throws -> Response {
    try json(HealthBody(status: "live", live: true, ready: nil, storage: backend), status: .ok)
  }

  /// `GET /metrics`: the metrics in Prometheus's text format.
  func metricsResponse() -> Response {
    var headers = HTTPFields()
    headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
    return Response(
      status: .ok, headers: headers,
      body: .init(
        byteBuffer: ByteBuffer(
          bytes: metrics.exposition(
            openConnections: connections.openCount, liveChannels: live.count))))
  }

  /// `GET /v1/openapi.json`: the OpenAPI document.
  func documentResponse() -> Response {
    var headers = HTTPFields()
    headers[.contentType] = "application/json"
    return Response(
      status: .ok, headers: headers,
      body: .init(byteBuffer: ByteBuffer(bytes: SyncServer.openAPIDocument)))
  }
}

/// The answer of `GET /v1/health` and `GET /v1/health/live`.
struct HealthBody: Encodable {
  /// `ready`, `unavailable` or `live`.
  let status: String
  let live: Bool
  /// Whether the storage answers (not reported by the liveness check).
  let ready: Bool?
  /// `lmdb` or `postgres`.
  let storage: String
}
