internal import CoreMetrics
internal import Prometheus

/// The server's metrics (swift-metrics, exported by swift-prometheus), served in Prometheus's
/// text format at `GET /metrics`.
///
/// | metric | type | labels |
/// |---|---|---|
/// | `vlog_http_requests_total` | counter | `method`, `path` (the route, e.g. `/v1/blobs/:hash`), `status` |
/// | `vlog_http_request_duration_seconds` | histogram | `method`, `path`, `status` |
/// | `vlog_http_connections` | gauge | open request connections (not those holding a live channel) |
/// | `vlog_live_channels` | gauge | open live channels |
/// | `vlog_events_stored_total` | counter | events new to their account's log |
/// | `vlog_pages_served_total`, `vlog_events_served_total` | counter | sync answers and the events they carried |
/// | `vlog_sign_in_failures_total` | counter | wrong user name or password |
///
/// Each server has its own registry, so several servers in one process (tests) count apart.
final class ServerMetrics: Sendable {
  private let registry = PrometheusCollectorRegistry()
  private let factory: PrometheusMetricsFactory
  let eventsStored: CoreMetrics.Counter
  let pagesServed: CoreMetrics.Counter
  let eventsServed: CoreMetrics.Counter
  let signInFailures: CoreMetrics.Counter
  private let connections: CoreMetrics.Gauge
  private let liveChannels: CoreMetrics.Gauge

  init() {
    var factory = PrometheusMetricsFactory(registry: registry)
    factory.defaultDurationHistogramBuckets = [
      .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5),
      .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100),
      .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(5),
      .seconds(10),
    ]
    self.factory = factory
    eventsStored = CoreMetrics.Counter(label: "vlog_events_stored_total", factory: factory)
    pagesServed = CoreMetrics.Counter(label: "vlog_pages_served_total", factory: factory)
    eventsServed = CoreMetrics.Counter(label: "vlog_events_served_total", factory: factory)
    signInFailures = CoreMetrics.Counter(label: "vlog_sign_in_failures_total", factory: factory)
    connections = CoreMetrics.Gauge(label: "vlog_http_connections", factory: factory)
    liveChannels = CoreMetrics.Gauge(label: "vlog_live_channels", factory: factory)
  }

  /// Counts a request and records how long it took.
  func request(method: String, path: String, status: Int, duration: Duration) {
    let labels = [("method", method), ("path", path), ("status", String(status))]
    CoreMetrics.Counter(label: "vlog_http_requests_total", dimensions: labels, factory: factory)
      .increment()
    CoreMetrics.Timer(
      label: "vlog_http_request_duration_seconds", dimensions: labels, factory: factory
    )
    .recordNanoseconds(
      duration.components.seconds * 1_000_000_000
        + duration.components.attoseconds / 1_000_000_000)
  }

  /// The metrics in Prometheus's text exposition format, with the open connections and live
  /// channels now.
  func exposition(openConnections: Int, liveChannels: Int) -> [UInt8] {
    connections.record(openConnections)
    self.liveChannels.record(liveChannels)
    return registry.emitToBuffer()
  }
}
