"""The distribution's version (independent of ``KERNLOOM_API_VERSION``, the plugin API's)."""

__version__ = "0.1.0"
