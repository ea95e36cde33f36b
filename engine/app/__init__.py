"""The application layer: embedding API, registry, CLI, HTTP service, batch runs and plots."""
