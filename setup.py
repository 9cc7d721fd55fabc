"""Package layout: the layers live at the repository's top level.

``domain/``, ``application/`` and ``infrastructure/`` are installed as
``contextledger.domain`` and so on. ``src/contextledger/`` holds symbolic links to
them, so the usual ``src`` layout finds every package (and editable installs are a
plain path entry that type checkers follow). A clone made without symbolic links
(Windows with ``core.symlinks=false``) has small text files in their place: then the
layers are mapped to their folders explicitly, and the wheel is the same
(tests/e2e/test_symlinks.py builds both and compares them).
"""

from pathlib import Path

from setuptools import find_namespace_packages, setup

LAYERS = ("domain", "application", "infrastructure")
SKIP = ["*__pycache__*"]
HERE = Path(__file__).resolve().parent

packages = find_namespace_packages("src", exclude=SKIP)
package_dir = {"": "src"}
if not all((HERE / "src" / "contextledger" / layer).is_dir() for layer in LAYERS):
    packages = [p for p in packages if p.split(".")[:2] not in [["contextledger", layer] for layer in LAYERS]]
    for layer in LAYERS:
        package_dir[f"contextledger.{layer}"] = layer
        packages.append(f"contextledger.{layer}")
        packages.extend(
            f"contextledger.{layer}.{sub}" for sub in find_namespace_packages(layer, exclude=SKIP)
        )

setup(packages=packages, package_dir=package_dir)
