"""Load a page in headless Chromium and report its console errors, optionally with a full-page screenshot.

The viewer's HTML is checked in a real browser (tests/pettingllms/test_viewer_browser.py) and the docs'
screenshot is made the same way (``python -m pettingllms.viewer.browser PAGE --screenshot PNG``). Chromium
is driven through the DevTools protocol over a pipe (``--remote-debugging-pipe``: commands on the
browser's fd 3, replies and events on fd 4, each a JSON message ending in a NUL byte), so no port is
opened and nothing but the page's own file is read. Collected as errors: ``console.error`` / ``assert``
calls, uncaught exceptions, and the browser's error log entries (a blocked or missing resource, a
Content-Security-Policy violation).

Chromium is Debian's ``chromium`` package (``apt-get install -y chromium``); :func:`find_chromium` looks
for it and :data:`INSTALL_COMMAND` is what to run when it is missing.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CHROMIUM_FLAGS", "INSTALL_COMMAND", "SHARED_FILE_MODE", "ChromiumError", "PageReport", "find_chromium", "load_page"]

#: The mode of a written page or screenshot: the atomic write's temporary file is private (0600).
SHARED_FILE_MODE = 0o644

INSTALL_COMMAND = "apt-get install -y chromium"
#: Headless, no sandbox (containers run as root), nothing that reaches the network on its own.
CHROMIUM_FLAGS: tuple[str, ...] = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--mute-audio",
)
# Takes the pipe ends as $0 / $1 and hands them to Chromium as fds 3 and 4.
_TRAMPOLINE = 'r=$0; w=$1; shift; exec 3<&"$r" 4>&"$w"; exec "$@"'


class ChromiumError(RuntimeError):
    """Chromium could not be started, or did not answer in time."""


@dataclass
class PageReport:
    """What loading a page gave: its console / log errors, every console message, the page height."""

    url: str
    errors: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    height: int = 0
    screenshot: Path | None = None


def find_chromium() -> str | None:
    """The Chromium executable (``/usr/bin/chromium`` or one on ``PATH``), or None."""
    for name in ("/usr/bin/chromium", "chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


class _Pipe:
    """The DevTools protocol over the browser's pipe: numbered commands, events kept in order."""

    def __init__(self, to_browser: int, from_browser: int, deadline: float) -> None:
        self.to_browser, self.from_browser, self.deadline = to_browser, from_browser, deadline
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def _read_message(self) -> dict[str, Any]:
        while b"\0" not in self.buffer:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise ChromiumError("Chromium did not answer in time")
            ready, _, _ = select.select([self.from_browser], [], [], left)
            if ready:
                chunk = os.read(self.from_browser, 1 << 20)
                if not chunk:
                    raise ChromiumError("Chromium closed its DevTools pipe")
                self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read_message()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise ChromiumError(f"{method}: {reply['error'].get('message', reply['error'])}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_for(self, method: str, session: str) -> None:
        if any(e["method"] == method and e.get("sessionId") == session for e in self.events):
            return
        while True:
            event = self._read_message()
            if "method" in event:
                self.events.append(event)
                if event["method"] == method and event.get("sessionId") == session:
                    return


def _errors(events: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    errors, messages = [], []
    for event in events:
        method, params = event["method"], event.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            messages.append(f"console.{params.get('type')}: {text}")
            if params.get("type") in ("error", "assert"):
                errors.append(f"console.{params.get('type')}: {text}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            errors.append(f"uncaught exception: {details.get('exception', {}).get('description') or details.get('text')}")
        elif method == "Log.entryAdded":
            entry = params.get("entry", {})
            messages.append(f"log.{entry.get('level')}: {entry.get('text')}")
            if entry.get("level") == "error":
                errors.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}".rstrip())
    return errors, messages


def load_page(
    page: str | os.PathLike,
    *,
    screenshot: str | os.PathLike | None = None,
    width: int = 1200,
    max_height: int | None = None,
    timeout: float = 60.0,
    chromium: str | None = None,
) -> PageReport:
    """Load the HTML file ``page`` in headless Chromium; its errors and messages (:class:`PageReport`), and
    with ``screenshot`` a PNG of the whole page at ``width`` CSS pixels (its top ``max_height`` pixels
    when given) written there (atomically)."""
    from comlrl.atomic_io import atomic_write_bytes

    executable = chromium or find_chromium()
    if executable is None:
        raise ChromiumError(f"Chromium is not installed: {INSTALL_COMMAND}")
    url = Path(page).resolve().as_uri()
    deadline = time.monotonic() + timeout
    to_read, to_browser = os.pipe()  # the browser reads commands from fd 3
    from_browser, to_write = os.pipe()  # and writes replies and events to fd 4
    with tempfile.TemporaryDirectory(prefix="pettingllms-chromium-") as profile:
        command = ["bash", "-c", _TRAMPOLINE, str(to_read), str(to_write), executable, *CHROMIUM_FLAGS,
                   f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"]
        try:
            process = subprocess.Popen(
                command, pass_fds=(to_read, to_write), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        finally:
            os.close(to_read)
            os.close(to_write)
        try:
            pipe = _Pipe(to_browser, from_browser, deadline)
            target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for method in ("Runtime.enable", "Log.enable", "Page.enable"):
                pipe.send(method, session=session)
            pipe.send("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": 800, "deviceScaleFactor": 1, "mobile": False}, session)
            navigation = pipe.send("Page.navigate", {"url": url}, session)
            if navigation.get("errorText"):
                raise ChromiumError(f"{url}: {navigation['errorText']}")
            pipe.wait_for("Page.loadEventFired", session)
            metrics = pipe.send("Page.getLayoutMetrics", session=session)
            height = int(metrics.get("cssContentSize", metrics.get("contentSize", {})).get("height", 800))
            report = PageReport(url=url, height=height)
            if screenshot is not None:
                shot = pipe.send("Page.captureScreenshot", {
                    "format": "png", "captureBeyondViewport": True,
                    "clip": {"x": 0, "y": 0, "width": width, "height": min(height, max_height or height), "scale": 1},
                }, session)
                report.screenshot = Path(screenshot)
                report.screenshot.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_bytes(report.screenshot, base64.b64decode(shot["data"]))
                report.screenshot.chmod(SHARED_FILE_MODE)  # an image to share: readable by others, as `cp` makes it
            pipe.send("Runtime.evaluate", {"expression": "0"}, session)  # flush events queued before it
            report.errors, report.messages = _errors(pipe.events)
            try:
                pipe.send("Browser.close")
            except ChromiumError:
                pass  # the browser may close the pipe before it answers
            return report
        finally:
            os.close(to_browser)
            os.close(from_browser)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pettingllms.viewer.browser",
        description="Load an HTML page in headless Chromium: print its console errors (exit 1 when there are "
        "any) and optionally save a full-page screenshot.",
    )
    parser.add_argument("page", type=Path, help="the HTML file")
    parser.add_argument("--screenshot", type=Path, default=None, metavar="PNG", help="write a PNG of the whole page")
    parser.add_argument("--width", type=int, default=1200, help="viewport width in CSS pixels (default 1200)")
    parser.add_argument("--max-height", type=int, default=None, help="screenshot only the page's top this many pixels")
    args = parser.parse_args(argv)
    report = load_page(args.page, screenshot=args.screenshot, width=args.width, max_height=args.max_height)
    for error in report.errors:
        print(f"error: {error}", file=sys.stderr)
    where = f", screenshot {report.screenshot}" if report.screenshot else ""
    print(f"{report.url}: {len(report.errors)} console error(s), page height {report.height}px{where}")
    return 1 if report.errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
