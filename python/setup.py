"""Builds the project's CMake (the directory above this one) and puts
libkiln inside the wheel, next to the package that loads it with ctypes."""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        build = os.path.join(self.build_lib, "..", "cmake-build")
        subprocess.check_call([
            "cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
            "-DKILN_BUILD_TESTS=OFF", "-DKILN_BUILD_BENCH=OFF", "-DKILN_BUILD_EXAMPLES=OFF"])
        subprocess.check_call(["cmake", "--build", build, "--target", "kiln", "-j",
                               str(os.cpu_count() or 1)])
        for name in os.listdir(build):
            if name.startswith("libkiln.so"):
                shutil.copy2(os.path.join(build, name),
                             os.path.join(self.build_lib, "kiln", "libkiln.so"))
                return
        raise RuntimeError("cmake built no libkiln.so in " + build)


setup(cmdclass={"build_py": BuildWithCMake})
