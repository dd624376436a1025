"""How report objects show in a notebook: readable text, a one-line repr, and HTML whose names stay text.

The HTML is read back with Python's own HTML parser: a module or parameter
named like a tag must come back as text, never as an element.
"""

from __future__ import annotations

from html.parser import HTMLParser

import torch
from torch import nn

import gradexport


class Reader(HTMLParser):
    """The tags and the text of an HTML fragment, as a browser's parser splits them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def read(markup: str) -> Reader:
    reader = Reader()
    reader.feed(markup)
    reader.close()
    return reader


HOSTILE = "<script>alert(1)</script>"


def test_nonfinite_report_repr_text_and_html() -> None:
    x = torch.tensor([0.0, 4.0], requires_grad=True)
    report = gradexport.find_nonfinite(x.sqrt().sum(), params={HOSTILE: x})
    assert report is not None
    assert repr(report).startswith("NonfiniteReport(parameters received non-finite gradients:")
    assert "origins=(" not in repr(report) and "NonfiniteOrigin(" not in repr(report)
    assert str(report) == report.to_text()
    page = read(report._repr_html_())
    assert "script" not in page.tags and {"table", "pre"} <= set(page.tags)
    text = "".join(page.text)
    assert HOSTILE in text and "SqrtBackward0" in text and report.verdict() in text


class Hostile(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.add_module(HOSTILE, nn.Linear(4, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(self, HOSTILE)(x).tanh().sum()


def test_saved_memory_html_escapes_module_names() -> None:
    model = Hostile()
    with gradexport.capture_modules():
        loss = model(torch.ones(2, 4))
    report = gradexport.tools.saved_memory(loss, module=model)
    page = read(report._repr_html_())
    assert "script" not in page.tags and "table" in page.tags
    text = "".join(page.text)
    assert HOSTILE in text and "TanhBackward0" in text and "activations" in text


def test_diff_summary_is_its_text_and_shows_as_a_table() -> None:
    x = torch.ones(3, requires_grad=True)
    graph = gradexport.diff((x * 2).sum(), (x * 2).exp().sum())
    summary = gradexport.records.describe_diff(graph)
    assert isinstance(summary, str) and str(summary).startswith("nodes: 4 same")
    assert summary.counts["nodes"]["added"] == sum(1 for _, state in graph.nodes(data="diff") if state == "added")
    assert repr(summary) == f"DiffSummary({summary.splitlines()[0]})"
    page = read(summary._repr_html_())
    assert page.tags.count("tr") == 3 and "ExpBackward0" in "".join(page.text)
