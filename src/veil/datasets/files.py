"""Where veil finds real data files, and how it fetches them on a machine with internet.

A file ``<name>/<file>`` (for instance ``adult/adult.csv``) is looked up, in order, under

1. the ``path=`` a caller passes (a folder holding ``adult/``, ``nursery/``),
2. the folder in the ``VEIL_DATA`` environment variable,
3. ``../shared/datasets`` beside the current directory or beside the source checkout,
4. the download cache ``$XDG_CACHE_HOME/veil/datasets`` (``~/.cache/veil/datasets``).

If none holds it, the public original is downloaded into the cache and checked against its
SHA-256 digest before use, unless downloads are switched off with ``VEIL_NO_DOWNLOAD=1``
(the test suite does this: tests never download).
"""

from __future__ import annotations

import hashlib
import logging
import os
import urllib.request
from pathlib import Path

from veil._io import atomic_write
from veil.errors import DataError

log = logging.getLogger(__name__)

_UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases"
_ARX = "https://raw.githubusercontent.com/arx-deidentifier/arx/master/data"

#: relative path -> (public URL, SHA-256 of the expected content)
FILES: dict[str, tuple[str, str]] = {
    "adult/adult.data": (f"{_UCI}/adult/adult.data",
                         "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d"),
    "adult/adult.test": (f"{_UCI}/adult/adult.test",
                         "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05"),
    "adult/adult.csv": (f"{_ARX}/adult.csv",
                        "c700df9304fbf3c4d4db5938bffc510561bd4a2dfad285a3feef9a20619391c5"),
    "nursery/nursery.data": (f"{_UCI}/nursery/nursery.data",
                             "8e0389c3dd37590248a921c2726d869ee96b817761a35eb8416afa24f31f931d"),
}
_HIERARCHY_DIGESTS = {
    "age": "463f35372e8b1ad31fc624eb73c5da9297878a044ae5d61038eaf7b431ac55ca",
    "education": "f22e5ee519c28b05538d4e5ddea0fbee5f0017fefb3abab3fa02272325bf9ce5",
    "marital-status": "3e7ba2c4a5cd4fec059b4e3a2c57fce6e7c34a20daee1e624990ddd7beba85e5",
    "native-country": "696d3b53973311c096b33f98bb56e526016910b1a1cd5a1e904cb799d1077023",
    "occupation": "16dc420d5d7f8ab4d1e6144eb1d19ab8314ef42523fe8c4ee202372db1c98126",
    "race": "df11abf41fa0669455adc9c9f9fa88663afa0cee8327684ecca861cd32dc4209",
    "salary-class": "404895b3fcfb615813efab7ae0d2c50c8b127cec651f9b37d44a648646f86345",
    "sex": "537d23f7b6969b916b5a5490eb1b32c273fefdc62ca050a7a813e23bbf3b78b2",
    "workclass": "106f420349bf0071dbb25371795a78799edf24a64c3424619d563c3990ee8d02",
}
for _col, _digest in _HIERARCHY_DIGESTS.items():
    FILES[f"adult/adult_hierarchy_{_col}.csv"] = (f"{_ARX}/adult_hierarchy_{_col}.csv", _digest)
ADULT_HIERARCHY_COLUMNS = tuple(_HIERARCHY_DIGESTS)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "veil" / "datasets"


def search_roots(path: str | os.PathLike | None = None) -> list[Path]:
    """The folders searched for data files, in order of precedence."""
    roots: list[Path] = []
    if path is not None:
        roots.append(Path(path))
    env = os.environ.get("VEIL_DATA")
    if env:
        roots.append(Path(env))
    checkout = Path(__file__).resolve().parents[3]
    for base in (Path.cwd(), checkout):
        roots.append(base.parent / "shared" / "datasets")
    roots.append(cache_dir())
    return roots


def locate(relpath: str, path: str | os.PathLike | None = None) -> Path | None:
    """The first existing copy of ``relpath``, or None."""
    for root in search_roots(path):
        candidate = root / relpath
        if candidate.is_file():
            return candidate
    return None


def downloads_allowed() -> bool:
    return os.environ.get("VEIL_NO_DOWNLOAD", "").strip().lower() not in {"1", "true", "yes"}


def fetch(relpath: str, path: str | os.PathLike | None = None) -> Path:
    """Path of a data file, downloading and verifying the public original if needed."""
    if relpath not in FILES:
        raise DataError(f"unknown data file {relpath!r}; known: {', '.join(sorted(FILES))}")
    found = locate(relpath, path)
    if found is not None:
        return found
    url, digest = FILES[relpath]
    if not downloads_allowed():
        roots = ", ".join(str(r) for r in search_roots(path))
        raise DataError(f"data file {relpath!r} not found under {roots} and downloads are off "
                        "(VEIL_NO_DOWNLOAD); pass path= or set VEIL_DATA")
    target = cache_dir() / relpath
    target.parent.mkdir(parents=True, exist_ok=True)
    log.info("downloading %s", url)
    try:
        with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310 (fixed https URLs)
            content = response.read()
    except OSError as exc:
        raise DataError(f"could not download {relpath!r} from {url}: {exc}; "
                        "pass path= or set VEIL_DATA to a folder that holds it") from None
    actual = hashlib.sha256(content).hexdigest()
    if actual != digest:
        raise DataError(f"downloaded {relpath!r} has SHA-256 {actual}, expected {digest}; "
                        "the upstream file changed: place the original under VEIL_DATA")
    atomic_write(target, content)
    return target
