"""Save the README's screenshot: the training view after a real quadrant run on cpu-serial, as SVG.

    python scripts/screenshot.py [OUT.svg]     (default: assets/screenshots/training.svg)
"""
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tui.app import LayerlabApp  # noqa: E402


async def main(out: Path) -> None:
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(110, 34)) as pilot:
        app.query_one("#settings-pane").set_arch("cpu-serial")
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
    asyncio.run(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("assets/screenshots/training.svg")))
