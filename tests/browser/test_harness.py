"""The harness end to end: chromium loads a page served on loopback, with its stylesheet,
fills and submits its form, reads the next page and keeps a screenshot of it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import pytest
from selenium.webdriver.common.by import By

from .conftest import phone, wait_for_text

FORM = b"""<!doctype html>
<html><head><title>form</title><link rel="stylesheet" href="style.css"></head>
<body><form method="post" action="submit">
<input name="name" id="name"><button id="send" type="submit">Send</button>
</form></body></html>"""
STYLE = b"body { font-family: sans-serif; background: #eef; }"


class Page(BaseHTTPRequestHandler):
    """The form, its stylesheet and the page the form posts to; every request is logged."""

    seen: list[tuple[str, str, str]]  # (method, path, Host header), set per server

    def log_message(self, format, *args) -> None:
        pass

    def reply(self, body: bytes, content_type: str = "text/html", status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.seen.append(("GET", self.path, self.headers.get("Host", "")))
        if self.path == "/":
            self.reply(FORM)
        elif self.path == "/style.css":
            self.reply(STYLE, "text/css")
        else:
            self.reply(b"not found", "text/plain", 404)

    def do_POST(self) -> None:
        self.seen.append(("POST", self.path, self.headers.get("Host", "")))
        form = parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
        name = form["name"][0].replace("&", "&amp;").replace("<", "&lt;")
        self.reply(f'<!doctype html><p id="greeting">Hello, {name}</p>'.encode())


@pytest.fixture
def site() -> Iterator[tuple[str, list[tuple[str, str, str]]]]:
    """The pages on a free loopback port: (base URL, the requests it saw)."""
    seen: list[tuple[str, str, str]] = []
    handler = type("Handler", (Page,), {"seen": seen})
    with ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/", seen
        finally:
            server.shutdown()
            thread.join()


def test_form_round_trip(browser, screenshot_dir, site):
    url, seen = site
    browser.get(url)
    browser.find_element(By.ID, "name").send_keys("Ada <Lovelace>")
    browser.find_element(By.ID, "send").click()
    assert wait_for_text(browser, "#greeting", "Hello, Ada <Lovelace>")
    with phone(browser):
        assert browser.execute_script("return window.innerWidth") == 390
        shot = screenshot_dir / "form-round-trip.png"
        assert browser.save_screenshot(str(shot))
    assert browser.get_window_size()["width"] == 1280
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 100
    host = url.removeprefix("http://").rstrip("/")
    assert {h for _, _, h in seen} == {host}, seen
    assert ("GET", "/style.css", host) in seen
    assert ("POST", "/submit", host) in seen
