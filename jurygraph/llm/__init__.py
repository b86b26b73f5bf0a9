"""Model access: model specs and the runtime context, the one place that calls models, the call cache, rate
limits, prices, the embedded local model."""
