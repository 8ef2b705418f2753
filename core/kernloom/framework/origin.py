"""Where a registration came from, so that every report and error can name its plugin."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Origin"]


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
