"""setup.py — builds the kvidx extension module (kvidx.c) against libkvidx.

Where the library is found, first match wins:
  KVIDX_INCLUDE_DIR / KVIDX_LIBRARY_DIR  the tree's lib/ and build/ (what `make` sets, with
                                         KVIDX_RPATH so the tests load build/libkvidx.so.1)
  pkg-config kvidx                       an installed library (`make install`)
  nothing                                -lkvidx on the compiler's default paths
pyproject.toml has the metadata; this file only describes the extension.
"""
import os
import shlex
import subprocess

from setuptools import Extension, setup


def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config", *args, "kvidx"], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return shlex.split(out)


def extension():
    kw = {"include_dirs": [], "library_dirs": [], "libraries": ["kvidx"],
          "extra_compile_args": ["-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                                 "-Wno-missing-field-initializers"],
          "extra_link_args": []}
    inc, libdir = os.environ.get("KVIDX_INCLUDE_DIR"), os.environ.get("KVIDX_LIBRARY_DIR")
    if inc or libdir:
        kw["include_dirs"] += [inc] if inc else []
        kw["library_dirs"] += [libdir] if libdir else []
        if os.environ.get("KVIDX_RPATH"):
            kw["extra_link_args"].append("-Wl,-rpath," + os.environ["KVIDX_RPATH"])
    else:
        flags = pkg_config("--cflags", "--libs") or []
        kw["include_dirs"] += [f[2:] for f in flags if f.startswith("-I")]
        kw["library_dirs"] += [f[2:] for f in flags if f.startswith("-L")]
    return Extension("kvidx", sources=["kvidx.c"], **kw)


setup(ext_modules=[extension()])
