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
    .library(name: "LMDB", targets: ["LMDB"]),
    // The C API itself, for the benchmarks' raw-LMDB reference.
    .library(name: "CLMDB", targets: ["CLMDB"]),
    .executable(name: "vlog", targets: ["VLogCLI"]),
  ],
  dependencies: [
    .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2")
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
    .executableTarget(
      name: "VLogCLI",
      dependencies: [
        "LMDB",
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
  ]
)
