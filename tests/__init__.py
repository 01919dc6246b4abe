"""gate's test suite; folders mirror the gate package."""
