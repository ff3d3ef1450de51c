"""Models, layouts and streaming: loading, the table of layouts, expert routing, shards, the streamed layer feed, devices, checkpoints, calibration and evaluation data."""
