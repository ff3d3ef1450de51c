"""``KeysWhereTyped``: a key acts where it was typed, even when focus has moved on before it is handled.

Textual hands a key to the focused widget, which lets it bubble up to the app; only there does the app look
up the screen's and the app's bindings, from the widget focused *then*. In one burst (SSH, tmux, a fast
typist) a priority key read after it may already have moved focus: ``/ lla Tab r BTab ma`` handed ``r`` to
the table, but shift+tab had put focus back in the filter by the time ``r`` reached the app, and the
filter's binding chain drops printable keys (a text field takes them), so the table's ``r`` (reverse the
sort) was lost. The app notes which widget each key was handed to and, when focus has moved since, looks
the key up from there. ``TextField`` (``acetui.app.widgets.textfield``) does the same inside a field, for
the field's own editing keys.
"""

from __future__ import annotations

import asyncio
import contextlib

from textual import events
from textual.app import App
from textual.binding import BindingsMap
from textual.dom import DOMNode
from textual.keys import key_to_character
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable

from acetui.app.widgets.marks import TickList
from acetui.app.widgets.textfield import TextField


class KeysWhereTyped(App):
    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key) and not event.is_forwarded and (keys := escape_then_key(event)):
            for key in keys:
                await self.on_event(key)
            return
        if isinstance(event, events.Key) and not event.is_forwarded:
            if isinstance(self.focused, (DataTable, TickList)) and await self._list_key_now(event.key):
                return
            event.typed_into = self.focused  # type: ignore[attr-defined]  # the widget it is about to be handed to
            event.typed_on = self.screen  # type: ignore[attr-defined]  # and its screen
        await super().on_event(event)

    async def _list_key_now(self, key: str) -> bool:
        """A key typed into a run table or a tick list acts as the app reads it, its bindings looked up from
        the list as Textual would once the key had bubbled back up: the screens' keys that leave the table
        (enter, ``o``, ``u``) and ctrl+r act when read, so an arrow typed before them in one burst (``Up u``)
        must have moved the cursor by then, and a key typed before an arrow (``space Down space``) must act
        on its row. Both handle keys by bindings alone (no key handler of their own), so nothing else is
        skipped."""
        return await self._check_bindings(key, priority=True) or await self._check_bindings(key)

    async def action_focus_next(self) -> None:  # type: ignore[override]  # Textual awaits an async action
        await keys_typed_before(self.focused)
        self.screen.focus_next()

    async def action_focus_previous(self) -> None:  # type: ignore[override]
        await keys_typed_before(self.focused)
        self.screen.focus_previous()

    async def _on_key(self, event: events.Key) -> None:
        # Textual calls every class's ``_on_key`` down the MRO: returning hands the key to ``App._on_key``
        # (the bindings of the widget focused now); ``prevent_default`` keeps it from there.
        typed_on: Screen | None = getattr(event, "typed_on", None)
        if typed_on is not None and typed_on is not self.screen and self._screen_gone(typed_on):
            # Handed to a screen that has closed since (a priority key after it in the burst left it): the key
            # was meant for that screen, not for the one shown now. ``escape F3 F5`` on the keys panel: F3
            # closed it and went to Results, F5 opened Results' keys, and the escape then closed those.
            event.prevent_default()
            return
        typed_into: Widget | None = getattr(event, "typed_into", None)
        if typed_into is None or typed_into is self.focused or not typed_into.is_attached:
            return
        event.prevent_default()
        for namespace, bindings in binding_chain(typed_into, event.key):
            for binding in bindings.key_to_bindings.get(event.key, ()):
                if not binding.priority and await self.run_action(binding.action, namespace):
                    return

    def _screen_gone(self, screen: Screen) -> bool:
        """Whether ``screen`` is in no mode's stack any more (popped or dismissed)."""
        return all(screen not in stack for stack in self._screen_stacks.values())


def escape_then_key(event: events.Key) -> tuple[events.Key, events.Key] | None:
    """Escape and a letter or digit in one read (``escape e`` in a burst: back from the paper view, then export)
    are what a terminal sends for alt+e, and Textual reads them so: both keys were lost. The app binds no alt
    key, so such a key is taken as the two keys typed."""
    character = event.character
    if not (event.key.startswith("alt+") and character and len(character) == 1 and character.isalnum()):
        return None
    return events.Key("escape", "\x1b"), events.Key(character, character)  # named as Textual names it alone


async def keys_typed_before(focused: Widget | None) -> None:
    """Wait until the keys handed to ``focused`` before now have acted. A priority key (tab, ctrl+r) runs as
    the app reads it, while the keys before it in the burst may still wait in the focused field:
    ``C-u Smol Tab Enter`` tabbed past the model's completions, which "Smol" had not yet shown, and
    ``C-u 0.6 C-r`` in Sparsity started a run at the 0.5 it held."""
    if not isinstance(focused, (TextField, TickList)):
        return  # a table's keys have acted as the app read them
    # A text field types them in its own queue; a tick list's space (run as read) ticks by a message to it.
    applied = asyncio.Event()
    if not focused.call_later(applied.set):  # queued behind those keys; False: the widget is closing
        return
    # A bound on the wait, should the field never get to it: 1 s was too short on a loaded machine (a GPU box's
    # cores busy with a run), where tab then acted before the text typed ahead of it (a test did so in CI).
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(applied.wait(), timeout=10.0)


def binding_chain(widget: Widget, key: str) -> list[tuple[DOMNode, BindingsMap]]:
    """The bindings ``key`` meets from ``widget`` up, as Textual's own chain from the focused widget: up
    to the first modal screen, and past a node that takes the key as text (an ``Input``) no further."""
    chain: list[tuple[DOMNode, BindingsMap]] = []
    for node in widget.ancestors_with_self:
        chain.append((node, node._bindings))
        if node.is_modal or node.check_consume_key(key, key_to_character(key)):
            break
    return chain
