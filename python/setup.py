"""Builds the project's CMake (the directory above this one) and puts
libkiln inside the wheel, next to the package that loads it with ctypes,
with the C call path of kiln.jit (kiln/_dispatch.c: an extension module
that needs Python's headers and kiln's, and links nothing, being handed
libkiln's functions at import)."""
import os
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cmake_build_dir(cmd):
    return os.path.join(cmd.build_lib, "..", "cmake-build")


_built = set()


def cmake_build(cmd):
    """Configures and builds libkiln (and kiln's generated headers), once
    per setup run (incremental across runs)."""
    build = os.path.abspath(cmake_build_dir(cmd))
    if build in _built:
        return build
    subprocess.check_call([
        "cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
        "-DKILN_BUILD_TESTS=OFF", "-DKILN_BUILD_BENCH=OFF", "-DKILN_BUILD_EXAMPLES=OFF"])
    subprocess.check_call(["cmake", "--build", build, "--target", "kiln", "-j",
                           str(os.cpu_count() or 1)])
    _built.add(build)
    return build


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        build = cmake_build(self)
        for name in os.listdir(build):
            if name.startswith("libkiln.so"):
                shutil.copy2(os.path.join(build, name),
                             os.path.join(self.build_lib, "kiln", "libkiln.so"))
                return
        raise RuntimeError("cmake built no libkiln.so in " + build)


class BuildExtWithKilnHeaders(build_ext):
    def run(self):
        # kiln's public headers include one the CMake build generates.
        generated = os.path.join(cmake_build(self), "include")
        for ext in self.extensions:
            ext.include_dirs.append(generated)
        super().run()


dispatch = Extension("kiln._dispatch", sources=["kiln/_dispatch.c"],
                     include_dirs=[os.path.join(ROOT, "include")],
                     extra_compile_args=["-O2", "-Wall", "-Werror=implicit-function-declaration"])

setup(cmdclass={"build_py": BuildWithCMake, "build_ext": BuildExtWithKilnHeaders},
      ext_modules=[dispatch])
