"""Copy the browser side of the widgets (widgets/*) into ocw/static at build time.

hatch's force-include is invisible to an editable install; a build hook that
copies the files into the package works for the wheel and for `pip install -e`.
At run time ocw looks in ocw/static first and falls back to ../widgets (a source
checkout), so a stale copy never hides an edit during development.
"""
import shutil
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version, build_data):
        root = Path(self.root)
        src = root / "widgets"
        dst = root / "ocw" / "static"
        dst.mkdir(exist_ok=True)
        for f in src.glob("*"):
            if f.suffix in (".js", ".css"):
                shutil.copy2(f, dst / f.name)
