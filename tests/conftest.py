from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq_ha._native import Store
from storeutil import StoreFactory


@pytest.fixture
def open_native(tmp_path: Path) -> Iterator[StoreFactory]:
    """Opens native stores (default root tmp_path/"store", 64 KiB segments); closes them all
    at teardown so no flush thread outlives a test."""
    opened: list[Store] = []

    def _open(root: Path | None = None, **options: Any) -> Store:
        options.setdefault("segment_size", 64 * 1024)
        s = Store(root if root is not None else tmp_path / "store", **options)
        opened.append(s)
        return s

    yield _open
    for s in opened:
        s.close()
