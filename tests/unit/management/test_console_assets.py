"""The web console ships whole and loads nothing from elsewhere (issue "Management", "Web
console": "no build step and no CDN (this machine and users' networks may have no
internet)"): every file a page or module references is in the package, no file names an
http(s):// address, and no script turns text into markup (queue names are anyone's input)."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path, PurePosixPath

from batonmq.management.http import CONSOLE

ROOT = Path(__file__).resolve().parents[3]
#: Where the console's URLs point: "/console/x" is CONSOLE / "x".
URL_PREFIX = "/console/"

_HTML_REFERENCE = re.compile(r'\b(?:src|href)="([^"]*)"')
_CSS_REFERENCE = re.compile(r"url\(\s*['\"]?([^'\")]+)")
_JS_IMPORT = re.compile(r'\b(?:import|export)\b[^;]*?\bfrom\s*"([^"]+)"|\bimport\s*\(?\s*"([^"]+)"')
_EXTERNAL = re.compile(r"https?://", re.IGNORECASE)
_MARKUP_SINKS = re.compile(
    r"\.innerHTML\b|\.outerHTML\b|insertAdjacentHTML|document\.write|\beval\s*\(|new Function\b"
    r"|createContextualFragment|DOMParser"
)


def assets() -> list[Path]:
    return sorted(path for path in CONSOLE.rglob("*") if path.is_file())


def references(path: Path) -> list[str]:
    text = path.read_text()
    if path.suffix == ".html":
        return _HTML_REFERENCE.findall(text)
    if path.suffix == ".css":
        return _CSS_REFERENCE.findall(text)
    if path.suffix == ".js":
        return [first or second for first, second in _JS_IMPORT.findall(text)]
    return []


def resolve(path: Path, reference: str) -> Path | None:
    """The packaged file `reference` (in `path`) names; None for a data: URL or a page link."""
    if reference.startswith(("data:", "#")):
        return None
    if reference.startswith(URL_PREFIX):
        return CONSOLE / reference.removeprefix(URL_PREFIX)
    assert not reference.startswith("/"), f"{path.name}: {reference} is outside /console/"
    return (path.parent / reference).resolve()


def test_the_console_has_its_page_and_its_modules():
    names = {path.relative_to(CONSOLE).as_posix() for path in assets()}
    assert {"index.html", "console.css", "js/app.js", "js/api.js"} <= names


def test_every_referenced_asset_is_in_the_package():
    missing = []
    for path in assets():
        for reference in references(path):
            target = resolve(path, reference)
            if target is not None and not target.is_file():
                missing.append(f"{path.relative_to(CONSOLE)} -> {reference}")
    assert not missing, missing


def test_every_module_is_reached_from_the_page():
    """No dead file: each script is imported by the page's module graph."""
    reached: set[Path] = set()
    pending = [CONSOLE / "index.html"]
    while pending:
        path = pending.pop()
        if path in reached:
            continue
        reached.add(path)
        pending.extend(
            target for reference in references(path) if (target := resolve(path, reference))
        )
    assert {path.resolve() for path in assets()} <= {path.resolve() for path in reached}


def test_no_asset_names_an_address_outside_the_broker():
    outside = [
        f"{path.relative_to(CONSOLE)}: {match.group(0)}"
        for path in assets()
        for match in _EXTERNAL.finditer(path.read_text())
    ]
    assert not outside, outside


def test_no_script_parses_text_as_markup():
    """Everything shown goes in as text nodes and attributes, never through an HTML parser."""
    sinks = [
        f"{path.relative_to(CONSOLE)}: {match.group(0)}"
        for path in assets()
        if path.suffix == ".js"
        for match in _MARKUP_SINKS.finditer(path.read_text())
    ]
    assert not sinks, sinks


def test_every_asset_is_package_data():
    """pyproject.toml's package data covers each file, so that an installed broker serves
    the same console as a checkout."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["batonmq"]
    package = CONSOLE.parents[1]
    uncovered = [
        name
        for path in assets()
        if not any(
            fnmatch.fnmatchcase(name := PurePosixPath(path.relative_to(package)).as_posix(), p)
            and PurePosixPath(name).parent == PurePosixPath(p).parent
            for p in patterns
        )
    ]
    assert not uncovered, uncovered
