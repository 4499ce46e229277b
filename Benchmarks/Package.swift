// swift-tools-version: 6.3

import PackageDescription

// The benchmarks live in a package of their own so that the benchmark harness and its
// dependencies stay out of the product's build. Run them from this directory with
// `swift package -c release benchmark`, or through `tools/benchmark` at the top.
let package = Package(
  name: "VLogBenchmarks",
  platforms: [.macOS(.v15)],
  dependencies: [
    .package(name: "VLog", path: ".."),
    .package(
      url: "https://github.com/ordo-one/benchmark.git", from: "1.38.1", traits: ["MallocInterposer"]
    ),
  ],
  targets: [
    .target(
      name: "BenchmarkSupport",
      dependencies: [
        .product(name: "Benchmark", package: "benchmark"),
        .product(name: "CLMDB", package: "VLog"),
      ],
      swiftSettings: [.swiftLanguageMode(.v6), .enableUpcomingFeature("InternalImportsByDefault")]
    ),
    .executableTarget(
      name: "Engine",
      dependencies: [
        "BenchmarkSupport",
        .product(name: "Benchmark", package: "benchmark"),
        .product(name: "VLog", package: "VLog"),
      ],
      path: "Benchmarks/Engine",
      swiftSettings: [.swiftLanguageMode(.v6)],
      plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
    ),
    .executableTarget(
      name: "Sync",
      dependencies: [
        "BenchmarkSupport",
        .product(name: "Benchmark", package: "benchmark"),
        .product(name: "VLog", package: "VLog"),
        .product(name: "VLogSync", package: "VLog"),
        .product(name: "VLogServer", package: "VLog"),
      ],
      path: "Benchmarks/Sync",
      swiftSettings: [.swiftLanguageMode(.v6)],
      plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
    ),
    .executableTarget(
      name: "LMDBReference",
      dependencies: [
        "BenchmarkSupport",
        .product(name: "Benchmark", package: "benchmark"),
        .product(name: "LMDB", package: "VLog"),
      ],
      path: "Benchmarks/LMDBReference",
      swiftSettings: [.swiftLanguageMode(.v6)],
      plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
    ),
  ]
)
