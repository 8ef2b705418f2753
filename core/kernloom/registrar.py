"""``Registrar``: what a plugin's ``kernloom_register`` hook receives.

It is bound to one plugin and only *collects*: nothing reaches the ``Registry`` until
the hook has returned without error, so a plugin that raises half-way leaves nothing
behind. Each call is validated when it is made, so the error's traceback points at
the plugin's own line.
"""

from __future__ import annotations

from typing import final

from kernloom.errors import RegistrationError
from kernloom.framework.device import DeviceFactory
from kernloom.framework.device_factory_registry import FactoryRegistration
from kernloom.framework.device_name import is_valid_device_type
from kernloom.framework.origin import Origin

__all__ = ["Registrar"]


@final
class Registrar:
    """Collects one plugin's registrations while its hook runs."""

    __slots__ = ("_closed", "_factories", "_origin")

    def __init__(self, origin: Origin) -> None:
        self._origin = origin
        self._factories: list[FactoryRegistration] = []
        self._closed = False

    @property
    def origin(self) -> Origin:
        """The plugin this registrar is bound to."""
        return self._origin

    def register_device_factory(
        self,
        device_type: str,
        factory: DeviceFactory | type[DeviceFactory],
        *,
        priority: int,
    ) -> None:
        """Register ``factory`` as a source of devices of ``device_type``.

        ``device_type`` is an upper-case name (``GPU``, ``XLA_CPU``). ``priority`` orders
        factories of one type (the highest is used, the rest shadowed) and device types
        in placement; see ``kernloom.framework.device_factory_registry`` for the table
        TensorFlow's priorities follow. A factory class is instantiated with no arguments.
        """
        self._check_open("register_device_factory")
        where = f"{self._origin} registering a device factory"
        if not isinstance(device_type, str) or not is_valid_device_type(device_type):
            raise RegistrationError(
                f"{where}: device type {device_type!r} must be an upper-case name such as "
                f"'GPU' or 'XLA_CPU'"
            )
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise RegistrationError(
                f"{where} for {device_type}: priority must be an int, got {priority!r} "
                f"({type(priority).__name__})"
            )
        if isinstance(factory, type) and issubclass(factory, DeviceFactory):
            factory_class = factory
            try:
                factory = factory_class()
            except Exception as exc:
                raise RegistrationError(
                    f"{where} for {device_type}: {factory_class.__qualname__}() failed: {exc}"
                ) from exc
        if not isinstance(factory, DeviceFactory):
            raise RegistrationError(
                f"{where} for {device_type}: {factory!r} is not a kernloom.DeviceFactory; "
                f"subclass DeviceFactory and register an instance"
            )
        self._factories.append(FactoryRegistration(device_type, factory, priority, self._origin))

    @property
    def factories(self) -> tuple[FactoryRegistration, ...]:
        return tuple(self._factories)

    def summary(self) -> tuple[str, ...]:
        """What was registered, in words, for ``kernloom plugins``."""
        return tuple(
            f"device factory {r.device_type} (priority {r.priority})" for r in self._factories
        )

    def close(self) -> None:
        """Refuse further registrations: the hook has returned."""
        self._closed = True

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise RegistrationError(
                f"{self._origin} called {what} after its kernloom_register hook returned; "
                f"register everything inside the hook"
            )
