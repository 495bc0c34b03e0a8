"""Files `pipelines-dev new` writes for a new job, kept as real modules so they are formatted,
linted and type-checked like the code: each names its job TEMPLATE_JOB, which `new`
replaces with the new job's name (and nothing else)."""
