"""Save the README's screenshots as SVG, from real quadrant runs in a run store of their own (a temporary
directory: the user's run store is not touched).

    python scripts/screenshot.py [OUT.svg]              the Train view after a run on cpu-serial
                                                        (default: assets/screenshots/training.svg)
    python scripts/screenshot.py --ranks 2 OUT.svg      a run over 2 MPI ranks (needs the [mpi] extra)
    python scripts/screenshot.py --runs OUT.svg         the Runs view: a cpu-serial run and a cpu-parallel
                                                        one at a quarter of its learning rate, overlaid
"""
import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from textual.widgets import Input  # noqa: E402

from tui.app import LayerlabApp  # noqa: E402

SIZE = (140, 45)


async def _train(app, pilot, arch: str, ranks: int = 1) -> None:
    app.query_one("#settings-pane").set_arch(arch)
    if ranks > 1:
        app.query_one("#ranks", Input).value = str(ranks)
        await pilot.pause(0.2)
    n = len(app.runs)
    await pilot.press("s")
    deadline = time.monotonic() + 300
    while (app.handle is not None or len(app.runs) == n) and time.monotonic() < deadline:
        await pilot.pause(0.1)


async def main(out: Path, ranks: int, runs: bool) -> None:
    app = LayerlabApp("quadrant")
    async with app.run_test(size=SIZE) as pilot:
        await _train(app, pilot, "cpu-serial", ranks)
        if runs:
            lr = app.query_one("#lr", Input)
            lr.value = str(float(lr.value) / 4)  # a second run that learns slower: curves of its own
            await pilot.pause(0.2)
            await _train(app, pilot, "cpu-parallel")
            await pilot.press("4")
            app.query_one("#runs-table").move_cursor(row=0)
            await pilot.press("space", "down", "space")
        app.clear_notifications()
        await pilot.pause(0.6)  # the charts redraw a few times a second
        out.parent.mkdir(parents=True, exist_ok=True)
        app.save_screenshot(str(out))
        print(f"saved {out}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?", default="assets/screenshots/training.svg")
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--runs", action="store_true", help="the Runs view with two runs overlaid")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="layerlab-screenshot-") as home:
        os.environ["LAYERLAB_HOME"] = home
        asyncio.run(main(Path(a.out).resolve(), a.ranks, a.runs))
