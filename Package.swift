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
    .library(name: "VLogWire", targets: ["VLogWire"]),
    .library(name: "VLogSync", targets: ["VLogSync"]),
    .library(name: "VLogServer", targets: ["VLogServer"]),
    .library(name: "VLogTesting", targets: ["VLogTesting"]),
    .library(name: "VLogServerTesting", targets: ["VLogServerTesting"]),
    .library(name: "LMDB", targets: ["LMDB"]),
    // The C API itself, for the benchmarks' raw-LMDB reference.
    .library(name: "CLMDB", targets: ["CLMDB"]),
    .executable(name: "vlog", targets: ["VLogCLI"]),
  ],
  dependencies: [
    .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
    .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.3"),
    .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
    .package(
      url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1", traits: []),
    .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
    .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
    .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
    .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
    .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
    .package(url: "https://github.com/x-sheep/swift-property-based.git", from: "2.0.1"),
    .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
    .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
    .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
    .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
    // The test of a client generated from the OpenAPI document (OpenAPIClientTests) only.
    .package(url: "https://github.com/apple/swift-openapi-runtime.git", from: "1.13.4"),
    .package(
      url: "https://github.com/swift-server/swift-openapi-async-http-client.git", from: "1.5.0"),
    // Documentation only (`tools/docs`): a command plugin, linked into nothing.
    .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
  ],
  targets: [
    .systemLibrary(
      name: "CLMDB",
      pkgConfig: "lmdb",
      providers: [.apt(["liblmdb-dev"]), .brew(["lmdb"])]
    ),
    .systemLibrary(
      name: "CXXHash",
      pkgConfig: "libxxhash",
      providers: [.apt(["libxxhash-dev"]), .brew(["xxhash"])]
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
        "CXXHash",
        .product(name: "Crypto", package: "swift-crypto"),
      ],
      swiftSettings: swiftSettings
    ),
    .target(
      name: "VLogWire",
      dependencies: ["VLog", .product(name: "Crypto", package: "swift-crypto")],
      swiftSettings: swiftSettings
    ),
    .target(
      name: "VLogSync",
      dependencies: [
        "VLog",
        "VLogWire",
        .product(name: "AsyncHTTPClient", package: "async-http-client"),
        .product(name: "Crypto", package: "swift-crypto"),
        .product(name: "_CryptoExtras", package: "swift-crypto"),
        .product(name: "Logging", package: "swift-log"),
        .product(name: "NIOCore", package: "swift-nio"),
        .product(name: "NIOHTTP1", package: "swift-nio"),
      ],
      swiftSettings: swiftSettings
    ),
    .target(
      name: "VLogServer",
      dependencies: [
        "VLog",
        "VLogWire",
        "LMDB",
        .product(name: "Hummingbird", package: "hummingbird"),
        .product(name: "HummingbirdCore", package: "hummingbird"),
        .product(name: "HTTPTypes", package: "swift-http-types"),
        .product(name: "NIOCore", package: "swift-nio"),
        .product(name: "NIOHTTP1", package: "swift-nio"),
        .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
        .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
        .product(name: "NIOPosix", package: "swift-nio"),
        .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
        .product(name: "Crypto", package: "swift-crypto"),
        .product(name: "_CryptoExtras", package: "swift-crypto"),
        .product(name: "Logging", package: "swift-log"),
        .product(name: "Metrics", package: "swift-metrics"),
        .product(name: "Prometheus", package: "swift-prometheus"),
        .product(name: "PostgresNIO", package: "postgres-nio"),
        .product(name: "NIOSSL", package: "swift-nio-ssl"),
      ],
      resources: [.embedInCode("openapi.json")],
      swiftSettings: swiftSettings
    ),
    .target(
      name: "VLogTesting",
      dependencies: ["VLog", "LMDB"],
      swiftSettings: swiftSettings
    ),
    .target(
      name: "VLogServerTesting",
      dependencies: [
        "VLogServer",
        "VLogSync",
        .product(name: "Hummingbird", package: "hummingbird"),
        .product(name: "HTTPTypes", package: "swift-http-types"),
        .product(name: "Logging", package: "swift-log"),
        .product(name: "NIOCore", package: "swift-nio"),
        .product(name: "NIOEmbedded", package: "swift-nio"),
      ],
      swiftSettings: swiftSettings
    ),
    .executableTarget(
      name: "VLogCLI",
      dependencies: [
        // LMDB: its errors, which reach the tool through the engine, are reported as LMDB's.
        "LMDB",
        "VLog",
        "VLogSync",
        "VLogServer",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
        .product(name: "Logging", package: "swift-log"),
      ],
      path: "tools/vlog",
      swiftSettings: swiftSettings
    ),
    .executableTarget(
      name: "VLogCrash",
      dependencies: [
        "LMDB",
        "VLog",
        "VLogSync",
        "VLogServer",
        "VLogServerTesting",
        "VLogTesting",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
        .product(name: "Logging", package: "swift-log"),
      ],
      path: "tools/crash-harness",
      swiftSettings: swiftSettings
    ),
    .executableTarget(
      name: "VLogLoad",
      dependencies: [
        "VLog",
        "VLogSync",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
        .product(name: "AsyncHTTPClient", package: "async-http-client"),
      ],
      path: "tools/load-harness",
      swiftSettings: swiftSettings
    ),
    // What the server test targets share: the PostgreSQL cluster of a test run.
    .target(
      name: "ServerTestSupport",
      dependencies: [
        "VLogTesting",
        .product(name: "Logging", package: "swift-log"),
        .product(name: "PostgresNIO", package: "postgres-nio"),
      ],
      path: "Tests/ServerTestSupport",
      swiftSettings: swiftSettings
    ),
    .testTarget(
      name: "LMDBTests",
      dependencies: ["LMDB", "VLogTesting"],
      swiftSettings: swiftSettings
    ),
    .testTarget(
      name: "VLogCLITests",
      dependencies: [
        "VLogCLI", "VLog", "VLogSync", "VLogWire", "VLogServer", "VLogTesting", "LMDB",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
      ],
      swiftSettings: swiftSettings
    ),
    .testTarget(
      name: "VLogServerTests",
      dependencies: [
        "VLogServer", "VLogServerTesting", "VLogSync", "VLogWire", "VLog", "VLogTesting", "LMDB",
        "ServerTestSupport",
        .product(name: "HummingbirdTesting", package: "hummingbird"),
        .product(name: "Logging", package: "swift-log"),
        .product(name: "NIOCore", package: "swift-nio"),
        .product(name: "NIOEmbedded", package: "swift-nio"),
        .product(name: "PostgresNIO", package: "postgres-nio"),
      ],
      swiftSettings: swiftSettings
    ),
    // A client generated from the OpenAPI document by swift-openapi-generator
    // (tools/generate-openapi-client), against a live server on each backend.
    .testTarget(
      name: "OpenAPIClientTests",
      dependencies: [
        "VLog", "VLogServer", "VLogTesting", "ServerTestSupport",
        .product(name: "OpenAPIRuntime", package: "swift-openapi-runtime"),
        .product(name: "HTTPTypes", package: "swift-http-types"),
        .product(name: "Crypto", package: "swift-crypto"),
        .product(name: "OpenAPIAsyncHTTPClient", package: "swift-openapi-async-http-client"),
        .product(name: "HummingbirdTesting", package: "hummingbird"),
        .product(name: "Logging", package: "swift-log"),
      ],
      exclude: ["openapi-generator-config.yaml"],
      swiftSettings: swiftSettings
    ),
    .testTarget(
      name: "VLogSyncTests",
      dependencies: ["VLogSync", "VLogWire", "VLog", "VLogTesting"],
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
