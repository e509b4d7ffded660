"""The build step pyproject.toml cannot declare: the wheel carries the acceptance suite
(``tests/acceptance/*.py``) and the default ``thresholds.toml`` as package data of
``pytest_gpucluster`` (``acceptance/`` and ``thresholds.toml`` beside its modules), copied from where
the repository keeps them when the wheel is built, so the tree holds one copy of each
(``pytest_gpucluster.config.shipped`` finds them in either place). Everything else is in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildWithSuite(build_py):  # type: ignore[misc]
    """build_py, then the suite and the default thresholds into the built package."""

    def run(self) -> None:
        super().run()
        package = Path(self.build_lib) / "pytest_gpucluster"
        suite = package / "acceptance"
        suite.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / "thresholds.toml", package / "thresholds.toml")
        for path in sorted((ROOT / "tests" / "acceptance").glob("*.py")):
            shutil.copy2(path, suite / path.name)


setup(cmdclass={"build_py": BuildWithSuite})
