import HTTPTypes
import LMDB
import Testing
import VLogWire

@testable import VLog
@testable import VLogServer

@Suite("Storage errors: LMDB's failures leave the LMDB server's storage as the storage's")
struct StorageErrorTests {
  static func lmdb(_ code: LMDBError.Code) -> LMDBError {
    LMDBError(code: code, operation: "mdb_txn_commit", message: "planted")
  }

  @Test(
    "damage is damaged (500), what an operator can make room for is unavailable (503, retried), the rest failed (500); the engine's failures the same"
  )
  func mapping() throws {
    let cases: [(any Error, StorageError.Code, Int)] = [
      (Self.lmdb(.corrupted), .damaged, 500),
      (Self.lmdb(.pageNotFound), .damaged, 500),
      (Self.lmdb(.mapFull), .unavailable, 503),
      (Self.lmdb(.noSpace), .unavailable, 503),
      (Self.lmdb(.readersFull), .unavailable, 503),
      (Self.lmdb(.keyExists), .failed, 500),
      (Self.lmdb(.versionMismatch), .unusable, 500),
      (VLogError(.unsupportedFormat, "format 9"), .unusable, 500),
      (VLogError(.corruptStore, "a record's checksum differs"), .damaged, 500),
      (VLogError(.storage, "commit", underlying: Self.lmdb(.noSpace)), .unavailable, 503),
      (VLogError(.invalidValue, "planted"), .failed, 500),
    ]
    for (planted, code, status) in cases {
      let error = #expect(throws: StorageError.self) {
        try StorageError.converting { () throws -> Int in throw planted }
      }
      #expect(error?.code == code, "\(planted)")
      let answer = ServerError(try #require(error), requestID: "r-1")
      #expect(Int(answer.status.code) == status, "\(planted)")
      // What the storage says of itself stays in the log.
      #expect(!answer.body.message.contains("planted"))
    }
    // A StorageError passes as it is.
    let kept = #expect(throws: StorageError.self) {
      try StorageError.converting { () throws -> Int in throw StorageError.accountExists("ann") }
    }
    #expect(kept?.code == .accountExists)
  }
}
