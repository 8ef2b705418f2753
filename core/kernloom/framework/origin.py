"""Where a registration came from, so that every report and error can name its plugin."""

from __future__ import annotations

from dataclasses import dataclass

from kernloom.errors import RegistrationError

__all__ = ["Origin", "refuse_frozen", "registered_by"]


def refuse_frozen(table: str, origin: Origin, what: str) -> RegistrationError:
    """The error for a registration into a table that plugin loading has frozen.

    A loaded registry is immutable: what a session, a placer or a cached kernel saw must
    stay what is there, so a late registration is refused rather than half-seen.
    """
    return RegistrationError(
        f"{origin} registers {what} into a {table} that is frozen: plugins register only "
        f"while their registry loads them. Register it in the plugin's kernloom_register "
        f"hook, or (in tests) build a new kernloom.plugin.Registry() and register_plugin "
        f"every plugin into it before using it."
    )


@dataclass(frozen=True, slots=True)
class Origin:
    """The plugin that registered something."""

    plugin: str
    """The entry-point name (``cpu_numpy``), or the name given to ``Registry.register_plugin``."""
    distribution: str | None = None
    """The pip distribution that ships the plugin (``kernloom-cpu-numpy``), when installed."""
    version: str | None = None
    """The distribution's version."""

    def __str__(self) -> str:
        if self.distribution is None:
            return f"plugin {self.plugin!r}"
        version = f" {self.version}" if self.version else ""
        return f"plugin {self.plugin!r} ({self.distribution}{version})"

    def answers_to(self, name: str) -> bool:
        """Whether configuration may refer to this plugin as ``name``."""
        return name in (self.plugin, self.distribution)


def registered_by(origin: Origin | None) -> str:
    """`` registered by plugin 'p' (dist 1.0)`` where a kernel's plugin is known, else
    nothing: a kernel's crash is that plugin's to fix, and the error messages say so."""
    return f" registered by {origin}" if origin is not None else ""
