-- A run store as acetui 0.0 wrote it (schema version 0): no application id, no heartbeat, host,
-- environment or cancel flag, and each layer's linears kept as one JSON list.
CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    created REAL NOT NULL,
    started REAL,
    finished REAL,
    pid INTEGER,
    config TEXT NOT NULL,
    error TEXT,
    results TEXT
);
CREATE TABLE layers (
    run_id TEXT NOT NULL,
    layer INTEGER NOT NULL,
    seconds REAL NOT NULL,
    linears TEXT NOT NULL,
    PRIMARY KEY (run_id, layer)
);
INSERT INTO runs VALUES ('0ld0run1', 'finished', 1700000000.0, 1700000001.0, 1700000090.0, 4242,
    '{"model": "facebook/opt-125m", "method": "wanda", "sparsity": "0.5", "seqlen": 16, "nsamples": 128}',
    NULL, '{"ppl_wikitext2": 38.96, "ppl_windows": 140, "ppl_partial": false, "prune_seconds": 12.5}');
INSERT INTO runs VALUES ('0ld0run2', 'failed', 1700000100.0, 1700000101.0, 1700000102.0, 4243,
    '{"model": "facebook/opt-125m", "method": "ace", "sparsity": "2:4", "seqlen": "full", "nsamples": 128}',
    'CUDA out of memory.', NULL);
INSERT INTO layers VALUES ('0ld0run1', 0, 1.25,
    '[{"name": "self_attn.q_proj", "d_out": 768, "d_in": 768, "sparsity": 0.5, "seconds": 0.1,
       "act_stats": {"x2_mean": {"min": 0.0, "median": 0.5, "max": 3.0}},
       "histogram": {"edges": [0.0, 1.0, 2.0], "counts": [5, 7], "threshold": 1.0, "log": false}},
      {"name": "fc1", "d_out": 3072, "d_in": 768, "sparsity": 0.5, "seconds": 0.3, "act_stats": {}, "histogram": null}]');
INSERT INTO layers VALUES ('0ld0run1', 1, 1.5, '[]');
