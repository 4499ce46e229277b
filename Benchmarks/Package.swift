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
    // The peer the engine is compared with; the product never depends on it.
    .package(url: "https://github.com/groue/GRDB.swift.git", exact: "7.10.0"),
  ],
  targets: [
    // The notes-app workload and one interface over raw LMDB, VLog and SQLite through GRDB.
    .target(
      name: "Workload",
      dependencies: [
        "BenchmarkSupport",
        .product(name: "VLog", package: "VLog"),
        .product(name: "VLogTesting", package: "VLog"),
        .product(name: "GRDB", package: "GRDB.swift"),
      ],
      swiftSettings: [.swiftLanguageMode(.v6), .enableUpcomingFeature("InternalImportsByDefault")]
    ),
    // Runs the workload on all three at the sizes given and prints a Markdown table.
    .executableTarget(
      name: "Compare",
      dependencies: ["Workload", "BenchmarkSupport", .product(name: "VLog", package: "VLog")],
      swiftSettings: [.swiftLanguageMode(.v6)]
    ),
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
      name: "Peer",
      dependencies: [
        "BenchmarkSupport", "Workload",
        .product(name: "Benchmark", package: "benchmark"),
        .product(name: "VLog", package: "VLog"),
      ],
      path: "Benchmarks/Peer",
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
