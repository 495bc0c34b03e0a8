"""Jobs the integration tests build from the stages, beside the project's own."""
