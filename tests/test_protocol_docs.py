"""docs/protocol.md is generated from the registry and never hand-edited."""

from __future__ import annotations

from pathlib import Path

from rmq_ha.protocol import gen_docs
from rmq_ha.protocol.codes import RequestCode, ResponseCode

DOC = Path(__file__).resolve().parents[1] / "docs" / "protocol.md"


def test_committed_docs_equal_generated_output() -> None:
    assert DOC.read_text(encoding="utf-8") == gen_docs.render(), (
        "docs/protocol.md is stale: run `python -m rmq_ha.protocol.gen_docs`"
    )


def test_docs_list_every_code() -> None:
    text = gen_docs.render()
    for code in [*RequestCode, *ResponseCode]:
        assert f"| {int(code)} | `{code.name}` |" in text


def test_check_mode(tmp_path: Path) -> None:
    out = tmp_path / "protocol.md"
    assert gen_docs.main(["--check", "--output", str(out)]) == 1
    assert gen_docs.main(["--output", str(out)]) == 0
    assert gen_docs.main(["--check", "--output", str(out)]) == 0
    assert gen_docs.DOC_PATH == DOC
