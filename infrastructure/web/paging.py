"""Pages of a long list: which items page N holds, and the links to its neighbours."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Paging", "sample"]


@dataclass(frozen=True)
class Paging:
    """Page ``page`` (from 1) of ``total`` items, ``per_page`` to a page."""

    page: int
    per_page: int
    total: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per_page))

    @property
    def start(self) -> int:
        """Index of the page's first item (may be past the end: an empty page)."""
        return min(self.total, (self.page - 1) * self.per_page)

    @property
    def stop(self) -> int:
        return min(self.total, self.page * self.per_page)

    def record(self, link: str, default_per_page: int, *, extra: str = "") -> dict[str, Any]:
        """The page's numbers and the links (``link`` plus a query, starting with
        ``extra`` when given) to its neighbours."""

        def at(page: int) -> str:
            size = "" if self.per_page == default_per_page else f"&per_page={self.per_page}"
            return f"{link}?{extra + '&' if extra else ''}page={page}{size}"

        return {
            "page": self.page,
            "pages": self.pages,
            "per_page": self.per_page,
            "total": self.total,
            "prev": at(self.page - 1) if 1 < self.page <= self.pages else None,
            "next": at(self.page + 1) if self.page < self.pages else None,
            "first": at(1),
            "last": at(self.pages),
        }


def sample(count: int, limit: int) -> set[int]:
    """At most ``limit`` indices of ``range(count)``, evenly spread, first and last kept."""
    if count <= limit:
        return set(range(count))
    if limit < 2:
        return {count - 1}
    return {round(i * (count - 1) / (limit - 1)) for i in range(limit)}
