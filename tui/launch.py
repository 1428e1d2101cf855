"""The ``layerlab`` command: the app with no arguments (or ``tui [CONFIG]``), the headless CLI otherwise.

The engine's CLI (nncore.cli) never imports the app; this launcher sits on the app's side of the boundary.
"""
from __future__ import annotations

import sys

from nncore import cli

USAGE = """usage: layerlab [tui [CONFIG] [--store PATH | --no-store]]
       layerlab {train,runs,archs,bench,sweep,lockstep} ... (layerlab --help)

Open the terminal app on CONFIG: a config file, or the name of one in
assets/configs (quadrant, cnn, net-1h, ...); the default is quadrant. A config
the app cannot open is refused there with the reason, and the app opens on the
default. Inside the app, F12 or ? shows every key.

Runs are recorded in the run store (runs.sqlite in LAYERLAB_HOME or the user
data directory), which the Runs view reads; --store PATH uses another,
--no-store none (the session's runs are kept until you quit).
"""


def _not_a_terminal() -> str | None:
    """Which of stdin and stdout is not a terminal, if either (the app then cannot read keys or draw: Textual
    would wait for keys that never come); None where both are."""
    bad = [name for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout))
           if not getattr(stream, "isatty", lambda: False)()]
    return " and ".join(bad) or None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("--version", "-V"):
        print(f"layerlab {cli.package_version()}")
        return cli.EXIT_OK
    if argv and argv[0] != "tui":
        return cli.main(argv)
    args = argv[1:]
    if any(a in ("-h", "--help") for a in args):
        print(USAGE, end="")
        return cli.EXIT_OK
    store, rest = None, []
    while args:
        arg = args.pop(0)
        if arg == "--no-store":
            store = False
        elif arg == "--store" or arg.startswith("--store="):
            value = arg.partition("=")[2] if "=" in arg else (args.pop(0) if args else "")
            if not value:
                print("layerlab: error: --store needs a path (layerlab tui --help)", file=sys.stderr)
                return cli.EXIT_CONFIG
            store = value
        else:
            rest.append(arg)
    if len(rest) > 1 or (rest and rest[0].startswith("-")):
        print(f"layerlab: error: unexpected argument {rest[-1]!r} (layerlab tui --help)", file=sys.stderr)
        return cli.EXIT_CONFIG
    if isinstance(store, str):
        try:
            cli.check_store_arg(store)
        except cli.ConfigError as exc:
            print(f"layerlab: error: {exc}", file=sys.stderr)
            return exc.exit_code
    bad = _not_a_terminal()
    if bad:
        print(f"layerlab: error: the app needs a terminal, and {bad} {'is' if ' ' not in bad else 'are'} not one; "
              "for runs without one use `layerlab train CONFIG` (layerlab --help)", file=sys.stderr)
        return cli.EXIT_CONFIG
    from tui.app import run_app

    return run_app(rest[0] if rest else None, store)


if __name__ == "__main__":
    sys.exit(main())
