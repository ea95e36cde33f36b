"""The service's ``/docs`` page renders in a real browser, offline: Swagger UI reads the OpenAPI 3.1 schema
and lists the operations, instead of "Unable to render this definition".

Needs Chromium (Debian's ``chromium`` package, or ``DLTSCHED_CHROMIUM=/path/to/chrome``) and the
``playwright`` package; skipped cleanly without them. ``DLTSCHED_SCREENSHOTS=DIR`` keeps the screenshot there.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]


def _chromium() -> str | None:
    explicit = os.environ.get("DLTSCHED_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)


@pytest.fixture(scope="module")
def service_url() -> Iterator[str]:
    pytest.importorskip("fastapi")
    from dltsched.engine.app.service.server import ServiceConfig, make_server

    server = make_server(ServiceConfig(), "127.0.0.1", 0, log_level="warning")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the service did not start within 30 s"
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(timeout=15)
    sock.close()


def test_docs_page_lists_the_operations_in_a_headless_browser(service_url: str, tmp_path: Path) -> None:
    executable = _chromium()
    if executable is None:
        pytest.skip("no Chromium found (apt-get install chromium, or set DLTSCHED_CHROMIUM)")
    sync_api = pytest.importorskip("playwright.sync_api")
    requests: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.on("request", lambda r: requests.append(r.url))
            page.goto(f"{service_url}/docs", wait_until="networkidle")
            page.wait_for_selector(".opblock-summary-path", timeout=30_000)
            paths = page.locator(".opblock-summary-path").all_inner_texts()
            text = page.inner_text("body")
            version = page.evaluate("() => window.versions && window.versions.swaggerUI.version")
            shot = Path(os.environ.get("DLTSCHED_SCREENSHOTS") or tmp_path) / "docs-page.png"
            shot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert "Unable to render" not in text and "does not specify a valid version" not in text
    assert {p.replace("\u200b", "") for p in paths} >= {"/v1/schedule", "/v1/health", "/metrics"}
    assert int(str(version).split(".")[0]) >= 5, f"Swagger UI {version} cannot read OpenAPI 3.1"
    assert "3.1" in text  # the schema's OpenAPI version badge
    offline = [u for u in requests if not u.startswith(service_url)]
    assert not offline, f"the page loaded from outside the service: {offline[:3]}"
    assert shot.stat().st_size > 10_000
