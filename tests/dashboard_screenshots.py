"""The screenshots of docs/dashboard.md: every page of the demo's dashboard in a real headless Chromium, 1280 px
wide (a laptop with the sidebar open), as finance and as one tenant. `make screenshots` runs it after
`make demo`; the images go to docs/img/."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from PIL import Image, ImageChops

from tests.test_dashboard_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    FINANCE,
    PAGE_DRAWN,
    TENANT,
    playwright,
    serve,
)

WIDTH = 1280
TALLEST = 4000  # a page is drawn in a window this tall, then cut to what it shows
SIDEBAR = 300  # px: the page's own content starts right of it


def trimmed(path: Path) -> None:
    """Cut the empty space under a page and keep 256 colours (a tenth of the size, the text as sharp)."""
    image = Image.open(path).convert("RGB")
    content = image.crop((SIDEBAR + 10, 0, image.width, image.height))
    blank = Image.new("RGB", content.size, (255, 255, 255))
    box = ImageChops.difference(content, blank).getbbox()
    bottom = min(image.height, (box[3] if box else image.height) + 24)
    image.crop((0, 0, image.width, bottom)).quantize(256).save(path, optimize=True)


def shoot(config: Path, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    taken = []
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": WIDTH, "height": TALLEST})
        for viewer, pages in (("finance", FINANCE), ("tenant:serving", TENANT)):
            prefix = viewer.split(":")[0]
            for url in serve(config, viewer, out / f".streamlit-{prefix}.log"):
                for name, title in pages.items():
                    page.goto(f"{url}/{name}")
                    page.locator("h1").filter(has_text=title).first.wait_for(timeout=120_000)
                    page.wait_for_load_state("networkidle")
                    page.wait_for_function(PAGE_DRAWN, timeout=120_000)
                    page.wait_for_timeout(1500)  # plotly's transitions
                    path = out / f"{prefix}-{name or 'home'}.png"
                    page.screenshot(path=str(path))
                    trimmed(path)
                    taken.append(path)
                    print(f"{path}", flush=True)
            (out / f".streamlit-{prefix}.log").unlink(missing_ok=True)
        browser.close()
    return taken


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", type=Path, default=Path(".gpumeter/demo/config.yaml"))
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    args = parser.parse_args(argv)
    if not args.config.exists():
        print(f"{args.config} does not exist: run `make demo` first", file=sys.stderr)
        return 2
    shoot(args.config, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
