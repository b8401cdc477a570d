"""An HTML page as the tests read it: the standard library's parser, no browser."""

from __future__ import annotations

from html.parser import HTMLParser


class Page(HTMLParser):
    """What a browser would build from the page, in the parts the tests read: each table's rows
    (cell texts, unescaped), every element with its attributes, the text of `<title>`s in the chart."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, dict[str, list[list[str]]]] = {}
        self.elements: list[tuple[str, dict]] = []
        self.tips: list[str] = []
        self.text: list[str] = []
        self._table = self._part = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._in_tip = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.elements.append((tag, attrs))
        if tag == "table":
            self._table = self.tables.setdefault(attrs.get("id", ""), {})
        elif tag in ("thead", "tbody", "tfoot") and self._table is not None:
            self._part = self._table.setdefault(tag, [])
        elif tag == "tr" and self._part is not None:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "title" and any(t == "svg" for t, _ in self.elements):
            self._in_tip = True

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self._part.append(self._row)
            self._row = None
        elif tag == "table":
            self._table = self._part = None
        elif tag == "title":
            self._in_tip = False

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)
        if self._in_tip:
            self.tips.append(data)


BYTE_COLUMNS = ("dirtyBytes", "bytesRead", "bytesWritten", "reclaimableBytes", "reclaimableRecords")


def number(cell: str) -> int:
    return int(cell.replace(",", ""))


def partition_rows(page: Page) -> list[dict]:
    """The partition table's rows in the report's terms: its fields, the counts parsed back, the
    dirty ratio as shown."""
    out = []
    for topic, partition, status, ratio, *numbers, reason in page.tables["partitions"]["tbody"]:
        out.append(
            {
                "topic": topic,
                "partition": int(partition),
                "status": status,
                "dirtyRatio": ratio,
                **dict(zip(BYTE_COLUMNS, map(number, numbers))),
                "reason": reason,
            }
        )
    return out


def expected_rows(report: dict) -> list[dict]:
    """What `partition_rows` must read for `report`: every entry, failed ones first, then the most
    reclaimable bytes first."""
    order = sorted(
        report["partitions"],
        key=lambda e: (e["status"] != "failed", -e["reclaimableBytes"], e["topic"], e["partition"]),
    )
    return [
        {
            "topic": e["topic"],
            "partition": e["partition"],
            "status": e["status"],
            "dirtyRatio": "\u2013" if e["dirtyRatio"] is None else f"{e['dirtyRatio']:.3f}",
            **{k: e[k] for k in BYTE_COLUMNS},
            "reason": e["reason"] or "",
        }
        for e in order
    ]
