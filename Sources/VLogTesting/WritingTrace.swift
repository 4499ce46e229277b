/// A writer's long document, keystroke by keystroke, and the saves a notes app makes of it: the
/// workload the long-notes figures are measured with.
///
/// It has the statistics of a real editing trace (a 105 KB paper written with 259,778
/// single-character insertions and deletions over months): keystrokes come in bursts of about
/// 19, five a second, at the cursor or, now and then, somewhere else in the text; about one
/// keystroke in three deletes; bursts are apart by a few seconds, and one in seventeen by
/// minutes to days. An app saves when typing pauses (``AutosavePolicy``); with the policies
/// named here a document of that size takes about 13,400 saves (2 s pause, 30 s of typing) or
/// about 860 (60 s, 10 minutes).
public struct WritingTrace: Sequence, Sendable {
  /// When an app saves: after a pause of typing this long, and at least this often while
  /// typing goes on.
  public struct AutosavePolicy: Sendable, Hashable {
    /// The pause after which the app saves, in milliseconds.
    public var pause: Int64
    /// The longest typing goes on unsaved, in milliseconds.
    public var typing: Int64

    /// A save after 2 s of pause, and every 30 s of typing.
    public static let eager = AutosavePolicy(pause: 2_000, typing: 30_000)
    /// A save after 60 s of pause, and every 10 minutes of typing.
    public static let lazy = AutosavePolicy(pause: 60_000, typing: 600_000)

    /// A policy.
    public init(pause: Int64, typing: Int64) {
      self.pause = pause
      self.typing = typing
    }
  }

  /// One save: when (milliseconds from the first keystroke) and the whole text.
  public struct Save: Sendable, Hashable {
    /// Milliseconds from the first keystroke.
    public var time: Int64
    /// The text saved, in UTF-8.
    public var text: [UInt8]
  }

  /// The keystrokes the document takes.
  public let keystrokes: Int
  /// When the app saves.
  public let policy: AutosavePolicy
  /// The seed of the trace.
  public let seed: UInt64

  /// The trace of `keystrokes` keystrokes (259,778: the paper's), saved by `policy`.
  public init(keystrokes: Int = 259_778, policy: AutosavePolicy, seed: UInt64 = 62) {
    self.keystrokes = keystrokes
    self.policy = policy
    self.seed = seed
  }

  /// The saves, in order; the last is the finished document.
  public func makeIterator() -> Iterator {
    Iterator(trace: self)
  }

  /// The saves of a trace, made as they are asked for.
  public struct Iterator: IteratorProtocol {
    private let trace: WritingTrace
    private var generator: SeededGenerator
    /// The text before the cursor, and the text after it, reversed: a keystroke at the cursor
    /// costs the same whatever the text's length.
    private var before: [UInt8] = []
    private var after: [UInt8] = []
    private var typed = 0
    private var time: Int64 = 0
    private var lastSave: Int64 = 0
    private static let words = Array(
      "the of a text note proof lemma we show that for every set and its bound is ".utf8)

    init(trace: WritingTrace) {
      self.trace = trace
      generator = SeededGenerator(seed: trace.seed)
    }

    /// The next save: after the burst of keystrokes that a pause the policy saves at ends.
    public mutating func next() -> Save? {
      while typed < trace.keystrokes {
        burst()
        let pause = self.pause()
        let saved = pause >= trace.policy.pause || time - lastSave >= trace.policy.typing
        time += pause
        if saved || typed >= trace.keystrokes {
          lastSave = time
          return Save(time: time, text: before + after.reversed())
        }
      }
      return nil
    }

    /// About 19 keystrokes, a fifth of a second apart, at the cursor or somewhere else.
    private mutating func burst() {
      if Int.random(in: 0..<10, using: &generator) >= 7 {
        let cursor = Int.random(in: 0...(before.count + after.count), using: &generator)
        while before.count > cursor, let byte = before.popLast() { after.append(byte) }
        while before.count < cursor, let byte = after.popLast() { before.append(byte) }
      }
      let length = 1 + Int.random(in: 0..<37, using: &generator)
      for _ in 0..<Swift.min(length, trace.keystrokes - typed) {
        if !before.isEmpty, Int.random(in: 0..<100, using: &generator) < 30 {
          before.removeLast()
        } else {
          before.append(Self.words[Int.random(in: 0..<Self.words.count, using: &generator)])
        }
        typed += 1
        time += 200
      }
    }

    /// The pause after a burst: seconds, or one time in seventeen minutes to days.
    private mutating func pause() -> Int64 {
      if Int.random(in: 0..<17, using: &generator) == 0 {
        return Int64.random(in: 60_000...86_400_000, using: &generator)
      }
      return Int64.random(in: 2_000...20_000, using: &generator)
    }
  }
}
