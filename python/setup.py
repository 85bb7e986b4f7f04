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


def git_revision():
    """The source tree's commit (with "-dirty" for uncommitted changes), or
    None outside a git checkout (an sdist)."""
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return rev + ("-dirty" if dirty else "")


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        # What `python -m kiln.info` reports as the build's revision.
        with open(os.path.join(self.build_lib, "kiln", "_build.py"), "w") as f:
            f.write(f"GIT_REVISION = {git_revision()!r}\n")
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
