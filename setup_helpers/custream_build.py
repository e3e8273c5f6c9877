"""Build against custream with setuptools: the include dir, and Extensions that use it.

Self-contained (the standard library, plus setuptools when you make an Extension): copy it
into your project, or put this folder on sys.path in setup.py. custream must be installed
in the Python that runs the build (with build isolation, list it in
``[build-system] requires``).

    from setuptools import setup
    from custream_build import cythonize, extension

    setup(ext_modules=cythonize([
        extension("mypkg.fast", ["mypkg/fast.pyx"]),        # from custream cimport Stream
        extension("mypkg.cext", ["mypkg/cext.c"]),          # #include "custream.h"
    ]))
"""

from __future__ import annotations

import importlib.util
import os
import sys

__all__ = ["cython_include_path", "cythonize", "extension", "get_include"]


def get_include() -> str:
    """The folder holding custream.h and the .pxd files (``custream.get_include()``), found
    without importing custream's extension module."""
    spec = importlib.util.find_spec("custream")
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        if os.path.isfile(os.path.join(folder, "custream.h")):
            return os.path.abspath(folder)
    where = f"found at {folders[0]} without custream.h" if folders else "not installed"
    raise RuntimeError(
        f"custream is {where} in the Python running this build ({sys.executable}); "
        "install it there (with build isolation: add 'custream' to [build-system] requires)"
    )


def cython_include_path() -> list[str]:
    """What to give Cython (``include_path=``, ``cython -I``) so that ``cimport custream``
    finds the installed .pxd even when site-packages is not on sys.path."""
    return [os.path.dirname(get_include())]


def extension(name: str, sources: list[str], **kwargs):
    """A ``setuptools.Extension`` compiled against custream: its include dir is added to
    ``include_dirs``; every other keyword goes to Extension as is."""
    from setuptools import Extension

    include_dirs = [*kwargs.pop("include_dirs", []), get_include()]
    return Extension(name, list(sources), include_dirs=include_dirs, **kwargs)


def cythonize(extensions, **kwargs):
    """``Cython.Build.cythonize`` with custream's .pxd on the include path and Python 3
    semantics unless told otherwise."""
    from Cython.Build import cythonize as _cythonize

    kwargs["include_path"] = [*kwargs.get("include_path", []), *cython_include_path()]
    directives = kwargs.setdefault("compiler_directives", {})
    directives.setdefault("language_level", 3)
    return _cythonize(extensions, **kwargs)
