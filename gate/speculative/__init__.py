"""Speculative (proposal-and-verify) sampling: the sampler, exact output laws, the path, the goodness-of-fit test."""
