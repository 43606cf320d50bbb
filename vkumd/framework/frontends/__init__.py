"""Frontends: importers that turn other frameworks' models into vkumd's graph IR.

Each sub-package depends on its framework's own library (``onnx``), imported only when the
sub-package is; ``import vkumd`` never needs them.
"""
