"""``TextField``: the app's one-line text field, an ``Input`` that applies every key in the order it
arrives, however fast the keys come (SSH, tmux, a paste of keys, a fast typist).

Textual's ``Input`` types printable keys in its own key handler, but its editing keys (backspace, delete,
the arrows, home, end, ctrl+u...) are bindings, which the app looks up only once the key has bubbled from
the field up to the app, one message queue at a time. The keys read in the same burst are meanwhile
handed to the field and typed first: ``abc``, backspace, ``d`` in one read left ``abc``, not ``abd`` (the
``d`` typed, then deleted). A ten-line app with one ``Input`` shows it with Textual 3.0 to 8.2
(``tests/test_textfield.py`` keeps that reproduction beside the fix's test). Here the field runs its own
bindings as the key reaches it, before the next key is read from its queue. A priority key read after
them (tab, ctrl+r) waits for them to be typed (``acetui.app.keyorder.keys_typed_before``).
"""

from __future__ import annotations

from textual import events
from textual.widgets import Input


class TextField(Input):
    async def _on_key(self, event: events.Key) -> None:
        if not event.is_printable:
            # The field's own bindings only: the screen's and the app's keep their usual turn (a priority
            # binding has already had its turn before the key was handed to the field).
            for binding in self._bindings.key_to_bindings.get(event.key, ()):
                if not binding.priority and await self.app.run_action(binding.action, self):
                    event.stop()
                    event.prevent_default()
                    return
        await super()._on_key(event)
