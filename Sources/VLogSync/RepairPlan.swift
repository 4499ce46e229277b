internal import VLog

/// What a repair does about the events a device and the server do not share, the rule the sync
/// follows and a check of the sync reports: push what the server lacks (but what it would
/// refuse as stamped too far ahead of its clock, which waits for a later sync), fetch what the
/// device lacks.
struct RepairPlan: Sendable, Hashable {
  /// What the server lacks and the repair pushes, in id order.
  var push: [Stamp]
  /// What the server lacks but would refuse today as stamped too far ahead: a later sync
  /// pushes it.
  var later: [Stamp]
  /// What the device lacks and the repair fetches, in id order.
  var fetch: [Stamp]

  /// The plan for the device's ids `ours` and the server's ids `theirs` in the same buckets.
  ///
  /// - Parameters:
  ///   - deviceTime: This device's clock, in milliseconds since 1970.
  ///   - skew: The server's clock minus this device's, as last measured (milliseconds).
  ///   - skewBound: How far ahead of its clock the server takes events (milliseconds).
  init(ours: Set<Stamp>, theirs: Set<Stamp>, deviceTime: Int64, skew: Int64, skewBound: Int64) {
    let (ahead, overflow) = deviceTime.addingReportingOverflow(skew)
    let (bound, past) = ahead.addingReportingOverflow(skewBound)
    let latest = overflow || past ? (skew < 0 ? Int64.min : Int64.max) : bound
    let missing = ours.subtracting(theirs).sorted()
    push = missing.filter { Int64(clamping: $0.time.milliseconds) <= latest }
    later = missing.filter { Int64(clamping: $0.time.milliseconds) > latest }
    fetch = theirs.subtracting(ours).sorted()
  }

  /// Whether the two sides hold the same ids.
  var isEmpty: Bool { push.isEmpty && later.isEmpty && fetch.isEmpty }
}
