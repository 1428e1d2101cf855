"""One table of keys (tui.keys): the README, the help screen, the footer and the bindings must all say the same."""
import re
from pathlib import Path

from textual.widgets import Input, Markdown

from tests.tui.conftest import screen_text
from tui.app import LayerlabApp
from tui.keys import ALL_KEYS, APP_KEYS, key_rows, key_table_markdown
from tui.screens.help import HelpScreen

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_key_table_is_the_apps():
    text = README.read_text(encoding="utf-8")
    table = re.search(r"<!-- keys:.*?-->\n(.*?)\n<!-- /keys -->", text, re.S)
    assert table, "README.md has no key table between <!-- keys: --> and <!-- /keys -->"
    assert table.group(1).strip() == key_table_markdown()


def test_every_binding_is_in_the_table_and_no_key_is_bound_twice():
    bound = [k for key in ALL_KEYS for k in (key.plain, key.anywhere) if k]
    app_level = [k for key in APP_KEYS for k in (key.plain, key.anywhere) if k]
    assert len(app_level) == len(set(app_level)), "an app key is bound to two actions"
    rows = " ".join(" ".join(r) for r in key_rows())
    for key in ("F6", "F12", "ctrl+b", "Escape", "shift+↑", "?"):
        assert key in rows
    assert len(bound) >= 25


async def test_the_help_screen_shows_the_table_and_how_to_close_it(fixed_env):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        source = app.screen.query_one(Markdown).source
        assert key_table_markdown() in source and "Close this help with **Escape**" in source


async def test_the_footer_shows_the_key_that_works_where_the_focus_is(fixed_env):
    app = LayerlabApp("quadrant")
    async with app.run_test(size=(80, 24)) as pilot:
        footer = screen_text(app).splitlines()[-1]
        for word in ("a Add", "d Remove", "s Start", "b Backend", "? Help", "Quit"):
            assert word in footer, (word, footer)
        app.query_one("#input-shape", Input).focus()
        await pilot.pause()
        footer = screen_text(app).splitlines()[-1]
        for word in ("f6 Start", "^b Backend", "f12 Help", "^q Quit"):
            assert word in footer, (word, footer)
        assert " s Start" not in footer and "a Add" not in footer

