"""Jobs: each module has `build(env, settings)` and a thin `main(argv)`."""

JOBS = ("passthrough", "enrich", "windowed")
