"""The ``layerlab`` command's entry point: light to import, so that a Ctrl-C while the engine and the app are
still being imported ends as one line and exit 130, as it does once a command runs, not as a traceback."""
from __future__ import annotations

import sys

EXIT_INTERRUPTED = 130


def main() -> int:
    try:
        from tui.launch import main as launch

        return launch()
    except KeyboardInterrupt:  # (a command's own Ctrl-C is handled inside it; this is the time before and after)
        print("layerlab: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
