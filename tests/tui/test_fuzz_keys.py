"""Thousands of random key sequences (hypothesis, derandomized) typed into one app across all its views: after
every sequence the app must still run, answer within seconds, and have met no error (its guard records every
exception it survives, so a hidden crash fails here too).

The app runs in a thread of its own with its own event loop; hypothesis drives it from the test's thread. Runs
and sweeps play scripted events (tests.tui.conftest.FakeHandle) so the keys that start them cost no processes;
quitting is recorded instead of done, so that one app takes every sequence.
"""
import asyncio
import concurrent.futures
import os
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tui.conftest import FakeHandle, FIXED_ARCHS, FIXED_DATASETS

KEYS = (list("adspnxbrewq12345?80.,-zjk") + ["space", "enter", "escape", "tab", "shift+tab", "up", "down", "left",
        "right", "home", "end", "backspace", "delete", "pageup", "pagedown", "shift+up", "shift+down"] +
        [f"f{i}" for i in range(1, 10)] + ["f12", "ctrl+s", "ctrl+o", "ctrl+b", "ctrl+p", "ctrl+q"])
EXAMPLES = int(os.environ.get("LAYERLAB_FUZZ_EXAMPLES", "600"))  # (more for a longer hunt; the default keeps CI short)


class AppThread:
    """One LayerlabApp under Textual's pilot, in a thread with its own event loop."""

    def __init__(self, tmp_path):
        self.ready, self.loop, self.quits = threading.Event(), None, 0
        self.tmp_path = tmp_path
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self.thread.start()
        assert self.ready.wait(60), "the app did not start"

    async def _main(self):
        from tui.app import LayerlabApp

        self.loop = asyncio.get_running_loop()
        self.app = LayerlabApp("quadrant", save_dir=self.tmp_path)

        async def quit_recorded():
            self.quits += 1

        self.app.action_quit = quit_recorded
        self.jobs = asyncio.Queue()
        async with self.app.run_test(size=(80, 24)) as pilot:
            self.pilot = pilot
            self.ready.set()
            while (job := await self.jobs.get()) is not None:  # run here: the pilot needs the app's context
                method, done = job
                try:
                    done.set_result(await method())
                except Exception as exc:  # noqa: BLE001 (handed to the test's thread)
                    done.set_exception(exc)

    def run(self, method, timeout=30.0):
        """Run ``method()`` (a coroutine function of this object) in the app's loop; its result."""
        done = concurrent.futures.Future()
        self.loop.call_soon_threadsafe(self.jobs.put_nowait, (method, done))
        return done.result(timeout)

    def _send(self, key):
        """One key as the terminal would deliver it."""
        from textual import events
        from textual.app import _character_to_key

        key = _character_to_key(key) if len(key) == 1 and not key.isalnum() else key
        char = key if len(key) == 1 else {"space": " ", "enter": "\r", "tab": "\t", "escape": "\x1b",
                                           "backspace": "\x7f"}.get(key)
        event = events.Key(key, char)
        event.set_sender(self.app)
        self.app._driver.send_message(event)

    async def _through(self, node, timeout):
        """Wait until ``node`` has handled every message queued to it so far."""
        done = asyncio.get_running_loop().create_future()
        node.call_later(lambda: done.done() or done.set_result(True))
        await asyncio.wait_for(done, timeout)

    async def answered(self, timeout=5.0):
        """Wait until the app has handled everything sent so far. A key goes from the app to the focused widget,
        up through its parents and back to the app for the bindings, one message queue after another: wait on
        each queue in that order (twice, for what the keys set off), then let scheduled work run."""
        for _ in range(2):
            await self._through(self.app, timeout)
            node = self.app.screen.focused or self.app.screen
            for hop in [node, *node.ancestors]:
                if hop is self.app or self._going(hop):
                    continue
                try:
                    await self._through(hop, 1.0)
                except asyncio.TimeoutError:
                    if not self._going(hop):
                        raise
            await asyncio.sleep(0.005)

    def _going(self, node) -> bool:
        """A widget being removed (its dialog closing) answers nothing, and needs not."""
        try:
            return node._closing or node._closed or not node.is_attached or node.screen not in self.app.screen_stack
        except Exception:  # noqa: BLE001 (no screen: removed)
            return True

    async def press(self, keys):
        """The keys a few ms apart (a fast typist), then wait until the app has handled them all."""
        for key in keys:
            self._send(key)
            await asyncio.sleep(0.003)
        await self.answered()

    async def settle(self):
        """Back to the main screen (dialogs cancelled) and no run going, so each sequence starts from a view."""
        app = self.app
        for _ in range(8):  # escape closes every dialog (and a dropdown's list), as a person would close it
            if len(app.screen_stack) == 1:
                break
            self._send("escape")
            await self.answered()
        if app.handle is not None:
            app.action_stop()
            await self.answered()
        return app.is_running, list(app.errors), [type(s).__name__ for s in app.screen_stack[1:]], \
            app.query_one("#tabs").active

    def close(self):
        self.loop.call_soon_threadsafe(self.jobs.put_nowait, None)
        self.thread.join(30)


@pytest.fixture(scope="module")
def app_thread(tmp_path_factory):
    import tui.app
    import tui.panes.settings

    mp = pytest.MonkeyPatch()
    home = tmp_path_factory.mktemp("fuzz")
    mp.setenv("LAYERLAB_HOME", str(home / "home"))
    mp.setattr(tui.app, "RunHandle", FakeHandle)
    mp.setattr(FakeHandle, "per_poll", 12)  # a run lasts about 150 ms: keys still meet runs going on
    mp.setattr(tui.app, "available_archs", lambda: FIXED_ARCHS)
    mp.setattr(tui.panes.settings, "available_archs", lambda: FIXED_ARCHS)
    mp.setattr(tui.panes.settings, "available_datasets", lambda: FIXED_DATASETS)
    runner = AppThread(home / "saved")
    yield runner
    runner.close()
    mp.undo()


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=6))
def test_random_keys_never_take_the_app_down(app_thread, keys):
    app_thread.run(lambda: app_thread.press(keys))  # a hang here times out: the app stopped answering
    running, errors, screens, view = app_thread.run(app_thread.settle, timeout=10)
    assert running, f"the app stopped after {keys}"
    assert not errors, f"{keys} raised {errors!r}"
    assert not screens, f"escape did not close {screens} after {keys}"
    assert view in ("model", "settings", "train", "runs", "analysis")
