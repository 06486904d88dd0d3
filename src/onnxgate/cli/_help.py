"""Option panels of ``--help`` that keep every option's name whole on a narrow terminal.

Typer lays options out as a table of up to seven columns (required mark, long and short names,
negative forms, type, help) whose widths rich fits to the terminal; at 80 columns it cuts long
names (``--no-second-opini…``) and squeezes the help into a column a dozen characters wide. Below
``NARROW`` columns the options are stacked instead, as man pages do: each option's names and
type on a line of their own, its help indented below at the full width. Wider terminals keep
typer's table. The stacked layout reads typer's own parameter objects and help text; if a typer
release changes them, the table comes back rather than an error.
"""

from __future__ import annotations

import logging
from typing import Any

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.text import Text
from typer import rich_utils
from typer.core import TyperArgument

log = logging.getLogger(__name__)

NARROW = 100
"""Terminals narrower than this get the stacked layout."""


def install() -> None:
    """Replace typer's options panel with one that stacks options on narrow terminals."""
    original = rich_utils._print_options_panel
    if getattr(original, "stacks_when_narrow", False):
        return

    def options_panel(*, name: str, params: Any, ctx: Any, markup_mode: Any, console: Any) -> None:
        if console.width < NARROW:
            try:
                stacked = _stacked(params, ctx, markup_mode)
            except (AttributeError, TypeError) as error:  # typer's internals moved
                log.debug("typer's option panel kept: %s", error)
            else:
                console.print(
                    Panel(
                        stacked,
                        border_style=rich_utils.STYLE_OPTIONS_PANEL_BORDER,
                        title=name,
                        title_align=rich_utils.ALIGN_OPTIONS_PANEL,
                    )
                )
                return
        original(name=name, params=params, ctx=ctx, markup_mode=markup_mode, console=console)

    options_panel.stacks_when_narrow = True  # type: ignore[attr-defined]
    rich_utils._print_options_panel = options_panel


def _stacked(params: Any, ctx: Any, markup_mode: Any) -> RenderableType:
    items: list[RenderableType] = []
    for param in params:
        items.append(_names(param, ctx))
        help_text = rich_utils._get_parameter_help(param=param, ctx=ctx, markup_mode=markup_mode)
        items.append(Padding(help_text, (0, 0, 0, 4)))
    return Group(*items)


def _names(param: Any, ctx: Any) -> Text:
    """``* --out, -o  <path>``: the names whole, never cut (folded if they must be)."""
    if isinstance(param, TyperArgument):
        names = [param.display_name_raw]
    else:
        names = sorted(param.opts, key=lambda opt: not opt.startswith("--"))
        names += sorted(param.secondary_opts, key=lambda opt: not opt.startswith("--"))
    text = Text(overflow="fold", no_wrap=False)
    text.append("* " if param.required else "  ", style=rich_utils.STYLE_REQUIRED_SHORT)
    text.append(", ".join(names), style=rich_utils.STYLE_OPTION)
    shown = param.display_type_rich(ctx=ctx)
    if shown:
        text.append(f"  {shown}", style=rich_utils.STYLE_TYPES)
    return text
