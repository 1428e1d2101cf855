"""The errors nncore raises on purpose, each with the process exit code the CLI maps it to.

Every message is one line that names the culprit (layer index, field, file), so the CLI and the
app can show it as it is, without a traceback.
"""
from __future__ import annotations


class LayerlabError(Exception):
    """Base of every error nncore raises for bad input or an unusable environment."""

    exit_code = 1


class ConfigError(LayerlabError, ValueError):
    """A network spec, config file or argument is invalid (exit 2). ``layer`` is the index at fault, if any;
    ``field`` the config field (``model.input``), where the app should mark it. ``about_data``: the network is
    valid but does not fit its data (input width, class count), so another dataset could make it right."""

    exit_code = 2

    def __init__(self, message: str, layer: int | None = None, field: str | None = None, about_data: bool = False):
        super().__init__(message)
        self.layer, self.field, self.about_data = layer, field, about_data


class DataError(LayerlabError, ValueError):
    """A dataset file is missing, corrupt or does not fit the network (exit 2)."""

    exit_code = 2


class OutputError(LayerlabError, OSError):
    """An output (weights, checkpoint, events) could not be written where asked (exit 2); the message says
    where the result was saved instead."""

    exit_code = 2


class DivergedError(LayerlabError, ArithmeticError):
    """Training produced a non-finite loss or weight (exit 3)."""

    exit_code = 3


class BackendUnavailable(LayerlabError, RuntimeError):
    """The backend asked for does not work on this machine (exit 4)."""

    exit_code = 4


class StaleBufferError(LayerlabError, RuntimeError):
    """A buffer from a previous Taichi runtime was used after the runtime was re-initialised."""

    exit_code = 1
