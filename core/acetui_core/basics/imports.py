"""One thread at a time imports the heavy libraries the engine loads on first use (transformers and the
GGUF reader, huggingface_hub, the engine's modules over them).

The app imports the engine's light modules at start and does heavy work in threads: the New run form's
cost estimates (a model's configuration, the plan; a superseded estimate's thread runs on to its end
beside the next one), its model completions (the Hugging Face cache). A thread that asks transformers for
a name while another is still importing transformers' models meets a half-initialised package and fails
with an ImportError ("cannot import name 'AutoConfig' from 'transformers'") although the installation is
fine: at app start two estimates did so on most starts. Code that may import these libraries from a
thread holds ``HEAVY_IMPORTS`` meanwhile (a re-entrant lock: nested holds are free).
"""

from __future__ import annotations

import threading

HEAVY_IMPORTS = threading.RLock()
