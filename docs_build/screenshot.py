"""PNG screenshots of a built site, to look at it: the front page and a method page.

    .venv/bin/mkdocs build --strict -d /tmp/site
    .venv/bin/python -m docs_build.screenshot /tmp/site /tmp/site-shots

Serves the built folder on a free localhost port (http.server in a thread) and loads
each page in headless Chromium through selenium (the dev extra), 1280 x 900, with a
fresh profile. Builds nothing itself; not a test.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
DRIVER = "/usr/bin/chromedriver"
PAGES = {"front": "", "method-tosca": "methods/tosca/"}
OPTIONS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,900",
)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def served(folder: Path) -> Iterator[str]:
    """The folder at ``http://127.0.0.1:PORT/`` while the block runs."""
    handler = functools.partial(_Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def screenshots(site: Path, out: Path, pages: dict[str, str] = PAGES) -> list[Path]:
    """One PNG per page (``name -> path under the site``) written to ``out``."""
    from selenium import webdriver

    if not (site / "index.html").is_file():
        raise SystemExit(f"{site} holds no built site (no index.html): run mkdocs build first")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile, served(site) as url:
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for option in (*OPTIONS, f"--user-data-dir={profile}"):
            options.add_argument(option)
        driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(DRIVER))
        try:
            driver.set_page_load_timeout(60)
            for name, path in pages.items():
                driver.get(url + path)
                target = out / f"{name}.png"
                if not driver.save_screenshot(str(target)):
                    raise SystemExit(f"chromium wrote no screenshot of {url + path}")
                written.append(target)
        finally:
            driver.quit()
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", type=Path, help="the built site (mkdocs build -d DIR)")
    parser.add_argument("out", type=Path, help="folder for the PNG files")
    args = parser.parse_args(argv)
    for path in screenshots(args.site, args.out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
