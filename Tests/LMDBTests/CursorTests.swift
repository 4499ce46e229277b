import LMDB
import Testing
import VLogTesting

@Suite("Ordering, append and cursors")
struct CursorTests {
  @Test("big-endian keys iterate in numeric order, whatever the insertion order")
  func bigEndianOrdering() throws {
    try withTemporaryEnvironment { environment, _ throws in
      let database = try environment.openDatabase(named: "ordered", flags: .create)
      var generator = SeededGenerator(seed: 7)
      // Numbers whose little-endian bytes sort differently from their values.
      let numbers = (0..<2000 as Range<UInt64>).map { $0 * 257 + 255 }.shuffled(using: &generator)
      try environment.write { transaction throws in
        for number in numbers {
          try transaction.put(value(number), forKey: key(number), in: database)
        }
      }
      let read = try environment.read { transaction throws in
        try entries(transaction, in: database).map { entry throws in
          entry.key.withUnsafeBytes { number($0) }
        }
      }
      #expect(read == numbers.sorted())
    }
  }

  @Test("append stores ascending keys and refuses a key that does not sort last")
  func appendOrder() throws {
    try withTemporaryEnvironment { environment, _ throws in
      let database = try environment.openDatabase(named: "log", flags: .create)
      try environment.write { transaction throws in
        for number in 1...1000 as ClosedRange<UInt64> {
          try transaction.put(value(number), forKey: key(number), in: database, options: .append)
        }
      }
      for badKey in [key(500), key(1000)] {
        let error = #expect(throws: LMDBError.self) {
          try environment.write { transaction throws in
            try transaction.put(value(0), forKey: badKey, in: database, options: .append)
          }
        }
        #expect(error?.code == .keyExists)
        #expect(error?.operation == "put into 'log'")
        #expect(error?.message.contains("sorts after every key") == true)
      }
      // keyExists does not poison the transaction: the caller may carry on.
      try environment.write { transaction throws in
        #expect(throws: LMDBError.self) {
          try transaction.put(value(0), forKey: key(3), in: database, options: .append)
        }
        try transaction.put(value(1001), forKey: key(1001), in: database, options: .append)
      }
      #expect(try environment.read { try $0.count(in: database) } == 1001)
    }
  }

  @Test("noOverwrite keeps the stored value")
  func noOverwrite() throws {
    try withTemporaryEnvironment { environment, _ throws in
      let database = try environment.openDatabase(named: "values", flags: .create)
      try environment.write { try $0.put(Array("first".utf8), forKey: key(1), in: database) }
      let error = #expect(throws: LMDBError.self) {
        try environment.write { transaction throws in
          try transaction.put(
            Array("second".utf8), forKey: key(1), in: database, options: .noOverwrite)
        }
      }
      #expect(error?.code == .keyExists)
      #expect(
        try environment.read { try $0.value(forKey: key(1), in: database) } == Array("first".utf8))
    }
  }

  @Test("a cursor moves first, last, next, previous and seeks")
  func cursorMovement() throws {
    try withTemporaryEnvironment { environment, _ throws in
      let database = try environment.openDatabase(named: "values", flags: .create)
      let empty = try environment.read { transaction throws in
        try transaction.withCursor(on: database) { cursor throws in
          (try cursor.first(), try cursor.last())
        }
      }
      #expect(empty == (false, false))
      try environment.write { transaction throws in
        for number in stride(from: 10, through: 50, by: 10) as StrideThrough<UInt64> {
          try transaction.put(value(number), forKey: key(number), in: database)
        }
      }
      try environment.read { transaction throws in
        try transaction.withCursor(on: database) { cursor throws in
          #expect(try cursor.first())
          #expect(try cursor.currentKey() == key(10))
          #expect(try cursor.next())
          #expect(try cursor.currentKey() == key(20))
          #expect(try cursor.last())
          #expect(try cursor.currentKey() == key(50))
          #expect(try cursor.currentValue() == value(50))
          #expect(try !cursor.next())
          #expect(try cursor.seek(to: key(25)))
          #expect(try cursor.currentKey() == key(30))
          #expect(try cursor.previous())
          #expect(try cursor.currentKey() == key(20))
          #expect(try cursor.seek(exactly: key(40)))
          #expect(try cursor.withCurrent { key, _ in number(key) } == 40)
          #expect(try !cursor.seek(exactly: key(45)))
          #expect(try !cursor.seek(to: key(51)))
        }
      }
      try environment.write { transaction throws in
        try transaction.withCursor(on: database) { cursor throws in
          #expect(try cursor.seek(exactly: key(30)))
          try cursor.deleteCurrent()
          #expect(try cursor.currentKey() == key(40))
        }
      }
      let remaining = try environment.read { transaction throws in
        try entries(transaction, in: database).map { $0.key }
      }
      #expect(remaining == [key(10), key(20), key(40), key(50)])
    }
  }

  @Test(
    "ranges iterate forwards and backwards exactly like a filtered sorted array", arguments: 0..<20)
  func rangesMatchModel(seed: UInt64) throws {
    try withTemporaryEnvironment { environment, _ throws in
      let database = try environment.openDatabase(named: "values", flags: .create)
      var generator = SeededGenerator(seed: seed)
      let stored = Set((0..<300).map { _ in UInt64.random(in: 0..<1000, using: &generator) })
      try environment.write { transaction throws in
        for number in stored {
          try transaction.put(value(number), forKey: key(number), in: database)
        }
      }
      let sorted = stored.sorted()
      for _ in 0..<40 {
        let a = UInt64.random(in: 0..<1100, using: &generator)
        let b = UInt64.random(in: 0..<1100, using: &generator)
        let (low, high) = (min(a, b), max(a, b))
        let cases: [(KeyRange, [UInt64])] = [
          (.all, sorted),
          (.from(key(low)), sorted.filter { $0 >= low }),
          (.from(key(low), to: key(high)), sorted.filter { $0 >= low && $0 < high }),
          (.from(key(low), through: key(high)), sorted.filter { $0 >= low && $0 <= high }),
        ]
        for (range, expected) in cases {
          for reverse in [false, true] {
            let read = try environment.read { transaction throws in
              try entries(transaction, in: database, range: range, reverse: reverse).map {
                entry throws in
                #expect(entry.value == entry.key.withUnsafeBytes { value(number($0)) })
                return entry.key.withUnsafeBytes { number($0) }
              }
            }
            #expect(
              read == (reverse ? expected.reversed() : expected),
              "range \(range) reverse \(reverse)")
          }
        }
      }
    }
  }

  @Test("a prefix range holds exactly the keys that begin with the prefix")
  func prefixRange() throws {
    try withTemporaryEnvironment { environment, _ throws in
      let database = try environment.openDatabase(named: "names", flags: .create)
      let names = ["a", "ab", "abc", "abd", "ab\u{FF}", "ac", "b", "\u{FF}\u{FF}", "\u{FF}\u{FF}x"]
      let keys = names.map { Array($0.unicodeScalars.map { UInt8($0.value) }) }
      try environment.write { transaction throws in
        for key in keys { try transaction.put([1], forKey: key, in: database) }
      }
      func stored(withPrefix prefix: [UInt8], reverse: Bool = false) throws -> [[UInt8]] {
        try environment.read { transaction throws in
          try entries(transaction, in: database, range: .prefix(prefix), reverse: reverse).map(
            \.key)
        }
      }
      let ab = keys.filter { $0.starts(with: [0x61, 0x62]) }
      #expect(try stored(withPrefix: [0x61, 0x62]) == ab)
      #expect(try stored(withPrefix: [0x61, 0x62], reverse: true) == ab.reversed())
      #expect(try stored(withPrefix: [0xFF, 0xFF]) == [[0xFF, 0xFF], [0xFF, 0xFF, 0x78]])
      #expect(try stored(withPrefix: [0x7A]).isEmpty)
    }
  }

  @Test("the throwing iterator stops at the range end and can be abandoned early")
  func throwingIterator() throws {
    try withTemporaryEnvironment { environment, _ throws in
      let database = try environment.openDatabase(named: "values", flags: .create)
      try environment.write { transaction throws in
        for number in 0..<100 as Range<UInt64> {
          try transaction.put(value(number), forKey: key(number), in: database, options: .append)
        }
      }
      let firstThree = try environment.read { transaction throws in
        try transaction.withEntries(in: database, range: .from(key(40))) { entries throws in
          var numbers: [UInt64] = []
          while numbers.count < 3, let next = try entries.next({ key, _ in number(key) }) {
            numbers.append(next)
          }
          return numbers
        }
      }
      #expect(firstThree == [40, 41, 42])
      let exhausted = try environment.read { transaction throws in
        try transaction.withEntries(in: database, range: .from(key(98))) { entries throws in
          [
            try entries.next { key, _ in number(key) }, try entries.next { key, _ in number(key) },
            try entries.next { key, _ in number(key) }, try entries.next { key, _ in number(key) },
          ]
        }
      }
      #expect(exhausted == [98, 99, nil, nil])
    }
  }

  @Test("duplicate-sorted databases keep several sorted values per key")
  func duplicateSort() throws {
    try withTemporaryEnvironment { environment, _ throws in
      let database = try environment.openDatabase(named: "index", flags: [.create, .duplicateSort])
      try environment.write { transaction throws in
        for number in [3, 1, 2] as [UInt64] {
          try transaction.put(key(number), forKey: Array("tag".utf8), in: database)
        }
        try transaction.put(key(9), forKey: Array("other".utf8), in: database)
      }
      let values = try environment.read { transaction throws in
        try entries(transaction, in: database, range: .prefix(Array("tag".utf8))).map(\.value)
      }
      #expect(values == [key(1), key(2), key(3)])
      try environment.write { transaction throws in
        #expect(try transaction.delete(key(2), forKey: Array("tag".utf8), in: database))
        #expect(try !transaction.delete(key(2), forKey: Array("tag".utf8), in: database))
      }
      #expect(try environment.read { try $0.count(in: database) } == 3)
    }
  }
}
