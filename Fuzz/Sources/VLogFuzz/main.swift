import Foundation

// One binary for every target: `VLOG_FUZZ_TARGET` names it (see `Target`), and
// `VLOG_FUZZ_SEEDS=DIR` writes its seed corpus into DIR instead of fuzzing.
//
// SwiftPM links an executable's entry point as `main`, so libFuzzer's own `main` is never
// pulled in: this starts libFuzzer's driver.
@_silgen_name("LLVMFuzzerRunDriver")
func runDriver(
  _ argc: UnsafeMutablePointer<CInt>,
  _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
  _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt

let environment = ProcessInfo.processInfo.environment
guard let name = environment["VLOG_FUZZ_TARGET"], let target = Target(rawValue: name) else {
  let names = Target.allCases.map(\.rawValue).joined(separator: ", ")
  FileHandle.standardError.write(Data("VLogFuzz: set VLOG_FUZZ_TARGET to one of \(names)\n".utf8))
  exit(2)
}
if let directory = environment["VLOG_FUZZ_SEEDS"] {
  do {
    try Seeds.write(target, into: directory)
    exit(0)
  } catch {
    FileHandle.standardError.write(Data("VLogFuzz: cannot write seeds: \(error)\n".utf8))
    exit(1)
  }
}
let selected = target
var argc = CommandLine.argc
var argv = CommandLine.unsafeArgv
exit(
  runDriver(&argc, &argv) { data, size in
    selected.run(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
    return 0
  })
