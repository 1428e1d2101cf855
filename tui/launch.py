"""The ``layerlab`` command: the app with no arguments (or ``tui [CONFIG]``), the headless CLI otherwise.

The engine's CLI (nncore.cli) never imports the app; this launcher sits on the app's side of the boundary.
"""
from __future__ import annotations

import sys

from nncore import cli
from nncore.errors import LayerlabError

DEFAULT_CONFIG = "quadrant"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] != "tui":
        return cli.main(argv)
    args = argv[1:]
    if len(args) > 1 or (args and args[0].startswith("-")):
        print("usage: layerlab [tui [CONFIG]] | layerlab {train,archs,bench,sweep,lockstep} ...", file=sys.stderr)
        return cli.EXIT_CONFIG
    config = args[0] if args else DEFAULT_CONFIG
    from nncore.config import load_config

    try:
        load_config(config)  # a bad path or file: one line and exit 2, before the screen is taken over
    except LayerlabError as exc:
        print(f"layerlab: error: {exc}", file=sys.stderr)
        return exc.exit_code
    from tui.app import run_app

    return run_app(config)


if __name__ == "__main__":
    sys.exit(main())
