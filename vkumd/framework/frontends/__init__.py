"""Frontends: importers that turn other frameworks' programs into vkumd's graph IR.

Each sub-package is optional and imports its framework only when it is itself imported, so
``import vkumd`` never pulls in a framework.
"""
