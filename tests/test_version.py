"""The release effax says it is: one version in the package, the build and the CHANGELOG."""

import re
import tomllib
from pathlib import Path

import effax

ROOT = Path(__file__).resolve().parent.parent


def test_version_is_a_release_number() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", effax.__version__), effax.__version__


def test_the_build_takes_its_version_from_the_package() -> None:
    # the wheel's metadata version is effax.__version__ (scripts/wheel_smoke.sh checks the
    # installed wheel's importlib.metadata.version against it)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["hatch"]["version"]["path"] == "effax/__init__.py"
    source = (ROOT / "effax" / "__init__.py").read_text()
    assert re.search(rf'^__version__ = "{re.escape(effax.__version__)}"$', source, re.M)


def test_changelog_has_unreleased_then_one_section_per_release_newest_first() -> None:
    headings = re.findall(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert headings[0] == "Unreleased", headings
    release = re.compile(r"(\d+)\.(\d+)\.(\d+) \((\d{4}-\d{2}-\d{2})\)")
    releases = [release.fullmatch(h) for h in headings[1:]]
    assert all(releases), headings
    versions = [tuple(int(g) for g in m.groups()[:3]) for m in releases if m]
    dates = [m.group(4) for m in releases if m]
    assert versions == sorted(versions, reverse=True), headings
    assert dates == sorted(dates, reverse=True), headings
    # the package is the newest release
    assert ".".join(map(str, versions[0])) == effax.__version__


def test_readme_describes_the_current_release() -> None:
    readme = (ROOT / "README.md").read_text()
    assert f"## What is here ({effax.__version__})\n" in readme
    assert f"This is effax {effax.__version__} (" in readme
