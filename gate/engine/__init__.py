"""Runs a plan: adapters built, checks and their negative controls run, verdict decided, outputs written."""
