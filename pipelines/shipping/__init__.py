"""The package `pipelines package` writes: what a cluster runs, and how to submit it there."""
