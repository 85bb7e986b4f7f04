"""`python -m kiln.info`: what this kiln is and what it runs on.

Prints the package's version and the git revision it was built from
(recorded by setup.py; "unknown" for a source checkout run through
KILN_LIBRARY), the libkiln loaded, the backend the KILN_* variables select
and its devices, and the versions of the libraries kiln exchanges with."""
import ctypes
import importlib
import sys

from . import Device, __version__, devices
from ._lib import DeviceInfo, check, lib, library_path


def build_info():
    """{version, libkiln_version, git_revision, libkiln}."""
    try:
        from ._build import GIT_REVISION
    except ImportError:  # not built by setup.py
        GIT_REVISION = None
    return {"version": __version__, "libkiln_version": lib.kiln_version().decode(),
            "git_revision": GIT_REVISION or "unknown", "libkiln": library_path}


def device_info(d: Device):
    info = DeviceInfo()
    check(lib.kiln_device_info_get(d._handle, ctypes.byref(info)))
    return info


def _version_of(name):
    try:
        return importlib.import_module(name).__version__
    except ImportError:
        return "not installed"


def main(out=sys.stdout):
    b = build_info()
    print(f"kiln {b['version']} (libkiln {b['libkiln_version']}, git {b['git_revision']})", file=out)
    print(f"libkiln: {b['libkiln']}", file=out)
    devs = devices()
    print(f"backend: {devs[0].platform if devs else 'none'} ({len(devs)} device"
          f"{'' if len(devs) == 1 else 's'})", file=out)
    for d in devs:
        i = device_info(d)
        extra = (f", sm_{i.compute_major}{i.compute_minor}, {i.multiprocessors} SMs"
                 if d.platform == "cuda" else f", {i.multiprocessors} thread{'s' if i.multiprocessors != 1 else ''}")
        print(f"  {d.platform}:{d.id}  {i.name.decode()}{extra}, "
              f"{i.total_memory / 2**30:.1f} GiB", file=out)
    print("python " + sys.version.split()[0] + ", " + ", ".join(
        f"{m} {_version_of(m)}" for m in ("numpy", "ml_dtypes", "jax", "torch")), file=out)


if __name__ == "__main__":
    main()
