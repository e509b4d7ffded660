"""Finding a vendor tool on the node: the path the profile names, else the node's PATH."""

from __future__ import annotations

import os
import shutil


def find_tool(name: str, path: str | None, key: str) -> tuple[str | None, str]:
    """The executable to run for ``name`` and, when there is none, where it was looked for:
    ``path`` (the profile's ``key``) when set, else ``name`` on PATH."""
    if path:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path, ""
        return None, f"no executable at {path} (profile key {key})"
    found = shutil.which(name)
    return (found, "") if found else (None, "not on PATH")
