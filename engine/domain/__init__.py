"""The domain layer: model, errors, protocols, predictor protocols and catalogs. Imports nothing above it."""
