"""Running and stopping a job: loading, wiring, the local run and a job's __main__, one-line errors, signals, progress, the processes a run owns."""
