"""The app-level guard: an exception in a handler, an action or a timer is reported and logged, and the app
carries on with its runs and network as they were.

Textual ends the app on any exception a message handler raises, and stops the message loop of the widget that
raised it. :class:`Guarded` catches the exception where each message is dispatched (in the app, its screens and
its views), so nothing stops; :meth:`GuardedApp._handle_exception` reports what still reaches Textual's own
handler (a callback, a built-in widget). Each report is one line on screen naming the log file that holds the
traceback. Exceptions before the app runs, or while it closes, keep Textual's behaviour.
"""
from __future__ import annotations

import asyncio
import datetime
import tempfile
import traceback
from pathlib import Path

from textual.app import App

from nncore import paths


class Guarded:
    """Mix in before a Textual class: exceptions from this node's handlers are reported, not fatal."""

    async def _dispatch_message(self, message):
        try:
            return await super()._dispatch_message(message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not self.app.report_exception(exc):
                raise


class GuardedApp(Guarded, App):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.errors: list[BaseException] = []  # every exception survived (tests assert it stays empty)

    def report_exception(self, exc: BaseException) -> bool:
        """Log ``exc`` and say so on screen; False while the app cannot carry on (starting or closing)."""
        if not self.is_running or self._closing or self._exit_renderables:
            return False
        self.errors.append(exc)
        log = write_log(exc)
        first = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        self.notify(f"internal error, the app carries on ({first}); traceback in {log}", severity="error",
                    timeout=20, markup=False)
        return True

    def _handle_exception(self, error: Exception) -> None:
        if not self.report_exception(error):
            super()._handle_exception(error)


def write_log(exc: BaseException) -> Path:
    """Append ``exc``'s traceback to the app's error log (a temporary file if that cannot be written)."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    stamp = datetime.datetime.now().isoformat(timespec="seconds")
    entry = f"--- {stamp}\n{text}\n"
    path = paths.log_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(entry)
        return path
    except OSError:
        fd, tmp = tempfile.mkstemp(prefix="layerlab-error-", suffix=".log")
        with open(fd, "w", encoding="utf-8") as fh:
            fh.write(entry)
        return Path(tmp)
