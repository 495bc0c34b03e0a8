"""The example of a job's own settings that `pipelines-dev new` writes, commented out, into a
new job's module above its first function (and the matching section into its YAML). It is
a real file so that it is linted and type-checked like the code: everything below the
marker is what the new module gets."""

# --- example ---
# A section of this job's own settings (docs/configuration.md, "A job's own settings"):
# uncomment, rename, add the `pricing:` section to conf/base/TEMPLATE_JOB.yaml, and add
# Pricing to the job's sections at the end of this module: `job = Job(build, sections=(...))`.
from pathlib import Path
from typing import ClassVar

from pipelines.api import JobSection


class Pricing(JobSection):
    """The `pricing:` section (the name is the job's choice); read it with
    `Pricing.of(settings)` in build or in lookup_client, also on the workers."""

    section: ClassVar[str] = "pricing"
    table: Path  # a file the client reads, e.g. conf/prices.csv
    api_token: str  # a secret: `${env:PRICING_TOKEN}` in the YAML, never its value
