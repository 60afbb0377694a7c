"""numpy functions on Tracers beyond numpy_api's core, one module per theme; numpy_api's
table (API) names them. Each composes IR ops (or emits the few ops of its own family)."""
