"""What the text renderers beside the reports share.

A renderer turns a report into rich renderables and prints nothing: the CLI prints them on
stdout, the gate puts them in its text output and HTML page, a server can send them. So a
renderer returns a list (one item per printed line or table) and never touches a console.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import RenderHook
from rich.measure import Measurement
from rich.segment import Segment
from rich.text import Text

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult

Lines = list["RenderableType"]
"""What a renderer returns: printed one after the other, each on lines of its own."""


def line(markup: str = "") -> Text:
    """One line of console markup (``[bold]...[/]``); values in it must be ``escape``d."""
    return Text.from_markup(markup)


def verdict(passed: bool) -> str:
    """``PASS`` in green or ``FAIL`` in red, as markup."""
    return "[bold green]PASS[/]" if passed else "[bold red]FAIL[/]"


class Unclipped:
    """A renderable drawn at its full width even when the console is narrower.

    A table of figures must never lose a digit to fit a terminal: wider than the console, it is
    drawn at the width it needs and the terminal wraps its lines instead.
    """

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        needed = Measurement.get(console, options.update_width(10_000), self.renderable).maximum
        yield from console.render(
            self.renderable, options.update_width(max(options.max_width, needed))
        )

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options.update_width(10_000), self.renderable)


def printable(text: str, keep: str = "\n\t") -> str:
    r"""``text`` with each character that is not printable as its escape (``\x1b``, ``\u202e``).

    Names, messages and attributes come from untrusted models: an ESC sequence in a node name
    could hide a verdict or rewrite the terminal's title.
    """
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() or c in keep else c.encode("unicode_escape").decode() for c in text
    )


class Scrubbed:
    """A renderable whose text has its control characters escaped; rich's own styling is kept.

    Styles and cursor moves are rich's (segment styles, control segments), added when it writes;
    the text of every segment is what was given to it, model text included, and is escaped here.
    """

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for segment in console.render(self.renderable, options):
            if segment.control or segment.text.isprintable():
                yield segment
            else:
                yield Segment(printable(segment.text), segment.style)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.renderable)


class Scrub(RenderHook):
    """``console.push_render_hook(Scrub())``: everything the console prints goes out scrubbed."""

    def process_renderables(self, renderables: list[RenderableType]) -> list[RenderableType]:
        return [Scrubbed(r) for r in renderables]
