"""The optional C key helpers (src/radixkv/_keys.c); everything else is in pyproject.toml.

The extension is optional: when it cannot be built (no compiler, no Python headers) the
install still succeeds and radixkv uses its pure-Python key path (radixkv.native).
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """Build the extension if the machine can; say so and carry on if it cannot."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as error:  # any build failure means the pure path
            print(f"radixkv: the C key helpers were not built ({error}); using pure Python")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as error:
            print(f"radixkv: {ext.name} was not built ({error}); using pure Python")


setup(
    ext_modules=[
        Extension(
            "radixkv._keys",
            ["src/radixkv/_keys.c"],
            extra_compile_args=["-O3"],  # vectorised compare loops (_keys.c)
            optional=True,
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
