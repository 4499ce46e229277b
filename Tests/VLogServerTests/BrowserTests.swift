import Foundation
import Hummingbird
import HummingbirdTesting
import Testing
import VLogServer
import VLogSync
import VLogTesting

@testable import VLog

/// Chromium is missing: `tools/setup` installs it.
struct NoBrowser: Error, CustomStringConvertible {
  var description: String { "no /usr/bin/chromium: run tools/setup, which installs it" }
}

/// What the test page reported, in order.
actor PageReports {
  private(set) var lines: [String] = []
  func add(_ line: String) { lines.append(line) }

  /// Waits up to `seconds` for a report that contains `text`; whether one came.
  func wait(for text: String, seconds: Double = 30) async -> Bool {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while ContinuousClock.now < deadline {
      if lines.contains(where: { $0.contains(text) }) { return true }
      try? await Task.sleep(for: .milliseconds(20))
    }
    return false
  }
}

@Suite("A web app in a real browser")
struct BrowserTests {
  /// The web app: signs in to the server named in its URL, opens the live channel with `fetch`
  /// (the token in `Authorization`, never in the URL), and reports each step, and each head
  /// that arrives, to the page's own server.
  static let page = """
    <!doctype html>
    <html><body><pre id="log"></pre><script>
    const server = new URL(location.href).searchParams.get("server");
    async function report(line) {
      document.getElementById("log").textContent += line + "\\n";
      await fetch("/report", { method: "POST", body: line });
    }
    (async () => {
      try {
        const session = await fetch(server + "/v1/sessions", {
          method: "POST", headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ username: "ann", password: "correct horse battery" }) });
        const { token } = await session.json();
        await report("signed in");
        const live = await fetch(server + "/v1/live", {
          headers: { "Authorization": "Bearer " + token, "Accept": "text/event-stream" } });
        await report("live " + live.status);
        const reader = live.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) { await report("ended"); return; }
          buffer += decoder.decode(value, { stream: true });
          let end;
          while ((end = buffer.indexOf("\\n\\n")) >= 0) {
            const event = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const data = event.split("\\n").find((line) => line.startsWith("data:"));
            if (event.startsWith("event: head") && data) {
              await report("head " + JSON.parse(data.slice(5)).head);
            }
          }
        }
      } catch (error) {
        await report("refused: " + error);
      }
    })();
    </script></body></html>
    """

  /// Serves the page and takes its reports on a loopback port of its own: another origin than
  /// the sync server's.
  static func withPageServer<R: Sendable>(
    _ reports: PageReports, _ body: @escaping @Sendable (Int) async throws -> R
  ) async throws -> R {
    let router = Router()
    router.get("page.html") { _, _ in
      Response(
        status: .ok, headers: [.contentType: "text/html; charset=utf-8"],
        body: .init(byteBuffer: ByteBuffer(string: page)))
    }
    router.post("report") { request, _ -> HTTPResponse.Status in
      let body = try await request.body.collect(upTo: 4096)
      await reports.add(String(buffer: body))
      return .noContent
    }
    return try await Application(router: router).test(.live) { client in
      try await body(client.port!)
    }
  }

  /// Runs headless Chromium on `url` until `body` returns, then kills it.
  static func withBrowser<R: Sendable>(
    _ url: String, _ body: @escaping @Sendable () async throws -> R
  ) async throws -> R {
    let chromium = "/usr/bin/chromium"
    guard FileManager.default.isExecutableFile(atPath: chromium) else { throw NoBrowser() }
    return try await withTemporaryDirectory { profile in
      let browser = try ChildProcess(
        chromium,
        [
          "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
          "--no-first-run", "--user-data-dir=\(profile)", url,
        ])
      defer {
        browser.send(SIGKILL)
        browser.wait()
      }
      return try await body()
    }
  }

  @Test(
    "A page from an allowed origin signs in, opens the live channel and shows another device's push arriving; from another origin it is refused"
  )
  func liveInBrowser() async throws {
    let allowedReports = PageReports()
    let otherReports = PageReports()
    try await Self.withPageServer(allowedReports) { allowedPort in
      try await Self.withPageServer(otherReports) { otherPort in
        var configuration = SyncServer.Configuration.testing
        configuration.allowedOrigins = ["http://127.0.0.1:\(allowedPort)"]
        try await withServer(configuration: configuration) { server in
          try await withLiveServer(server) { baseURL in
            let caller = APICaller(transport: HTTPTransport(baseURL: baseURL))
            let token = try await signUp(caller, "ann")
            let page = "http://127.0.0.1:\(allowedPort)/page.html?server=\(baseURL)"
            try await Self.withBrowser(page) {
              let opened = await allowedReports.wait(for: "head 0")
              let openedLines = await allowedReports.lines
              #expect(opened, "\(openedLines)")
              // Another device pushes: the page hears of it.
              _ = try await caller.sync(SyncPush(cursor: 0, events: [liveEvent(1)]), token: token)
                .get()
              let heard = await allowedReports.wait(for: "head 1")
              let heardLines = await allowedReports.lines
              #expect(heard, "\(heardLines)")
            }
            #expect(await allowedReports.lines.prefix(3) == ["signed in", "live 200", "head 0"])
            let other = "http://127.0.0.1:\(otherPort)/page.html?server=\(baseURL)"
            try await Self.withBrowser(other) {
              let refused = await otherReports.wait(for: "refused")
              let refusedLines = await otherReports.lines
              #expect(refused, "\(refusedLines)")
            }
            #expect(await !otherReports.lines.contains("signed in"))
          }
        }
      }
    }
  }
}
