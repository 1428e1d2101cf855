"""Where layerlab keeps files of its own: ``LAYERLAB_HOME`` if set, else the user data directory
(platformdirs: ``~/.local/share/layerlab`` on Linux). Nothing is created until something is written."""
from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    env = os.environ.get("LAYERLAB_HOME")
    if env:
        return Path(env).expanduser().resolve()
    import platformdirs

    return Path(platformdirs.user_data_dir("layerlab", appauthor=False))


def log_file() -> Path:
    """The app's error log: a traceback for every error it survived."""
    return home() / "logs" / "app-errors.log"


def default_save_dir() -> Path:
    """Where the app proposes to save configs and exports: ``LAYERLAB_SAVE_DIR`` if set, else the user's
    documents directory's ``layerlab`` folder (``~/Documents/layerlab``)."""
    env = os.environ.get("LAYERLAB_SAVE_DIR")
    if env:
        return Path(env).expanduser().resolve()
    import platformdirs

    return Path(platformdirs.user_documents_dir()) / "layerlab"
