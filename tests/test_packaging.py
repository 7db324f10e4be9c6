"""The wheel ships the widget's browser side, and a fresh venv can use it.

An editable install reads widgets/ from the checkout; a wheel must carry a copy
(ocw/static, made by hatch_build.py). This builds the real wheel, installs it
into a brand-new venv (its dependencies borrowed from the test venv through a
.pth file, so nothing is downloaded), and instantiates the widget there.
"""
import os

import ocw
import site
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _site_packages(prefix: Path) -> Path:
    return Path(sysconfig.get_path("purelib", vars={"base": str(prefix), "platbase": str(prefix)}))


def test_wheel_carries_widget_assets_and_works_in_a_fresh_venv(tmp_path):
    out = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
                   check=True, capture_output=True, text=True, timeout=300)
    (wheel,) = out.glob("ocw-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "ocw/static/context.js" in names and "ocw/static/context.css" in names
    assert not any(n.startswith(("tests/", "widgets/")) for n in names)
    # The hand-written JupyterLab extension (%%chat cells edited as Markdown) lands where JupyterLab looks.
    ext = f"ocw-{ocw.__version__}.data/data/share/jupyter/labextensions/ocw-labextension/"
    assert ext + "package.json" in names and ext + "static/remoteEntry.js" in names

    env_dir = tmp_path / "fresh"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    # Dependencies come from the test venv; ocw itself only from the wheel.
    deps = [p for p in site.getsitepackages() if "site-packages" in p]
    (_site_packages(env_dir) / "_deps.pth").write_text("\n".join(deps) + "\n")
    with zipfile.ZipFile(wheel) as z:  # install = unpack into site-packages (no pip, no network)
        z.extractall(_site_packages(env_dir))

    probe = (
        "import ocw, ocw.widgets.ring as w, pathlib;"
        "x = w.ContextWidget();"
        "print(pathlib.Path(ocw.__file__).resolve());"
        "print(ocw.widgets._static.asset('context.js').resolve());"
        "print('export default' in x._esm, len(x._css) > 100, repr(x))"
    )
    r = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert r.returncode == 0, r.stderr
    ocw_file, asset, checks = r.stdout.strip().splitlines()
    assert str(env_dir.resolve()) in ocw_file, "ocw must come from the wheel, not the checkout"
    assert asset.endswith("ocw/static/context.js") and str(env_dir.resolve()) in asset
    assert checks == "True True <ocw context: no session>"
