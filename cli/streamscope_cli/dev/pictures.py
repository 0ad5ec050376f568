"""Pictures of the report's charts for the README: each chart panel's HTML section, shot in headless Chromium.

Run by hand after `streamscope demo` (needs Debian's chromium):
    python -m streamscope_cli.dev.pictures --storage chdb:///path --since 10m --out docs/pictures
    python -m streamscope_cli.dev.pictures --panel smoothing_trade --panel structured_output  # tables too
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from streamscope import env
from streamscope_cli.query import opened_store
from streamscope_dashboards.report import build_report, parse_duration
from streamscope_dashboards.report_html import render_html
from streamscope_ingest.blocks.stalls import StallRule

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def shoot(html: str, out: Path, chromium: str, width: int = 1100, height: int = 520) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        page = Path(scratch) / "page.html"
        page.write_text(html, encoding="utf-8")
        subprocess.run(
            [
                chromium,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={scratch}/profile",
                f"--window-size={width},{height}",
                f"--screenshot={out}",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--storage", default=env.default_storage_dsn())
    parser.add_argument("--since", default="10m")
    parser.add_argument("--out", type=Path, default=Path("docs/pictures"))
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--panel", action="append", default=[], help="shoot this panel (a table too); repeatable")
    args = parser.parse_args()
    end = datetime.now(UTC)
    with opened_store(args.storage, None) as run:
        report = build_report(run, end - parse_duration(args.since), end, StallRule.configured().threshold_us)
    args.out.mkdir(parents=True, exist_ok=True)
    for item in report.panels:
        wanted = item.panel.key in args.panel if args.panel else item.panel.kind != "table"
        if not wanted:
            continue
        html = render_html(replace(report, panels=[item]), headline=False)
        shoot(html, args.out / f"{item.panel.key}.png", args.chromium)
        print(args.out / f"{item.panel.key}.png")


if __name__ == "__main__":
    main()
