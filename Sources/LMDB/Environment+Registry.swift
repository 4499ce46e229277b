/// The process's open environments, by canonical path.
enum Registry {
  static let environments = Locked<[String: WeakEnvironment]>([:])
}

struct WeakEnvironment {
  weak var environment: Environment?
}
