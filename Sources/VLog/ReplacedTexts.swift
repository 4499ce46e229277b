/// The texts a text change replaced (``Change/textSet(_:text:replacing:)``), by the stamps of
/// the changes that set them: a collection that holds one stamp — what almost every change
/// names — without allocating, so that reading a log of edits costs no more than before.
///
/// Write it as an array literal (`[shown]`, or `[]` for a note that had no text), or make it
/// from any sequence of stamps.
public struct ReplacedTexts: RandomAccessCollection, Hashable, Sendable, ExpressibleByArrayLiteral {
  /// The first stamp, then the others: `rest` is empty unless there are two or more.
  private var head: Stamp?
  private var rest: [Stamp] = []

  /// None: what the first text of a note replaces.
  public init() {}

  /// One stamp, without allocating.
  public init(_ stamp: Stamp) { head = stamp }

  /// Adds a stamp at the end.
  public mutating func append(_ stamp: Stamp) {
    if head == nil { head = stamp } else { rest.append(stamp) }
  }

  /// The stamps, in order.
  public init(_ stamps: some Sequence<Stamp>) {
    for stamp in stamps {
      if head == nil { head = stamp } else { rest.append(stamp) }
    }
  }

  /// The stamps of the literal, in order.
  public init(arrayLiteral stamps: Stamp...) {
    self.init(stamps)
  }

  /// The position of the first stamp: 0.
  public var startIndex: Int { 0 }
  /// The number of stamps.
  public var endIndex: Int { head == nil ? 0 : 1 + rest.count }

  /// The stamp at `position`.
  public subscript(position: Int) -> Stamp {
    if position == 0, let head { return head }
    return rest[position - 1]
  }
}

extension ReplacedTexts {
  /// Whether a text change made at `stamp` replaces a text it names, `named`: only an older one
  /// (a stamp never replaces one that follows it). Rule 4 for texts, for the store's merge
  /// (``TextVersions``) and the log's (``LogBatch``) alike; the text replaced is replaced at
  /// `stamp`'s time. A predicate, not a sequence: a store's merge and replay ask it of every
  /// text change, where a sequence of the replaced texts cost an allocation per change.
  package static func replaces(_ stamp: Stamp, _ named: Stamp) -> Bool { named < stamp }
}
