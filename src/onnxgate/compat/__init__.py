"""What ONNX Runtime releases, packages and builds can run, asked of them or known from them.

Its modules are its API (``compat.providers``, ``compat.runtime``, ``compat.versions``,
``compat.kernels``), imported by name; the package binds nothing of its own. The runtime kinds
and the providers they bring come from the runner factory's registrations
(``runners/runtimes.py``), which sit below this package.
"""

__all__ = []
