internal import Synchronization

/// The process's open environments, by canonical path.
enum Registry {
  static let environments = Mutex<[String: WeakEnvironment]>([:])
}

struct WeakEnvironment {
  weak var environment: Environment?
}
