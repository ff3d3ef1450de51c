"""A study: a comparison declared in one TOML file, run and resumed through the executors, reported from the store as one folder."""
