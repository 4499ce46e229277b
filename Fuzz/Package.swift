// swift-tools-version: 6.1

import PackageDescription

// The libFuzzer targets live in a package of their own: they are built with
// `-sanitize=fuzzer,address`, which must not reach the product's build. Build and run them
// through `tools/fuzz` at the top.
let package = Package(
  name: "VLogFuzz",
  platforms: [.macOS(.v15)],
  dependencies: [
    .package(name: "VLog", path: "..")
  ],
  targets: [
    // One binary, every target: `VLOG_FUZZ_TARGET` picks which decoder it feeds.
    .executableTarget(
      name: "VLogFuzz",
      dependencies: [
        .product(name: "VLog", package: "VLog"),
        .product(name: "VLogWire", package: "VLog"),
        .product(name: "LMDB", package: "VLog"),
      ],
      swiftSettings: [.swiftLanguageMode(.v6)]
    )
  ]
)
