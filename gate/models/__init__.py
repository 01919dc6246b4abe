"""The reference decoder gate ships: a small gpt-fast style model that knows nothing of the gate."""
