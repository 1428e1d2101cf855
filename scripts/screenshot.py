"""Save the README's screenshots: the training view after a real quadrant run on cpu-serial, as SVG.

    python scripts/screenshot.py [OUT.svg]              (default: assets/screenshots/training.svg)
    python scripts/screenshot.py --ranks 2 OUT.svg      a run over 2 MPI ranks (needs the [mpi] extra)
"""
import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from textual.widgets import Input  # noqa: E402

from tui.app import LayerlabApp  # noqa: E402


async def main(out: Path, ranks: int) -> None:
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(110, 34 if ranks == 1 else 40)) as pilot:
        app.query_one("#settings-pane").set_arch("cpu-serial")
        if ranks > 1:
            app.query_one("#ranks", Input).value = str(ranks)
            await pilot.pause(0.2)
        await pilot.press("s")
        deadline = time.monotonic() + 300
        while (app.handle is not None or not app.runs) and time.monotonic() < deadline:
            await pilot.pause(0.1)
        app.clear_notifications()
        await pilot.pause(0.3)
        out.parent.mkdir(parents=True, exist_ok=True)
        app.save_screenshot(str(out))
        print(f"saved {out}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?", default="assets/screenshots/training.svg")
    p.add_argument("--ranks", type=int, default=1)
    a = p.parse_args()
    asyncio.run(main(Path(a.out), a.ranks))
