// What the history a user can trust costs to read: a note's versions listed from the log, in a
// store of 1,000,000 events where that note has 10,000 edits, next to its history (the same
// events, read by `history(of:)`) and a note with 10 edits, measured in the same run; and what
// each note's sync state costs: a timeline page while every note has changes the server has
// not stored, against the same page once the server acknowledged them all, and acknowledging
// the outbox a push page (1,000 events) at a time.
//
//   .build/release/Trust [EVENTS] [EDITS OF THE NOTE]   (defaults 1000000 10000)
//
// Progress goes to standard error, the Markdown table to standard output. `tools/trust` builds
// and runs it.

import Foundation
import VLog

let arguments = CommandLine.arguments.dropFirst().compactMap { Int($0) }
let eventCount = arguments.count > 0 ? arguments[0] : 1_000_000
let noteEdits = arguments.count > 1 ? arguments[1] : 10_000
let noteCount = 10_000

func log(_ message: String) {
  FileHandle.standardError.write(Data((message + "\n").utf8))
}

/// The median of `runs` timings of `body`, in milliseconds.
func milliseconds(runs: Int = 21, _ body: () throws -> Void) rethrows -> Double {
  var samples: [Double] = []
  for _ in 0..<runs {
    let start = ContinuousClock.now
    try body()
    let elapsed = ContinuousClock.now - start
    samples.append(
      Double(elapsed.components.seconds) * 1e3 + Double(elapsed.components.attoseconds) / 1e15)
  }
  return samples.sorted()[runs / 2]
}

let directory = FileManager.default.temporaryDirectory
  .appendingPathComponent("vlog-trust-\(UUID().uuidString)").path
// A temporary store: a failure to remove it leaves a file in the temporary directory, not a
// wrong figure.
defer { try? FileManager.default.removeItem(atPath: directory) }
let store = try NoteStore.open(at: directory, options: NoteStore.Options(durability: .noSync))
defer { store.close() }

// 10,000 notes; then edits, every (events / edits)th of them to the measured note, the rest to
// the others in turn; about 100-byte texts.
log("writing \(eventCount) events")
var notes: [NoteID] = []
for start in stride(from: 0, to: noteCount, by: 1_000) {
  notes += try store.write { edits in
    (start..<min(start + 1_000, noteCount)).map { edits.createNote(text: "note \($0)") }
  }
}
let measured = notes[0]
let small = notes[1]
let filler = String(repeating: "x", count: 90)
let every = max(1, (eventCount - noteCount) / noteEdits)
var written = noteCount
var edit = 0
while written < eventCount {
  let batch = min(10_000, eventCount - written)
  try store.write { edits in
    for offset in 0..<batch {
      let index = written + offset
      let note: NoteID
      if index % every == 0 {
        note = measured
      } else if index < noteCount + 10 {
        note = small
      } else {
        note = notes[2 + index % (noteCount - 2)]
      }
      edits.setText("\(filler) \(index)", of: note)
      edit += 1
    }
  }
  written += batch
  if written % 200_000 < batch { log("  \(written)") }
}

let versions = try store.versions(of: measured)
let smallVersions = try store.versions(of: small)
log("the note has \(versions.count) versions; measuring")
let listing = try milliseconds { _ = try store.versions(of: measured) }
let history = try milliseconds { _ = try store.history(of: measured) }
let smallListing = try milliseconds { _ = try store.versions(of: small) }
let note = try milliseconds { _ = try store.note(measured) }

func format(_ value: Double) -> String { String(format: value < 1 ? "%.3f" : "%.1f", value) }

print("| figure | events | versions | ms | per version, µs | ratio |")
print("|---|---:|---:|---:|---:|---|")
print(
  "| versions of a note (`versions(of:)`) | \(eventCount) | \(versions.count) | "
    + "\(format(listing)) | \(format(listing * 1000 / Double(versions.count))) | "
    + "\(String(format: "%.2f", listing / history))× its history |")
print(
  "| history of the same note (`history(of:)`, the reference) | \(eventCount) | "
    + "\(versions.count) | \(format(history)) | "
    + "\(format(history * 1000 / Double(versions.count))) | 1 |")
print(
  "| versions of a note with few edits | \(eventCount) | \(smallVersions.count) | "
    + "\(format(smallListing)) | \(format(smallListing * 1000 / Double(smallVersions.count))) | "
    + "\(String(format: "%.1f", smallListing / note))× reading the note |")
print(
  "| the note itself (`note(_:)`) | \(eventCount) | — | \(format(note)) | — | — |")

// Sync state: nothing was pushed, so every note is pending.
let pendingCount = try store.pendingNotes().count
let timelinePending = try milliseconds { _ = try store.timeline(limit: 50) }
let listingPending = try milliseconds(runs: 5) { _ = try store.pendingNotes() }
log("\(pendingCount) notes pending; acknowledging the outbox 1,000 events at a time")
var acknowledgements: [Double] = []
while try store.outboxCount() > 0 {
  let page = try store.outbox(limit: 1_000)
  let start = ContinuousClock.now
  try store.acknowledge(through: page.last!.sequence)
  let elapsed = ContinuousClock.now - start
  acknowledgements.append(
    Double(elapsed.components.seconds) * 1e3 + Double(elapsed.components.attoseconds) / 1e15)
}
let timelineConfirmed = try milliseconds { _ = try store.timeline(limit: 50) }
let acknowledgement = acknowledgements.sorted()[acknowledgements.count / 2]

print()
print("| figure | events | pending notes | ms | ratio |")
print("|---|---:|---:|---:|---|")
print(
  "| timeline page of 50, every note pending | \(eventCount) | \(pendingCount) | "
    + "\(format(timelinePending)) | \(String(format: "%.2f", timelinePending / timelineConfirmed))× "
    + "the page with none |")
print(
  "| timeline page of 50, none pending (the reference) | \(eventCount) | 0 | "
    + "\(format(timelineConfirmed)) | 1 |")
print(
  "| the pending notes listed (`pendingNotes()`) | \(eventCount) | \(pendingCount) | "
    + "\(format(listingPending)) | — |")
print(
  "| acknowledging a push page of 1,000 events, median of \(acknowledgements.count) | "
    + "\(eventCount) | \(pendingCount) at first | \(format(acknowledgement)) | — |")
