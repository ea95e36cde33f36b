"""The HTTP scheduling service (FastAPI) and its request and response models."""
