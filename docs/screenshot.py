"""The README's screenshot: the app's Run screen on a recorded run, saved by Textual as SVG.

    python docs/screenshot.py RUN_ID docs/screenshot.svg     # the run store of $ACETUI_HOME

The README's picture is the Run screen of the set-up command's run (acetui prune --method ace --sparsity
2:4 --eval-seqlen 512 --eval-limit 16 on the bundled SmolLM2), in the dark theme at 120x36.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from acetui.app import make_app


async def save(run_id: str, out: Path) -> None:
    app = make_app(theme="dark", attach=run_id)
    async with app.run_test(size=(120, 36)) as pilot:
        for _ in range(50):  # the screen fills from the store's polling thread
            await pilot.pause(0.1)
            if app.screen.query("#layers") and app.screen.query_one("#layers").row_count:
                break
        await pilot.pause(1)
        app.save_screenshot(filename=out.name, path=str(out.parent.resolve()))


if __name__ == "__main__":
    asyncio.run(save(sys.argv[1], Path(sys.argv[2])))
