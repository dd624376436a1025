"""How a Replay shows itself: a one-line repr (Jupyter's text/plain) and an HTML table of its steps (text/html)."""

from __future__ import annotations

from html.parser import HTMLParser

import torch
from torch import nn
from torch_versions import needs_input_metadata

import gradexport

pytestmark = needs_input_metadata


class _Tables(HTMLParser):
    """The text of every cell, per row, per table; and the text outside tables."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.outside: list[str] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self.cell is not None:
            self.tables[-1][-1].append("".join(self.cell))
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)
        else:
            self.outside.append(data)


def _parse(html: str) -> _Tables:
    parser = _Tables()
    parser.feed(html)
    parser.close()
    return parser


def _model_replay(width: int = 8) -> tuple[gradexport.records.Replay, nn.Module]:
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(6)])
    return gradexport.replay(model(torch.randn(4, width)).sum(), module=model), model


def test_repr_is_one_short_line_without_tensor_values() -> None:
    record, model = _model_replay(width=64)
    text = repr(record)
    assert "\n" not in text and len(text) < 300 and "tensor(" not in text
    assert text.startswith(f"Replay({len(record.steps)} steps from 1 root: ")
    assert record.label(record.steps[0].node) in text and record.label(record.steps[-1].node) in text
    names = [name for name, _ in model.named_parameters()]
    assert names[0] in text and f"({len(names) - 6} more)" in text


def test_str_stays_the_full_text() -> None:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    record = gradexport.replay((x * 3).sum(), params={"x": x})
    assert str(record) == record.to_text()
    assert repr(record) == "Replay(3 steps from 1 root: n1 SumBackward0 -> n3 AccumulateGrad (x); grads: x)"


def test_html_has_one_row_per_start_and_step_and_one_per_leaf() -> None:
    record, model = _model_replay()
    tables = _parse(record._repr_html_()).tables
    steps, grads = tables
    assert steps[0] == ["step", "node", "op", "names", "in", "out"]
    assert [row[:3] for row in steps[2:]] == [[str(n), s.node, s.op] for n, s in enumerate(record.steps, start=1)]
    leaf_names = {row[3] for row in steps[2:] if row[2] == "AccumulateGrad"}
    assert leaf_names == {name for name, _ in model.named_parameters()}
    assert [row[0] for row in grads[1:]] == list(record.grads)
    assert all(len(row) == 6 for row in steps[1:])


def test_html_escapes_names() -> None:
    x = torch.ones(2, requires_grad=True)
    name = "<script>alert('x')</script> & co"
    html = gradexport.replay({name: (x * 2).sum()}, params={name: x})._repr_html_()
    assert "<script>" not in html
    tables = _parse(html).tables
    assert tables[0][1][3] == name  # the start row names the root
    assert tables[1][1][0] == name  # the leaf's .grad row


def test_html_of_a_long_replay_shows_the_first_steps_and_says_how_many_are_left() -> None:
    x = torch.ones(1, requires_grad=True)
    y = x
    for _ in range(300):
        y = y * 1.01
    record = gradexport.replay(y.sum())
    parsed = _parse(record._repr_html_(max_steps=50))
    assert len(parsed.tables[0]) == 1 + 1 + 50
    assert f"{len(record.steps) - 50} more steps" in "".join(parsed.outside)
