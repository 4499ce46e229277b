internal import Logging
internal import ServiceLifecycle

/// Removes released attachment bytes past their grace period, and throttle counters past
/// their windows, every minute while the server runs (``SyncServer/sweepReleasedBlobs()``,
/// ``SyncServer/sweepThrottles()``); a failed sweep is logged and tried again.
struct BlobSweeper: Service {
  let server: SyncServer

  func run() async throws {
    while !Task.isCancelled {
      do {
        try await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(60)) }
      } catch {
        return
      }
      do {
        let removed = try await server.sweepReleasedBlobs()
        if removed > 0 {
          server.logger.info("swept released blobs", metadata: ["removed": "\(removed)"])
        }
      } catch {
        server.logger.warning("sweeping released blobs failed", metadata: ["error": "\(error)"])
      }
      do {
        try await server.sweepThrottles()
      } catch {
        server.logger.warning("sweeping throttle counters failed", metadata: ["error": "\(error)"])
      }
    }
  }
}
