"""The package as users meet it: the README's example runs as written (the
snippet lives in readme_example.py, which the README quotes), `python -m
kiln.info` describes the build, and the declared dependencies are right."""
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import kiln

HERE = pathlib.Path(__file__).parent


def _run(args, **env):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env}, cwd=HERE)


def test_readme_example_runs_as_written():
    pytest.importorskip("jax")
    r = _run([str(HERE / "readme_example.py")])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    want = np.tanh(x @ np.ones((3, 2), np.float32))
    assert lines[0].startswith("[[") and "kiln.Array" not in lines[0]  # str(): values
    np.testing.assert_allclose(float(lines[-1]), want.sum(), rtol=1e-6)
    np.testing.assert_allclose(np.fromstring(lines[-2].strip("[]"), sep=" "), want[1] * 2,
                               rtol=1e-6)


def test_readme_quotes_the_example():
    readme = HERE.parents[1] / "README.md"
    if not readme.exists():
        pytest.skip("no top-level README.md (an installed test tree)")
    code = (HERE / "readme_example.py").read_text()
    text = readme.read_text()
    if "\n## Python" not in text:
        pytest.skip("README.md has no '## Python' section yet")
    assert code in text, "README.md's Python example differs from tests/python/readme_example.py"


def test_kiln_info_describes_the_build():
    r = _run(["-m", "kiln.info"], KILN_NUM_CPU_DEVICES="2", KILN_BACKEND="cpu")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith(f"kiln {kiln.__version__} (libkiln ")
    assert "git " in out.splitlines()[0]
    assert "backend: cpu (2 devices)" in out
    assert "  cpu:0 " in out and "  cpu:1 " in out
    assert f"numpy {np.__version__}" in out
    from kiln.info import build_info
    info = build_info()
    assert os.path.exists(info["libkiln"]) and info["libkiln_version"] == out.split()[3].rstrip(",")


def test_declared_dependencies():
    """pyproject.toml declares what the package imports: numpy and ml_dtypes
    always, jax as the kiln[jax] extra (kiln.jit and Array's operators), and
    jax, flax and optax as kiln[examples] (python/examples/flax_cnn.py)."""
    try:
        from importlib.metadata import PackageNotFoundError, requires
        reqs = requires("kiln")
    except PackageNotFoundError:
        pytest.skip("kiln is not installed as a distribution (run from a source tree)")
    names = {}
    for r in reqs:  # a name may come several times (jax: the jax and examples extras)
        name = r.split(";")[0].split(">")[0].split("=")[0].split("[")[0].strip()
        names.setdefault(name, []).append(r)
    assert "numpy" in names and "ml_dtypes" in names
    assert not any("extra" in r for r in names["numpy"] + names["ml_dtypes"])
    assert any('extra == "jax"' in r for r in names.get("jax", []))
    examples = {n for n, rs in names.items() if any('extra == "examples"' in r for r in rs)}
    assert {"jax", "flax", "optax"} <= examples


def test_array_operators_without_jax_say_what_to_install():
    code = ("import sys; sys.modules['jax'] = None\n"
            "import numpy as np, kiln\n"
            "a = kiln.asarray(np.ones(3, np.float32))\n"
            "print(repr(a))\n"
            "try:\n    a + 1\nexcept ImportError as e:\n    print('ImportError:', e)\n")
    r = _run(["-c", code])
    assert r.returncode == 0, r.stderr
    assert "kiln.Array([1., 1., 1.], dtype=float32, device=cpu:0)" in r.stdout
    assert "pip install 'kiln[jax]'" in r.stdout
