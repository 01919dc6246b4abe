"""Torch-free records and decisions: manifest, policy, plan, result, check API, catalogue, schemas."""
