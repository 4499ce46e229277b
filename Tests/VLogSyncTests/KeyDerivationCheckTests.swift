import Foundation
import Testing
import VLogSync
import VLogWire

/// What a device takes from a server as the way to stretch a password
/// (`KeyDerivation.checked(own:encrypted:pinned:seenVersion:allowingVersionOne:)`): a pure rule, tested
/// here by every case it refuses and the ones it takes.
@Suite("The key derivations a device takes from a server")
struct KeyDerivationCheckTests {
  static let own = KeyDerivationCost.standard
  static let salt = [UInt8](repeating: 3, count: 16)

  static func derivation(
    version: Int = 2, logRounds: Int = 18, blockSize: Int = 8, parallelism: Int = 1,
    salt: [UInt8] = salt
  ) -> KeyDerivation {
    KeyDerivation(
      version: version, logRounds: logRounds, blockSize: blockSize, parallelism: parallelism,
      salt: version == 1 ? [] : salt)
  }

  static func takes(
    _ derivation: KeyDerivation, encrypted: Bool = true, pinned: KeyDerivation? = nil,
    seenVersion: Int? = nil, allowingVersionOne: Bool = false
  ) -> Bool {
    (try? derivation.checked(
      own: own, encrypted: encrypted, pinned: pinned, seenVersion: seenVersion,
      allowingVersionOne: allowingVersionOne))
      != nil
  }

  @Test("The device's own cost, and up to four times its memory and work, are taken")
  func withinBounds() {
    #expect(Self.takes(Self.derivation()))
    #expect(Self.takes(Self.derivation(logRounds: 20)))
    #expect(Self.takes(Self.derivation(parallelism: 4)))
    #expect(Self.takes(Self.derivation(logRounds: 19, parallelism: 2)))
  }

  @Test(
    "Less memory is refused even at the same N × r × p, and more than four times the memory or the work, or p over 4",
    arguments: [
      (17, 8, 2, "half the memory, the same work"),
      (14, 8, 16, "a sixteenth of the memory, the same work"),
      (18, 4, 2, "r halved, p doubled"),
      (17, 8, 1, "half of both"),
      (20, 8, 2, "8 times the work"),
      (18, 8, 8, "p = 8"),
    ])
  func outsideBounds(logRounds: Int, blockSize: Int, parallelism: Int, what: String) {
    #expect(
      !Self.takes(
        Self.derivation(logRounds: logRounds, blockSize: blockSize, parallelism: parallelism)),
      "\(what)")
  }

  @Test(
    "Version 1 only when the user migrates; version 3 only for a clear account, at half the device's cost at least"
  )
  func versions() {
    let one = Self.derivation(version: 1)
    #expect(!Self.takes(one))
    #expect(!Self.takes(one, encrypted: false))
    #expect(Self.takes(one, allowingVersionOne: true))
    let three = Self.derivation(version: 3, logRounds: 17)
    #expect(!Self.takes(three))
    #expect(Self.takes(three, encrypted: false))
    #expect(!Self.takes(Self.derivation(version: 3, logRounds: 16), encrypted: false))
  }

  @Test(
    "Once a device signed in, the same salt and version at no less memory or work; only a move to version 2 takes a new salt"
  )
  func pinned() {
    let pin = Self.derivation(logRounds: 19)
    #expect(Self.takes(pin, pinned: pin))
    #expect(Self.takes(Self.derivation(logRounds: 20), pinned: pin))
    #expect(!Self.takes(Self.derivation(), pinned: pin), "lower than the pin")
    #expect(
      !Self.takes(Self.derivation(logRounds: 19, salt: [9] + Self.salt.dropFirst()), pinned: pin))
    #expect(!Self.takes(Self.derivation(version: 3, logRounds: 19), encrypted: false, pinned: pin))
    #expect(!Self.takes(Self.derivation(version: 1), pinned: pin, allowingVersionOne: true))
    // A clear account whose server hash was reproduced moves to version 2 at a password
    // change on another device: a new salt.
    let legacy = Self.derivation(version: 3, logRounds: 17)
    #expect(
      Self.takes(
        Self.derivation(salt: [UInt8](repeating: 5, count: 16)), encrypted: false, pinned: legacy))
  }

  @Test(
    "A pin of version 3 or 1 takes its own salt at no less cost, or a move to version 2; a device that saw version 2 takes no other"
  )
  func otherPins() {
    let legacy = Self.derivation(version: 3, logRounds: 17)
    #expect(Self.takes(legacy, encrypted: false, pinned: legacy))
    let otherSalt = Self.derivation(
      version: 3, logRounds: 17, salt: [UInt8](repeating: 9, count: 16))
    #expect(!Self.takes(otherSalt, encrypted: false, pinned: legacy))
    #expect(
      !Self.takes(Self.derivation(version: 3, logRounds: 16), encrypted: false, pinned: legacy))
    let one = Self.derivation(version: 1)
    #expect(Self.takes(one, pinned: one, allowingVersionOne: true))
    #expect(Self.takes(Self.derivation(), pinned: one))
    #expect(!Self.takes(one, seenVersion: 2, allowingVersionOne: true))
    #expect(!Self.takes(legacy, encrypted: false, seenVersion: 2))
    #expect(Self.takes(Self.derivation(), seenVersion: 2))
  }

  @Test("A new password keeps the account's salt, at the device's cost where that is more")
  func newPassword() {
    let current = Self.derivation(logRounds: 17)
    let kept = KeyDerivation.forNewPassword(
      current: current, cost: Self.own, random: { [UInt8](repeating: 1, count: $0) })
    #expect(kept.salt == current.salt && kept.logRounds == 18)
    let higher = Self.derivation(logRounds: 20)
    #expect(
      KeyDerivation.forNewPassword(current: higher, cost: Self.own, random: { _ in [] })
        == higher)
    let fresh = KeyDerivation.forNewPassword(
      current: Self.derivation(version: 3), cost: Self.own,
      random: { [UInt8](repeating: 1, count: $0) })
    #expect(fresh.version == 2 && fresh.saltBytes == [UInt8](repeating: 1, count: 16))
  }
}
