"""Build the optional C extension appliance._native from native/*.c.

A failed compile must still install the pure-Python package: appliance/native.py is the one place
that notices the module is missing and selects the fallbacks.
"""
import glob
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any compiler failure means "no native"
            print(f"appliance: native extension not built ({exc}); using fallbacks", file=sys.stderr)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            print(f"appliance: native extension {ext.name} not built ({exc})", file=sys.stderr)


sources = sorted(glob.glob("native/*.c"))
ext_modules = []
if sources:
    ext_modules.append(
        Extension(
            "appliance._native",
            sources=sources,
            include_dirs=["native"],
            extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"],
        )
    )

bench_sources = sorted(glob.glob("native/bench/*.c"))
if bench_sources:
    ext_modules.append(
        Extension(
            "appliance.bench._loadgen",
            sources=bench_sources,
            extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"],
        )
    )

setup(ext_modules=ext_modules, cmdclass={"build_ext": OptionalBuildExt})
