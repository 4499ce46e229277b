// swift-tools-version: 6.1

import PackageDescription

/// One list of settings for every target: Swift 6 language mode with strict concurrency.
let swiftSettings: [SwiftSetting] = [
  .swiftLanguageMode(.v6),
  .enableUpcomingFeature("ExistentialAny"),
  .enableUpcomingFeature("InternalImportsByDefault"),
  .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
  name: "VLog",
  platforms: [.macOS(.v15), .iOS(.v18)],
  products: [
    .library(name: "VLog", targets: ["VLog"]),
    .library(name: "VLogSync", targets: ["VLogSync"]),
    .library(name: "VLogTesting", targets: ["VLogTesting"]),
    .library(name: "LMDB", targets: ["LMDB"]),
    // The C API itself, for the benchmarks' raw-LMDB reference.
    .library(name: "CLMDB", targets: ["CLMDB"]),
    .executable(name: "vlog", targets: ["VLogCLI"]),
  ],
  dependencies: [
    .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
    .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.3"),
    .package(url: "https://github.com/x-sheep/swift-property-based.git", from: "2.0.1"),
  ],
  targets: [
    .systemLibrary(
      name: "CLMDB",
      pkgConfig: "lmdb",
      providers: [.apt(["liblmdb-dev"]), .brew(["lmdb"])]
    ),
    .target(
      name: "LMDB",
      dependencies: ["CLMDB"],
      swiftSettings: swiftSettings
    ),
    .target(
      name: "VLog",
      dependencies: [
        "LMDB",
        .product(name: "Crypto", package: "swift-crypto"),
      ],
      swiftSettings: swiftSettings
    ),
    .target(
      name: "VLogSync",
      dependencies: ["VLog"],
      swiftSettings: swiftSettings
    ),
    .target(
      name: "VLogTesting",
      dependencies: ["VLog"],
      swiftSettings: swiftSettings
    ),
    .executableTarget(
      name: "VLogCLI",
      dependencies: [
        "VLog",
        "VLogSync",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
      ],
      path: "tools/vlog",
      swiftSettings: swiftSettings
    ),
    .testTarget(
      name: "LMDBTests",
      dependencies: ["LMDB"],
      swiftSettings: swiftSettings
    ),
    .testTarget(
      name: "VLogCLITests",
      dependencies: [
        "VLogCLI", "VLog", "VLogSync", "VLogTesting", "LMDB",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
      ],
      swiftSettings: swiftSettings
    ),
    .testTarget(
      name: "VLogSyncTests",
      dependencies: ["VLogSync", "VLog"],
      resources: [.copy("Fixtures")],
      swiftSettings: swiftSettings
    ),
    .testTarget(
      name: "VLogTests",
      dependencies: [
        "VLog",
        "LMDB",
        "VLogTesting",
        .product(name: "PropertyBased", package: "swift-property-based"),
      ],
      swiftSettings: swiftSettings
    ),
  ]
)
